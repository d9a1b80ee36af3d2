//! Helpers shared by the GPU tests: opening the adapter (a hard failure under `CI=true`),
//! random inputs that are different every run (the seed is printed), and float64 comparisons.
#![allow(dead_code)]

use kernels::{Gpu, GpuOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The test GPU with default options, or `None` (and a loud message) when this machine has no
/// adapter. Under `CI=true` a missing adapter fails the test.
pub fn gpu() -> Option<Gpu> {
    gpu_with(GpuOptions::from_env())
}

/// The test GPU with explicit options.
pub fn gpu_with(options: GpuOptions) -> Option<Gpu> {
    match Gpu::with_options_blocking(options) {
        Ok(g) => Some(g),
        Err(e) => {
            if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
                panic!("CI=true but no GPU adapter: {e}");
            }
            eprintln!("SKIPPED: no GPU adapter ({e}); install mesa-vulkan-drivers for lavapipe");
            None
        }
    }
}

/// A random generator seeded from `KERNELS_TEST_SEED` or the clock; the seed is printed so a
/// failure can be replayed.
pub fn rng(test: &str) -> StdRng {
    let seed = std::env::var("KERNELS_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
    });
    eprintln!("{test}: KERNELS_TEST_SEED={seed}");
    StdRng::seed_from_u64(seed)
}

/// `n` values uniform in `[lo, hi)`.
pub fn uniform(rng: &mut StdRng, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(lo..hi)).collect()
}

/// ‖got − want‖ / ‖want‖ in float64; NaN anywhere in `got` gives infinity.
pub fn rel_err(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "lengths differ");
    let mut num = 0.0;
    let mut den = 0.0;
    for (&g, &w) in got.iter().zip(want) {
        if !g.is_finite() && w.is_finite() {
            return f64::INFINITY;
        }
        num += (g as f64 - w).powi(2);
        den += w * w;
    }
    if den == 0.0 { num.sqrt() } else { (num / den).sqrt() }
}

/// Asserts ‖got − want‖ / ‖want‖ < tol.
#[track_caller]
pub fn assert_close(what: &str, got: &[f32], want: &[f64], tol: f64) {
    let e = rel_err(got, want);
    assert!(e < tol, "{what}: relative error {e:e} ≥ {tol:e}");
}
