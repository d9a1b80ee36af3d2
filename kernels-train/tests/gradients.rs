//! One step of the GPU model against the float64 CPU model: the loss, and every parameter's
//! gradient (the reference by central differences of the float64 loss), on a tiny
//! configuration with grouped-query attention, random weights large enough that every
//! nonlinearity matters, and random bytes. The f32 step on the scaled split (the products'
//! split core, its portable form here) is checked the same way, then over a few training steps
//! against the float64 model on the weights each step starts from.

mod common;
#[path = "reference/model.rs"]
mod reference;

use kernels_train::config::{ModelConfig, TrainConfig};
use kernels_train::model::{Attention, Model, ModelOptions, Precision};
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

/// The f32 step through the scaled split, where every weight's halves are made once per step
/// (when the model is built, then after each update) and read by its forward and input-gradient
/// products: the loss and every gradient against float64 within the SGEMM's bounds (the split
/// is f32-accurate), then three training steps, each step's loss against the float64 model's
/// on the weights that step starts from (read back from the GPU), within the same bound. The
/// loss moves by more than ten times that bound from step to step: halves left stale after an
/// update (a forward on the previous step's weights) would miss by that move, and fail.
///
/// The reference for the later steps is the split model's own weights, not an SGEMM model
/// trained beside it: AdamW's first steps move each weight by about lr times the sign of its
/// gradient, so a gradient near zero that rounds to the other sign in one of the two models
/// moves that weight 2·lr apart, and the two trajectories part by more than rounding bounds.
#[test]
fn the_split_step_with_weights_split_once_matches_float64_and_the_sgemm() {
    let Some(gpu) = common::gpu() else { return };
    if !gpu.features().contains(kernels::wgpu::Features::SHADER_F16) {
        assert!(std::env::var("CI").is_err(), "CI's adapter (lavapipe) has SHADER_F16");
        eprintln!("SKIPPED: the split core reads f16 halves; no SHADER_F16");
        return;
    }
    let mut cfg = ModelConfig::new(16, 2, 4, 2, 8);
    cfg.ffn_hidden = 24;
    let batch = 2;
    let mut rng = Rng::new(common::seed("split gradients"));
    let weights = params::layout(&cfg).map(|p| {
        (0..p.elements())
            .map(|_| if p.decays() { (rng.normal() * 0.3) as f32 } else { 1.0 + (rng.normal() * 0.2) as f32 })
            .collect::<Vec<f32>>()
    });
    let mut bytes = |n: usize| (0..n).map(|_| rng.below(256) as u32).collect::<Vec<u32>>();
    let (tokens, targets) = (bytes(batch * cfg.seq_len), bytes(batch * cfg.seq_len));
    let w64: Vec<Vec<f64>> = weights.iter().map(|w| w.iter().map(|&x| x as f64).collect()).collect();
    let loss_ref = reference::loss(&cfg, &w64, &tokens, &targets, batch);
    let grads_ref = reference::gradients(&cfg, &w64, &tokens, &targets, batch, 1e-5);
    let options = |split_products| ModelOptions {
        attention: Attention::Streaming,
        precision: Precision::F32,
        split_products,
        ..ModelOptions::default()
    };
    let mut split = Model::with_options(&gpu, &cfg, batch, &weights, None, options(true)).unwrap();
    let loss = split.forward_backward(&tokens, &targets, batch).unwrap() as f64;
    assert!((loss - loss_ref).abs() <= 1e-5 * loss_ref.abs(), "split: loss {loss} vs {loss_ref}");
    for ((name, _), (g, r)) in params::shapes(&cfg).iter().zip(split.gradients().unwrap().iter().zip(&grads_ref)) {
        let num: f64 = g.iter().zip(r).map(|(&a, &b)| (a as f64 - b).powi(2)).sum::<f64>().sqrt();
        let den: f64 = r.iter().map(|b| b * b).sum::<f64>().sqrt();
        eprintln!("split {name:40} |g| {den:.3e} rel {:.2e}", num / den);
        assert!(den > 0.0 && num / den < 1e-4, "split {name}: relative error {:e}", num / den);
    }

    let t = TrainConfig { batch, steps: 3, lr: 1e-2, min_lr: 1e-2, warmup: 0, ..TrainConfig::default() };
    let mut split = Model::with_options(&gpu, &cfg, batch, &weights, None, options(true)).unwrap();
    let mut last: Option<f64> = None;
    for step in 0..3u64 {
        let w64: Vec<Vec<f64>> =
            split.weights().unwrap().iter().map(|w| w.iter().map(|&x| x as f64).collect()).collect();
        let want = reference::loss(&cfg, &w64, &tokens, &targets, batch);
        split.train_step(&tokens, &targets, batch, &t, step).unwrap();
        let got = split.read_loss().unwrap() as f64;
        let tolerance = 1e-5 * want.abs();
        eprintln!("step {step}: split {got:.6}, float64 {want:.6} (difference {:.2e})", (got - want).abs());
        assert!((got - want).abs() <= tolerance, "step {step}: the split step's loss {got} against float64's {want}");
        if let Some(prev) = last {
            let moved = (want - prev).abs();
            assert!(moved > 10.0 * tolerance, "step {step}: the loss moved by {moved} only");
        }
        last = Some(want);
    }
    // Generation on the trained model: the split mode keeps its layer inputs as halves made
    // for as many rows as the forward has (the prompt's, then one token's through the cache,
    // then the whole context's), and its logits are those of an SGEMM model built from the
    // same trained weights within the rounding of the split.
    let mut sgemm = Model::with_options(&gpu, &cfg, batch, &split.weights().unwrap(), None, options(false)).unwrap();
    let mut ctx: Vec<u32> = tokens[..5].to_vec();
    for k in 0..4 {
        let (a, b) = if k < 3 {
            (split.next_logits_cached(&ctx).unwrap(), sgemm.next_logits_cached(&ctx).unwrap())
        } else {
            (split.next_logits(&ctx).unwrap(), sgemm.next_logits(&ctx).unwrap())
        };
        let num: f64 = a.iter().zip(&b).map(|(&x, &y)| (x as f64 - y as f64).powi(2)).sum::<f64>().sqrt();
        let den: f64 = b.iter().map(|&y| (y as f64).powi(2)).sum::<f64>().sqrt();
        eprintln!("generation {k}: logits {:.2e} apart (relative)", num / den);
        assert!(den > 0.0 && num <= 1e-4 * den, "generation {k}: logits {:e} apart (relative)", num / den);
        let next = (0..b.len()).max_by(|&i, &j| b[i].total_cmp(&b[j])).unwrap();
        if k < 3 {
            ctx.push(next as u32);
        }
    }
}
