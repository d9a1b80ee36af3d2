//! One step of the GPU model against the float64 CPU model: the loss, and every parameter's
//! gradient (the reference by central differences of the float64 loss), on a tiny
//! configuration with grouped-query attention, random weights large enough that every
//! nonlinearity matters, and random bytes.

mod common;
#[path = "reference/model.rs"]
mod reference;

use kernels_train::config::ModelConfig;
use kernels_train::model::{Attention, Model};
use kernels_train::params;
use kernels_train::rng::Rng;

#[test]
fn loss_and_every_gradient_match_float64() {
    let Some(gpu) = common::gpu() else { return };
    let mut cfg = ModelConfig::new(16, 2, 4, 2, 8);
    cfg.ffn_hidden = 24;
    let batch = 2;
    let mut rng = Rng::new(common::seed("gradients"));
    let weights = params::layout(&cfg).map(|p| {
        (0..p.elements())
            .map(|_| if p.decays() { (rng.normal() * 0.3) as f32 } else { 1.0 + (rng.normal() * 0.2) as f32 })
            .collect::<Vec<f32>>()
    });
    let tokens: Vec<u32> = (0..batch * cfg.seq_len).map(|_| rng.below(256) as u32).collect();
    let targets: Vec<u32> = (0..batch * cfg.seq_len).map(|_| rng.below(256) as u32).collect();

    // The reference takes the tensors in checkpoint order.
    let w64: Vec<Vec<f64>> = weights.iter().map(|w| w.iter().map(|&x| x as f64).collect()).collect();
    let loss_ref = reference::loss(&cfg, &w64, &tokens, &targets, batch);
    let grads_ref = reference::gradients(&cfg, &w64, &tokens, &targets, batch, 1e-5);
    for path in [Attention::Fast, Attention::Flash, Attention::Streaming] {
        let mut model = Model::with_attention(&gpu, &cfg, batch, &weights, None, path).unwrap();
        assert_eq!(model.attention, path);
        let loss_gpu = model.forward_backward(&tokens, &targets, batch).unwrap() as f64;
        let grads_gpu = model.gradients().unwrap();
        assert!((loss_gpu - loss_ref).abs() <= 1e-5 * loss_ref.abs(), "{path:?}: loss {loss_gpu} vs {loss_ref}");
        for ((name, _), (g, r)) in params::shapes(&cfg).iter().zip(grads_gpu.iter().zip(&grads_ref)) {
            let num: f64 = g.iter().zip(r).map(|(&a, &b)| (a as f64 - b).powi(2)).sum::<f64>().sqrt();
            let den: f64 = r.iter().map(|b| b * b).sum::<f64>().sqrt();
            let rel = num / den;
            eprintln!("{path:?} {name:40} |g| {den:.3e} rel {rel:.2e}");
            assert!(den > 0.0, "{name}: the reference gradient is zero");
            assert!(rel < 1e-4, "{path:?} {name}: relative error {rel:e}");
        }
    }
}
