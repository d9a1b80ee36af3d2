//! Model and training configuration, with the checks that turn a user's mistake into a clear
//! message instead of a panic deep inside the GPU code.

use crate::Error;

/// The model's shape. Vocabulary: bytes (256).
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    /// Vocabulary size (256: byte-level tokens).
    pub vocab: usize,
    /// Model width.
    pub dim: usize,
    /// Number of transformer blocks.
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (grouped-query attention); divides `heads`.
    pub kv_heads: usize,
    /// SwiGLU hidden width.
    pub ffn_hidden: usize,
    /// Context length.
    pub seq_len: usize,
    /// RMSNorm epsilon.
    pub norm_eps: f32,
    /// RoPE base.
    pub rope_base: f32,
}

impl ModelConfig {
    /// A config with the SwiGLU width LLaMA uses: ⅔ · 4 · dim, rounded up to a multiple of 32.
    pub fn new(dim: usize, layers: usize, heads: usize, kv_heads: usize, seq_len: usize) -> ModelConfig {
        ModelConfig {
            vocab: 256,
            dim,
            layers,
            heads,
            kv_heads,
            ffn_hidden: (8 * dim).div_ceil(3).div_ceil(32) * 32,
            seq_len,
            norm_eps: 1e-5,
            rope_base: 10000.0,
        }
    }

    /// Width of one head.
    pub fn head_dim(&self) -> usize {
        self.dim / self.heads
    }

    /// Width of the key/value projections.
    pub fn kv_dim(&self) -> usize {
        self.kv_heads * self.head_dim()
    }

    /// Checks the shape; every message says what to change.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |m: String| Err(Error::Config(m));
        if self.dim == 0 || self.layers == 0 || self.heads == 0 || self.kv_heads == 0 || self.seq_len == 0 {
            return bad("dim, layers, heads, kv heads and sequence length must all be at least 1".into());
        }
        if !self.dim.is_multiple_of(self.heads) {
            return bad(format!("heads ({}) must divide the model width ({})", self.heads, self.dim));
        }
        if !self.heads.is_multiple_of(self.kv_heads) {
            return bad(format!("kv heads ({}) must divide heads ({})", self.kv_heads, self.heads));
        }
        if !self.head_dim().is_multiple_of(2) {
            return bad(format!("the head width dim/heads = {} must be even for rotary embeddings", self.head_dim()));
        }
        if self.head_dim() > 256 {
            return bad(format!("the head width dim/heads = {} is over the attention kernels' 256", self.head_dim()));
        }
        if self.ffn_hidden == 0 {
            return bad("the feed-forward width must be at least 1".into());
        }
        Ok(())
    }

    /// Number of parameters.
    pub fn parameters(&self) -> usize {
        crate::params::shapes(self).iter().map(|(_, s)| s.iter().product::<usize>()).sum()
    }
}

/// Optimisation settings.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainConfig {
    /// Sequences per step.
    pub batch: usize,
    /// Steps to train.
    pub steps: usize,
    /// Peak learning rate.
    pub lr: f32,
    /// Learning rate at the end of the cosine decay.
    pub min_lr: f32,
    /// Linear warm-up steps.
    pub warmup: usize,
    /// AdamW β1.
    pub beta1: f32,
    /// AdamW β2.
    pub beta2: f32,
    /// AdamW ε.
    pub eps: f32,
    /// Decoupled weight decay (applied to matrices, not to norms).
    pub weight_decay: f32,
    /// Global gradient-norm clip (≤ 0: off).
    pub clip: f32,
    /// Seed of weights and batches.
    pub seed: u64,
    /// The attention path (a speed and memory choice; results agree to rounding).
    pub attention: crate::model::Attention,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            batch: 8,
            steps: 300,
            lr: 3e-3,
            min_lr: 3e-4,
            warmup: 30,
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.1,
            clip: 1.0,
            seed: 1234,
            attention: crate::model::Attention::Auto,
        }
    }
}

impl TrainConfig {
    /// Learning rate at `step` (0-based): linear warm-up, then cosine decay to `min_lr`.
    pub fn lr_at(&self, step: usize) -> f32 {
        if self.warmup > 0 && step < self.warmup {
            return self.lr * (step + 1) as f32 / self.warmup as f32;
        }
        let span = self.steps.saturating_sub(self.warmup).max(1);
        let t = ((step - self.warmup.min(step)) as f64 / span as f64).min(1.0);
        let cos = 0.5 * (1.0 + (std::f64::consts::PI * t).cos());
        (self.min_lr as f64 + (self.lr - self.min_lr) as f64 * cos) as f32
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<(), Error> {
        if self.batch == 0 {
            return Err(Error::Config("the batch must hold at least one sequence".into()));
        }
        if !(self.lr.is_finite() && self.lr > 0.0 && self.min_lr.is_finite() && self.min_lr >= 0.0) {
            return Err(Error::Config("learning rates must be finite, the peak above 0".into()));
        }
        if !(0.0..1.0).contains(&self.beta1) || !(0.0..1.0).contains(&self.beta2) {
            return Err(Error::Config("betas must be in [0, 1)".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_warms_up_then_decays() {
        let t = TrainConfig { steps: 100, warmup: 10, lr: 1.0, min_lr: 0.1, ..TrainConfig::default() };
        assert!((t.lr_at(0) - 0.1).abs() < 1e-6);
        assert!((t.lr_at(9) - 1.0).abs() < 1e-6);
        assert!((t.lr_at(10) - 1.0).abs() < 1e-6);
        assert!((t.lr_at(100) - 0.1).abs() < 1e-6);
        assert!((t.lr_at(1000) - 0.1).abs() < 1e-6);
        let mid = t.lr_at(55);
        assert!((mid - 0.55).abs() < 1e-3, "{mid}");
    }

    #[test]
    fn shape_errors_say_what_to_change() {
        let mut c = ModelConfig::new(64, 2, 4, 2, 32);
        c.validate().unwrap();
        c.heads = 5;
        assert!(c.validate().unwrap_err().to_string().contains("heads (5) must divide the model width (64)"));
        c.heads = 4;
        c.kv_heads = 3;
        assert!(c.validate().unwrap_err().to_string().contains("kv heads (3) must divide heads (4)"));
    }
}
