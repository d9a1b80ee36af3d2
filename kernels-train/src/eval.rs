//! Scoring a model on a text or on shards (`--eval FILE`): the mean loss per predicted token,
//! its perplexity and bits per byte, through the same forward pass and loss kernels as training's
//! validation, so the same windows give the same loss.
//!
//! [`cover`] lays windows of `seq_len` inputs end to end over the tokens, so every token but the
//! first is predicted exactly once (the context restarts at each window, as in training); the
//! last window may be short, its missing targets ignored by the loss. Bits per byte divide the
//! loss in bits by the bytes of text the predicted tokens stand for
//! ([`crate::export::token_byte_lengths`]), which makes tokenizers comparable.

use crate::Error;
use crate::data::Tokens;
use crate::model::Model;

/// A window: where its inputs start and how many targets it has (1 to `seq_len`).
pub type Window = (usize, usize);

/// What a model scored on some windows.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Score {
    /// Tokens predicted.
    pub tokens: usize,
    /// The summed loss, in nats.
    pub nats: f64,
    /// Bytes of text the predicted tokens stand for.
    pub bytes: u64,
}

impl Score {
    /// Mean loss per predicted token, in nats.
    pub fn mean_loss(&self) -> f64 {
        self.nats / self.tokens.max(1) as f64
    }

    /// exp(mean loss).
    pub fn perplexity(&self) -> f64 {
        self.mean_loss().exp()
    }

    /// The loss in bits per byte of text.
    pub fn bits_per_byte(&self) -> f64 {
        self.nats / std::f64::consts::LN_2 / self.bytes.max(1) as f64
    }
}

/// Windows of `seq_len` inputs end to end over `len` tokens, every token but the first a target
/// once.
pub fn cover(len: usize, seq_len: usize) -> Vec<Window> {
    let mut out = Vec::new();
    let mut start = 0;
    while start + 1 < len {
        out.push((start, seq_len.min(len - 1 - start)));
        start += seq_len;
    }
    out
}

/// Scores `model` on `windows` of `tokens`, `batch` windows a forward pass (at most the
/// model's batch); `byte_lengths[id]` is the bytes of text of token `id`. `progress(done,
/// total)` is called after each pass.
pub fn score(
    model: &mut Model,
    tokens: &Tokens,
    windows: &[Window],
    batch: usize,
    byte_lengths: &[u32],
    mut progress: impl FnMut(usize, usize),
) -> Result<Score, Error> {
    let seq = model.cfg.seq_len;
    let batch = batch.clamp(1, model.batch);
    let mut s = Score::default();
    let mut w = Vec::with_capacity(seq + 1);
    for (i, group) in windows.chunks(batch).enumerate() {
        let mut x = Vec::with_capacity(group.len() * seq);
        let mut y = Vec::with_capacity(group.len() * seq);
        let mut count = 0;
        for &(start, n) in group {
            if n == 0 || n > seq {
                return Err(Error::Config(format!("a window of {n} targets for sequences of {seq}")));
            }
            w.clear();
            tokens.read_into(start, n + 1, &mut w)?;
            x.extend_from_slice(&w[..n]);
            x.resize(x.len() + seq - n, 0);
            y.extend_from_slice(&w[1..]);
            y.resize(y.len() + seq - n, u32::MAX);
            for &t in &w[1..] {
                s.bytes += u64::from(byte_lengths.get(t as usize).copied().unwrap_or(0));
            }
            count += n;
        }
        let mean = model.eval_loss(&x, &y, group.len())?;
        s.nats += mean as f64 * count as f64;
        s.tokens += count;
        progress(((i + 1) * batch).min(windows.len()), windows.len());
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cover_predicts_every_token_but_the_first_once() {
        for (len, seq) in [(1, 4), (2, 4), (5, 4), (9, 4), (10, 4), (100, 7)] {
            let w = cover(len, seq);
            let targets: Vec<usize> = w.iter().flat_map(|&(s, n)| s + 1..s + 1 + n).collect();
            assert_eq!(targets, (1..len).collect::<Vec<_>>(), "{len} / {seq}");
            assert!(w.iter().all(|&(s, n)| n >= 1 && n <= seq && s + n < len));
        }
        let s = Score { tokens: 4, nats: 4.0 * std::f64::consts::LN_2, bytes: 8 };
        assert!((s.mean_loss() - std::f64::consts::LN_2).abs() < 1e-15);
        assert!((s.perplexity() - 2.0).abs() < 1e-12 && (s.bits_per_byte() - 0.5).abs() < 1e-12);
    }
}
