//! Model and training configuration, with the checks that turn a user's mistake into a clear
//! message instead of a panic deep inside the GPU code.

use crate::Error;

/// Largest number of transformer blocks [`ModelConfig::validate`] accepts.
pub const MAX_LAYERS: usize = 1024;
/// Largest width (model, feed-forward, vocabulary) or sequence length [`ModelConfig::validate`]
/// accepts; what fits a device is checked against its limits when the model is allocated.
pub const MAX_WIDTH: usize = 1 << 24;

/// The model's shape. The vocabulary is the tokenizer's, padded
/// ([`crate::tokenizer::Tokenizer::model_vocab`]); 256 for bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    /// Vocabulary size: rows of the embedding (tied to the head) and logits per position (256
    /// for byte tokens; a tokenizer's vocabulary padded to a multiple of 64).
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
    /// A config with the SwiGLU width LLaMA uses: ⅔ · 4 · dim, rounded up to a multiple of 32,
    /// and byte tokens ([`ModelConfig::with_vocab`] sets another vocabulary).
    pub fn new(dim: usize, layers: usize, heads: usize, kv_heads: usize, seq_len: usize) -> ModelConfig {
        ModelConfig {
            vocab: 256,
            dim,
            layers,
            heads,
            kv_heads,
            ffn_hidden: dim.saturating_mul(8).div_ceil(3).div_ceil(32).saturating_mul(32),
            seq_len,
            norm_eps: 1e-5,
            rope_base: 10000.0,
        }
    }

    /// The `tiny` preset: 2 layers, width 64, 4 heads (2 key/value), context 64, bytes.
    pub fn tiny() -> ModelConfig {
        ModelConfig::new(64, 2, 4, 2, 64)
    }

    /// The same shape with a vocabulary of `vocab` tokens.
    pub fn with_vocab(self, vocab: usize) -> ModelConfig {
        ModelConfig { vocab, ..self }
    }

    /// Width of one head.
    pub fn head_dim(&self) -> usize {
        self.dim / self.heads
    }

    /// Width of the key/value projections.
    pub fn kv_dim(&self) -> usize {
        self.kv_heads * self.head_dim()
    }

    /// Checks the shape; every message says what to change. Also bounds every field (so a
    /// damaged or crafted checkpoint cannot ask for absurd sizes), before anything is allocated.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |m: String| Err(Error::Config(m));
        if self.vocab == 0
            || self.dim == 0
            || self.layers == 0
            || self.heads == 0
            || self.kv_heads == 0
            || self.seq_len == 0
        {
            return bad("vocabulary, dim, layers, heads, kv heads and sequence length must all be at least 1".into());
        }
        for (what, value, max) in [
            ("vocabulary", self.vocab, MAX_WIDTH),
            ("model width", self.dim, MAX_WIDTH),
            ("layers", self.layers, MAX_LAYERS),
            ("feed-forward width", self.ffn_hidden, MAX_WIDTH),
            ("sequence length", self.seq_len, MAX_WIDTH),
        ] {
            if value > max {
                return bad(format!("the {what} {value} is over this trainer's bound {max}"));
            }
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
        if !(self.norm_eps.is_finite() && self.norm_eps > 0.0 && self.norm_eps <= 1.0) {
            return bad(format!("the RMSNorm epsilon {} must be in (0, 1]", self.norm_eps));
        }
        if !(self.rope_base.is_finite() && self.rope_base > 1.0) {
            return bad(format!("the RoPE base {} must be finite and above 1", self.rope_base));
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
    /// The arithmetic of a step (`crate::precision`).
    pub precision: crate::precision::Precision,
    /// Mixed precision: clean steps before the loss scale doubles (`crate::scaler`).
    pub loss_scale_interval: u32,
    /// The optimizer (`crate::optim`).
    pub optimizer: crate::optim::OptimizerKind,
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
            precision: crate::precision::Precision::Auto,
            loss_scale_interval: crate::scaler::DEFAULT_GROWTH_INTERVAL,
            optimizer: crate::optim::OptimizerKind::AdamW,
        }
    }
}

impl TrainConfig {
    /// The `tiny` preset's schedule: batches of 8, 150 steps, learning rate 4e-3 warming up
    /// over 15 steps and decaying to 4e-4.
    pub fn tiny() -> TrainConfig {
        TrainConfig { batch: 8, steps: 150, lr: 4e-3, min_lr: 4e-4, warmup: 15, ..TrainConfig::default() }
    }

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
        if !(self.eps.is_finite() && self.eps > 0.0) {
            return Err(Error::Config(format!("the AdamW epsilon {} must be finite and above 0", self.eps)));
        }
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            return Err(Error::Config(format!(
                "the weight decay {} must be finite and not negative",
                self.weight_decay
            )));
        }
        if self.loss_scale_interval == 0 {
            return Err(Error::Config("the loss scale's growth interval must be at least 1 step".into()));
        }
        if !self.clip.is_finite() {
            return Err(Error::Config(format!("the gradient clip {} must be finite (0 turns it off)", self.clip)));
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
        c.kv_heads = 2;
        c.validate().unwrap();
    }

    #[test]
    fn absurd_or_non_finite_fields_are_refused() {
        let ok = ModelConfig::new(64, 2, 4, 2, 32);
        type Change = fn(&mut ModelConfig);
        let cases: [(&str, Change); 10] = [
            ("at least 1", |c| c.heads = 0),
            ("at least 1", |c| c.seq_len = 0),
            ("layers 100000000 is over", |c| c.layers = 100_000_000),
            ("model width", |c| c.dim = usize::MAX),
            ("sequence length", |c| c.seq_len = 1 << 40),
            ("vocabulary 16777217 is over", |c| c.vocab = (1 << 24) + 1),
            ("vocabulary, dim", |c| c.vocab = 0),
            ("epsilon", |c| c.norm_eps = f32::NAN),
            ("epsilon", |c| c.norm_eps = 0.0),
            ("RoPE base", |c| c.rope_base = f32::INFINITY),
        ];
        for (want, change) in cases {
            let mut c = ok.clone();
            change(&mut c);
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains(want), "{c:?}: {e}");
        }
        let t = TrainConfig::default();
        t.validate().unwrap();
        for bad in [
            TrainConfig { weight_decay: f32::NAN, ..t.clone() },
            TrainConfig { eps: 0.0, ..t.clone() },
            TrainConfig { clip: f32::INFINITY, ..t.clone() },
            TrainConfig { lr: f32::INFINITY, ..t.clone() },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
