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
    // Each layer's weight-gradient products [out, in] over the rows, split in 2 to 4 parts, on
    // the portable variant's block shape.
    let kv = cfg.kv_heads * cfg.head_dim();
    let shapes = [
        (cfg.dim + 2 * kv, cfg.dim, 2),
        (cfg.dim, cfg.dim, 3),
        (2 * cfg.ffn_hidden, cfg.dim, 4),
        (cfg.dim, cfg.ffn_hidden, 2),
    ];
    let mut table = String::from("# core a_t b_t m n k bm bn bk tm tn pad prefetch group wg parts\n");
    // The tied head's weight gradient stays whole (its own split would add its own sum).
    for (out, inp, parts) in shapes.into_iter().chain([(cfg.vocab, cfg.dim, 1)]) {
        table.push_str(&format!("f16 1 0 {out} {inp} {rows} 128 64 16 4 2 8 1 1 256 {parts}\n"));
    }
    let path = std::env::temp_dir().join(format!("kernels-split-sums-{}.txt", std::process::id()));
    std::fs::write(&path, table).unwrap();

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

    let mut plain = Model::with_options(&gpu, &cfg, batch, &weights, None, options).unwrap();
    let unsplit = plain.step_dispatches(batch, &t, 0).unwrap();
    // SAFETY of the test: the only test of this binary, so no other thread reads the variable.
    unsafe { std::env::set_var(kernels::gemm::TABLE_ENV, &path) };
    let made = Model::with_options(&gpu, &cfg, batch, &weights, None, options);
    unsafe { std::env::remove_var(kernels::gemm::TABLE_ENV) };
    let _ = std::fs::remove_file(&path);
    let mut model = made.unwrap();
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
