//! The parameters: names and layouts (those of the LLaMA reference code, so a PyTorch
//! `state_dict` can take them), shapes, and the seeded initialisation.
//!
//! | name | shape | use |
//! | --- | --- | --- |
//! | `tok_embeddings.weight` | `[V, D]` | token embedding; also the output head (tied: logits = h · Eᵀ) |
//! | `layers.{i}.attention_norm.weight` | `[D]` | RMSNorm before attention |
//! | `layers.{i}.attention.wq.weight` | `[H·Dh, D]` | query projection, `q = h · Wqᵀ` (PyTorch `nn.Linear` layout [out, in]) |
//! | `layers.{i}.attention.wk.weight` | `[Hkv·Dh, D]` | key projection |
//! | `layers.{i}.attention.wv.weight` | `[Hkv·Dh, D]` | value projection |
//! | `layers.{i}.attention.wo.weight` | `[D, H·Dh]` | output projection |
//! | `layers.{i}.ffn_norm.weight` | `[D]` | RMSNorm before the feed-forward |
//! | `layers.{i}.feed_forward.w1.weight` | `[F, D]` | SwiGLU gate |
//! | `layers.{i}.feed_forward.w3.weight` | `[F, D]` | SwiGLU up |
//! | `layers.{i}.feed_forward.w2.weight` | `[D, F]` | SwiGLU down |
//! | `norm.weight` | `[D]` | final RMSNorm |
//!
//! Rotary embeddings rotate interleaved pairs (2i, 2i+1), as the original LLaMA code does.

use crate::config::ModelConfig;
use crate::rng::Rng;

/// Every parameter's name and shape, in a fixed order.
pub fn shapes(c: &ModelConfig) -> Vec<(String, Vec<usize>)> {
    let (d, v, f) = (c.dim, c.vocab, c.ffn_hidden);
    let q = c.heads * c.head_dim();
    let kv = c.kv_dim();
    let mut out = vec![("tok_embeddings.weight".to_string(), vec![v, d])];
    for i in 0..c.layers {
        let p = |n: &str| format!("layers.{i}.{n}");
        out.push((p("attention_norm.weight"), vec![d]));
        out.push((p("attention.wq.weight"), vec![q, d]));
        out.push((p("attention.wk.weight"), vec![kv, d]));
        out.push((p("attention.wv.weight"), vec![kv, d]));
        out.push((p("attention.wo.weight"), vec![d, q]));
        out.push((p("ffn_norm.weight"), vec![d]));
        out.push((p("feed_forward.w1.weight"), vec![f, d]));
        out.push((p("feed_forward.w3.weight"), vec![f, d]));
        out.push((p("feed_forward.w2.weight"), vec![d, f]));
    }
    out.push(("norm.weight".to_string(), vec![d]));
    out
}

/// Whether weight decay applies (matrices and the embedding; not the norms).
pub fn decays(name: &str) -> bool {
    !name.ends_with("norm.weight")
}

/// Initial values: norms 1; matrices N(0, 0.02²), the output projections (`wo`, `w2`) scaled by
/// 1/√(2·layers) so the residual stream's variance does not grow with depth. Each tensor draws
/// from its own stream of the seed.
pub fn init(c: &ModelConfig, seed: u64) -> Vec<Vec<f32>> {
    shapes(c)
        .iter()
        .enumerate()
        .map(|(i, (name, shape))| {
            let n: usize = shape.iter().product();
            if !decays(name) {
                return vec![1.0; n];
            }
            let mut std = 0.02;
            if name.ends_with("wo.weight") || name.ends_with("w2.weight") {
                std /= (2.0 * c.layers as f64).sqrt();
            }
            let mut rng = Rng::for_step(seed, 1000 + i as u64, 0);
            (0..n).map(|_| (rng.normal() * std) as f32).collect()
        })
        .collect()
}
