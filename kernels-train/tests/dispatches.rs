//! How many dispatches a training step of a gpt2-small-shaped model records (12 layers, width
//! 768, 12 heads, bytes), in f32 and in mixed precision: the count is recorded, not timed, and
//! nothing runs (`Model::step_dispatches`), so the full context of 1024 tokens costs only the
//! allocation. The count depends on the shape and on the plans the adapter gets (a product whose
//! contraction is split into parts records their sum as one more dispatch; the SIMT weight
//! gradients split from 1024 rows on, so one sequence of 1024 records what a batch of 8 does), not
//! on the adapter's speed.

mod common;

use kernels_train::config::{ModelConfig, TrainConfig};
use kernels_train::model::{Attention, Model, ModelOptions, Precision};
use kernels_train::params;

/// Upper bounds of the step's dispatches on the adapter CI runs (lavapipe: no tensor cores, so
/// the f32 products are the SIMT ones and the f16 products unsplit), f32 and mixed precision:
/// the counts measured there, so any dispatch a change adds to the step shows up here.
///
/// What a step records, per layer: four weight matrices (Wq, Wk, Wv stacked as one, W1 and W3
/// as another: `params::fused`), each one forward product, one input gradient and one weight
/// gradient (12); two RMSNorms forward and two backward; SwiGLU forward and backward; RoPE
/// forward and backward (each writing Q, K, V or the fused dqkv directly, in f16 in mixed
/// precision, where SwiGLU's and RoPE's forwards run in the epilogues of the gate/up and the
/// attention projection's products: `gemm::gemm_swiglu`, `gemm::gemm_rope_qkv`); attention (flash: forward, Δ with dO's f16 copy, dK/dV, dQ). Once a step: the
/// embedding, the final norm, the tied head, the loss, the embedding backward (slices and their
/// reduce), every norm's dγ in one dispatch (`norm::rmsnorm_dgamma_reduce_all`), the gradient
/// norm (one dispatch per page of the gradients: `model::arena`) and its stats, and AdamW (one
/// dispatch per run of tensors of one weight decay: two on one page). The SIMT f32 weight
/// gradients split into parts and add them in one more dispatch each.
const MAX_F32: usize = 404;
const MAX_MIXED: usize = 284;

/// The same bounds where tensor cores run the products (an H100 or H200 takes the H200's
/// table). Mixed precision: the weight gradients the table splits into parts leave them for one
/// sum a layer (`gemm::add_parts`): 23 a layer and 18 a step, the weights' transposed f16
/// copies after the update one of them (one dispatch a page, `model::products::Transposed`,
/// where the input gradients run on the exact kernels). f32 goes through the scaled
/// split, each operand split once a step: the weights after the update (one clear of the scale
/// words, each matrix's AdamW folding its maximum in, one split per matrix), the layer inputs
/// that only products read when the forward makes them (their word's clear, max and split), the
/// output gradients in the backward (the same three). A product then records its scale words
/// and itself; one that splits an operand itself (the attention output's, which stays f32 for
/// the attention backward) its max and split too; a residual its copy, a weight gradient its
/// parts' sum. Its AdamW runs per tensor.
const MAX_F32_TENSOR_CORES: usize = 999;
const MAX_MIXED_TENSOR_CORES: usize = 294;

/// The f32 step on the split core in its portable form (`ModelOptions::split_products`), counted
/// on any adapter: the same products, plans and halves as the tensor-core f32 step, so the
/// count differs from MAX_F32_TENSOR_CORES only by what the adapter's attention path and its
/// pages record (lavapipe: fast attention; the pages its binding limit allows).
const MAX_F32_SPLIT: usize = 1001;

fn gpt2_small() -> ModelConfig {
    ModelConfig::new(768, 12, 12, 12, 1024)
}

fn count(gpu: &kernels::Gpu, precision: Precision, split_products: bool) -> Option<usize> {
    let cfg = gpt2_small();
    let t = TrainConfig { batch: 1, precision, ..TrainConfig::default() };
    let options = ModelOptions { attention: Attention::Auto, precision, split_products, ..ModelOptions::default() };
    let weights = params::init(&cfg, 1).unwrap();
    let mut model = match Model::with_options(gpu, &cfg, 1, &weights, None, options) {
        Ok(m) => m,
        Err(e) if precision == Precision::Mixed && !gpu.features().contains(kernels::wgpu::Features::SHADER_F16) => {
            eprintln!("SKIPPED mixed precision: {e}");
            return None;
        }
        Err(e) => panic!("{precision:?}: {e}"),
    };
    let n = model.step_dispatches(1, &t, 0).unwrap();
    // At least the linear layers' products (4 weight matrices per layer plus the head, each a
    // forward, an input gradient and a weight gradient): a count below that is not a step.
    let products = 3 * (4 * cfg.layers + 1);
    assert!(n >= products, "{precision:?}: {n} dispatches, fewer than the {products} products of a step");
    let how = if split_products { ", split products" } else { "" };
    eprintln!("gpt2-small step, {precision:?}{how} ({:?} attention): {n} dispatches", model.attention);
    Some(n)
}

#[test]
fn a_gpt2_small_step_stays_within_its_dispatch_budget() {
    let Some(gpu) = common::gpu() else { return };
    let tensor_cores = kernels::ops::on_tensor_cores(&gpu, &kernels::linear::gemm16::KERNEL);
    let (max_f32, max_mixed) =
        if tensor_cores { (MAX_F32_TENSOR_CORES, MAX_MIXED_TENSOR_CORES) } else { (MAX_F32, MAX_MIXED) };
    let f32 = count(&gpu, Precision::F32, false).unwrap();
    assert!(f32 <= max_f32, "f32: {f32} dispatches, over the budget of {max_f32} (tensor cores: {tensor_cores})");
    if gpu.features().contains(kernels::wgpu::Features::SHADER_F16) {
        let split = count(&gpu, Precision::F32, true).unwrap();
        assert!(
            split <= MAX_F32_SPLIT,
            "f32 on the split core: {split} dispatches, over the budget of {MAX_F32_SPLIT}"
        );
        if tensor_cores {
            assert_eq!(split, f32, "the f32 step runs the split core on tensor cores");
        }
    }
    if let Some(mixed) = count(&gpu, Precision::Mixed, false) {
        assert!(
            mixed <= max_mixed,
            "mixed: {mixed} dispatches, over the budget of {max_mixed} (tensor cores: {tensor_cores})"
        );
    }
}
