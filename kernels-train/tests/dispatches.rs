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
/// the counts measured there, so any dispatch a change adds to the step shows up here. The model
/// keeps Wq, Wk, Wv as one weight and W1, W3 as another (`params::fused`), so a layer has four
/// weight matrices, each one forward product, one input gradient and one weight gradient (the
/// SIMT weight gradients split into parts and add them in one more dispatch). Of the f32 step's
/// 497, the update takes 95: the gradient norm 21 (74 tensors, four a dispatch: 18 + 2, then the
/// stats) and AdamW one per tensor (74); the forward, the loss and the backward the rest, the
/// RMSNorm dγ reduces among them four norms a dispatch (`norm::rmsnorm_dgamma_reduce4`: 25
/// norms in 6 + 1, where one a norm would take 25). The mixed step takes flash attention
/// (`AUTO_ORDER_MIXED`): five dispatches a layer fewer than the fast path's attention; its loss
/// head is one kernel (`loss::cross_entropy_f16`); of its casts, one a layer remains (dO's
/// gradient cast): the others are written in f16 by the kernels that make the values
/// (attention's output by the flash forward; Q, K, V by RoPE from the fused projection,
/// `rope::rope_qkv_f16`, and the fused projection's gradient by RoPE's backward from dq, dk, dv,
/// `rope::rope_qkv_backward_f16`).
const MAX_F32: usize = 497;
const MAX_MIXED: usize = 413;

/// The same bounds where tensor cores run the products: the f32 products go through the scaled
/// split, and the f16 weight gradients split into parts by the adapter's tuning table add their
/// sums. The f32 products split their activations per product (A's scale word, max and split;
/// both operands for the weight gradients) and read each weight's halves, made once a step
/// after the update: one clear of the scale words, each matrix's AdamW folding its maximum in,
/// and one split per matrix, so a forward or input-gradient product records 4 dispatches (5
/// with a residual) and a weight gradient 7.
///
/// f32: from the 2038 measured on an H200 with every product splitting both operands, the
/// projections unfused and the embedding backward in one dispatch: 2038 − 2 × 170 products +
/// 86 weight splits + 1 (the sliced embedding backward's reduce) = 1785. The fused projections
/// remove 54 dispatches a layer on any adapter — Q, K, V's products 12 + 35 → 4 + 11, gate and
/// up's 8 + 23 → 4 + 11, three AdamW and three weight splits — and 9 of the gradient norm (110
/// tensors in 29 dispatches, 74 in 20); the dγ reduces four norms a dispatch remove 18 more:
/// 1785 − 12 × 54 − 9 − 18 = 1110.
///
/// Mixed: from the 838 measured on an H200 with flash attention, the projections unfused and a
/// separate cast for every f16 operand: +1 (the sliced embedding backward's reduce), −2 (the
/// one-kernel loss head), −11 × 12 for the casts the producing kernels write themselves (Q and K
/// by RoPE; Q, K, V not cast again for the backward; the dY of W2, Wo, W1, W3, Wq and Wk) and
/// −12 for attention's output (written in f16 by the flash forward) gives 693. The fused
/// projections remove 17 a layer there: 9 products (Q, K, V's 9 → 3, gate and up's 6 → 3), V's
/// cast and dv's gradient cast (written by RoPE's kernels, still one dispatch each way), 3
/// AdamW, and 3 split sums (the H200's table splits the weight gradients of Wq, Wk, Wv, W1, W3
/// and of the fused Wqkv and W13, one sum each); and 9 of the gradient norm; and the dγ reduces
/// four norms a dispatch, 18: 693 − 12 × 17 − 9 − 18 = 462. Each of these is one dispatch on any
/// adapter but the split sums, which lavapipe does not make: there the projections remove 14 a
/// layer, 608 − 12 × 14 − 9 − 18 = 413 (`MAX_MIXED`, measured). An H100, which takes the
/// H200's table, records exactly 462 and 1110.
const MAX_F32_TENSOR_CORES: usize = 1110;
const MAX_MIXED_TENSOR_CORES: usize = 462;

/// The f32 step on the split core in its portable form (`ModelOptions::split_products`), counted
/// on any adapter: the same products, plans and halves as the tensor-core f32 step, so the
/// count differs from MAX_F32_TENSOR_CORES only by what the adapter's attention path records
/// (measured on lavapipe, fast attention: 1110, the figure computed above).
const MAX_F32_SPLIT: usize = 1110;

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
