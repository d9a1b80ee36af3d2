//! Choosing the next byte from logits: temperature and top-k.

use crate::rng::Rng;

/// Samples an index from `logits` with `temperature` (≤ 0: greedy) among the `top_k` largest
/// (0: all).
pub fn sample(logits: &[f32], temperature: f32, top_k: usize, rng: &mut Rng) -> usize {
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    if temperature <= 0.0 || logits.len() == 1 {
        return order[0];
    }
    let k = if top_k == 0 { logits.len() } else { top_k.min(logits.len()) };
    let top = &order[..k];
    let max = logits[top[0]] as f64;
    let weights: Vec<f64> = top.iter().map(|&i| ((logits[i] as f64 - max) / temperature as f64).exp()).collect();
    let total: f64 = weights.iter().sum();
    let mut r = rng.uniform() * total;
    for (w, &i) in weights.iter().zip(top) {
        if r < *w {
            return i;
        }
        r -= w;
    }
    top[k - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_top_k_and_temperature() {
        let logits = [0.0, 3.0, 1.0, 2.9];
        let mut rng = Rng::new(1);
        assert_eq!(sample(&logits, 0.0, 0, &mut rng), 1);
        for _ in 0..200 {
            let i = sample(&logits, 1.0, 2, &mut rng);
            assert!(i == 1 || i == 3);
        }
        // A very low temperature behaves greedily.
        assert!((0..50).all(|_| sample(&logits, 0.01, 0, &mut rng) == 1));
    }
}
