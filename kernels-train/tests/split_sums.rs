//! Mixed precision where the products split the weight gradients' contraction into parts: each
//! layer's four split sums are added by one dispatch (`kernels::gemm::add_parts`) into the
//! layer's part of the gradient pages. A tuning table of one's own (`KERNELS_GEMM_TABLE`)
//! forces the splits on any adapter (lavapipe's f16 products do not split by themselves). The
//! gradients are checked against the same model's without the splits (the unsplit mixed
//! gradients are checked against float64 in `mixed.rs`): the weight matrices' within the
//! rounding of f32 sums in another order, the rest bit for bit; and the step's dispatches are
//! counted with and without the table. One test in its own binary: the environment variable is
//! the process's.

mod common;

use kernels::gemm::{self, Elem, Epilogue, F16Config, Gemm};
use kernels_train::config::{ModelConfig, TrainConfig};
use kernels_train::model::{Model, ModelOptions, Precision};
use kernels_train::params;
use kernels_train::rng::Rng;

#[test]
fn split_weight_gradients_sum_once_a_layer() {
    let Some(gpu) = common::gpu() else { return };
    if !gpu.features().contains(kernels::wgpu::Features::SHADER_F16) {
        eprintln!("adapter without SHADER_F16: split_weight_gradients_sum_once_a_layer not run");
        return;
    }
    let mut cfg = ModelConfig::new(32, 2, 4, 2, 32);
    cfg.ffn_hidden = 40;
    let batch = 2;
    let rows = batch * cfg.seq_len;
    // Each layer's weight-gradient products [out, in] over the rows, split in 2 to 4 parts
    // (as many as the contraction's steps allow), on the default block shape of the variant
    // that runs.
    let kv = cfg.kv_heads * cfg.head_dim();
    let shapes = [
        (cfg.dim + 2 * kv, cfg.dim, 2),
        (cfg.dim, cfg.dim, 3),
        (2 * cfg.ffn_hidden, cfg.dim, 4),
        (cfg.dim, cfg.ffn_hidden, 2),
    ];
    let config = F16Config::default_for(kernels::ops::on_tensor_cores(&gpu, &kernels::linear::gemm16::KERNEL));
    // A table of these shapes with the given splits (the tied head's weight gradient always
    // whole: its own split would add its own sum).
    let table = |split: bool| {
        let mut text = String::new();
        for (out, inp, parts) in shapes.into_iter().chain([(cfg.vocab, cfg.dim, 1)]) {
            let g = Gemm::new(out, inp, rows).elems(Elem::F16, Elem::F16).a_t(true).epilogue(Epilogue::Accumulate);
            text.push_str(&gemm::table_line(&g, &config, if split { parts } else { 1 }));
            text.push('\n');
        }
        text
    };
    let mut rng = Rng::new(common::seed("split sums"));
    let weights = params::layout(&cfg).map(|p| {
        (0..p.elements())
            .map(|_| if p.decays() { (rng.normal() * 0.3) as f32 } else { 1.0 + (rng.normal() * 0.2) as f32 })
            .collect::<Vec<f32>>()
    });
    let mut bytes = |n: usize| (0..n).map(|_| rng.below(256) as u32).collect::<Vec<u32>>();
    let (tokens, targets) = (bytes(rows), bytes(rows));
    let options = ModelOptions { precision: Precision::Mixed, ..ModelOptions::default() };
    let t = TrainConfig { batch, precision: Precision::Mixed, ..TrainConfig::default() };

    // Both models through a table of their own (the committed tables would split on tensor
    // cores as they choose).
    let model_with = |split: bool| {
        let path = std::env::temp_dir().join(format!("kernels-split-sums-{}-{split}.txt", std::process::id()));
        std::fs::write(&path, table(split)).unwrap();
        // SAFETY of the test: the only test of this binary, so no other thread reads the variable.
        unsafe { std::env::set_var(kernels::gemm::TABLE_ENV, &path) };
        let made = Model::with_options(&gpu, &cfg, batch, &weights, None, options);
        unsafe { std::env::remove_var(kernels::gemm::TABLE_ENV) };
        let _ = std::fs::remove_file(&path);
        made.unwrap()
    };
    let (mut plain, mut model) = (model_with(false), model_with(true));
    let unsplit = plain.step_dispatches(batch, &t, 0).unwrap();
    let split = model.step_dispatches(batch, &t, 0).unwrap();
    // Four split products a layer, one sum a layer (one each would be four).
    assert_eq!(split, unsplit + cfg.layers, "{split} dispatches split, {unsplit} unsplit");

    let loss_plain = plain.forward_backward(&tokens, &targets, batch).unwrap();
    let loss = model.forward_backward(&tokens, &targets, batch).unwrap();
    assert_eq!(loss.to_bits(), loss_plain.to_bits(), "the forward does not split");
    let (want, got) = (plain.gradients().unwrap(), model.gradients().unwrap());
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
    for (p, (g, w)) in params::layout(&cfg).iter().zip(got.iter().zip(want.iter())) {
        let name = &p.name;
        // The layers' weight matrices (the tied embedding's gradient comes from the head's
        // unsplit product and the embedding backward).
        if p.decays() && p.kind != params::Kind::Embedding {
            // An f32 sum of 64 products in parts: a few ulps of the sum of magnitudes, far below
            // what a part added at the wrong place or missing would move.
            let num: f64 = g.iter().zip(w).map(|(&a, &b)| (a as f64 - b as f64).powi(2)).sum::<f64>().sqrt();
            let den: f64 = w.iter().map(|&b| (b as f64).powi(2)).sum::<f64>().sqrt();
            eprintln!("{name:24} |g| {den:.3e} rel {:.2e}", num / den);
            assert!(
                den > 0.0 && num <= 1e-5 * den,
                "{name}: relative difference {:e} from the unsplit gradient",
                num / den
            );
        } else {
            assert_eq!(bits(g), bits(w), "{name}: differs from the unsplit gradient");
        }
    }
}
