//! Helpers shared by the GPU tests: opening the adapter (a hard failure under `CI=true`),
//! random inputs that are different every run (the seed is printed), NaN-poisoned outputs,
//! float64 comparisons and central differences.
#![allow(dead_code)]

use kernels::{Buffer, Gpu, GpuOptions};
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

/// The seed of `test`: `KERNELS_TEST_SEED`, or the clock; printed so a failure can be replayed.
pub fn seed(test: &str) -> u64 {
    let seed = std::env::var("KERNELS_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
    });
    eprintln!("{test}: KERNELS_TEST_SEED={seed}");
    seed
}

/// A random generator seeded from [`seed`].
pub fn rng(test: &str) -> StdRng {
    StdRng::seed_from_u64(seed(test))
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

/// Elements appended to every poisoned output; they must stay NaN.
pub const TAIL: usize = 7;

/// An output of `n` elements and a tail of [`TAIL`], all NaN, so that whatever a kernel leaves
/// unwritten shows.
pub fn poisoned(gpu: &Gpu, n: usize) -> Buffer<f32> {
    gpu.filled(n + TAIL, f32::NAN).unwrap()
}

/// Asserts that everything of `got` past its first `n` elements is still NaN.
#[track_caller]
pub fn check_tail(what: &str, got: &[f32], n: usize) {
    assert!(got[n..].iter().all(|v| v.is_nan()), "{what}: elements past the output were written");
}

/// Whether `a` and `b` hold the same bits.
pub fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Whether the adapter has `SHADER_F16`; says so (`what` not run) when it has not.
pub fn has_f16(gpu: &Gpu, what: &str) -> bool {
    let yes = gpu.features().contains(kernels::wgpu::Features::SHADER_F16);
    if !yes {
        eprintln!("adapter without SHADER_F16: {what} not run");
    }
    yes
}

/// Central differences of `loss` at `samples` coordinates i of `x` drawn from `rng`: the
/// analytic `grad[i]` and (loss(x + h·eᵢ) − loss(x − h·eᵢ)) / 2h, as two vectors for
/// [`rel_err`].
pub fn central_differences(
    rng: &mut StdRng,
    x: &[f32],
    grad: &[f32],
    h: f32,
    samples: usize,
    mut loss: impl FnMut(&[f32]) -> f64,
) -> (Vec<f32>, Vec<f64>) {
    let mut analytic = Vec::with_capacity(samples);
    let mut numeric = Vec::with_capacity(samples);
    for _ in 0..samples {
        let i = rng.random_range(0..x.len());
        let mut l = [0.0f64; 2];
        for (side, sign) in [(0, 1.0f32), (1, -1.0)] {
            let mut xs = x.to_vec();
            xs[i] += sign * h;
            l[side] = loss(&xs);
        }
        numeric.push((l[0] - l[1]) / (2.0 * h as f64));
        analytic.push(grad[i]);
    }
    (analytic, numeric)
}

/// A float64 value with a bound on how far an f32 computation of it can land: each operation
/// rounds its exact result within `ulps` units in the last place (WGSL's accuracy table: 0.5 for
/// `+ − ×`, 2.5 for `/`, 4.5 for `sqrt`, 3 + 2|x| for `exp`), and the errors of its inputs
/// propagate through it. So a difference whose terms nearly cancel is bounded by the rounding of
/// its terms, not relative to its own size.
#[derive(Clone, Copy, Debug)]
pub struct Rounded {
    /// The exact value.
    pub v: f64,
    /// A bound on |f32 result − v|.
    pub e: f64,
}

/// The rounding error of an f32 result of magnitude `v` within `ulps` units in the last place
/// (relative 2⁻²³ a unit for normal numbers, plus the smallest normal for a result flushed to zero).
pub fn ulps_of(v: f64, ulps: f64) -> f64 {
    ulps * (v.abs() * f64::from(f32::EPSILON) + f64::from(f32::MIN_POSITIVE))
}

impl Rounded {
    /// An input held exactly (an f32 value).
    pub fn exact(v: f64) -> Rounded {
        Rounded { v, e: 0.0 }
    }

    /// An f64 constant rounded to f32 once (`ulps` 0.5).
    pub fn constant(v: f64) -> Rounded {
        Rounded { v, e: ulps_of(v, 0.5) }
    }

    /// The result of one operation whose exact value is `v` and whose inputs contribute `e`.
    pub fn op(v: f64, e: f64, ulps: f64) -> Rounded {
        Rounded { v, e: e + ulps_of(v, ulps) }
    }

    pub fn add(self, b: Rounded) -> Rounded {
        Rounded::op(self.v + b.v, self.e + b.e, 0.5)
    }

    pub fn sub(self, b: Rounded) -> Rounded {
        Rounded::op(self.v - b.v, self.e + b.e, 0.5)
    }

    pub fn mul(self, b: Rounded) -> Rounded {
        Rounded::op(self.v * b.v, self.v.abs() * b.e + b.v.abs() * self.e + self.e * b.e, 0.5)
    }

    /// `self / b` for a divisor bounded away from zero by its error.
    pub fn div(self, b: Rounded) -> Rounded {
        assert!(b.e < b.v.abs(), "Rounded::div: the divisor {b:?} may be zero");
        let v = self.v / b.v;
        Rounded::op(v, (self.e + v.abs() * b.e) / (b.v.abs() - b.e), 2.5)
    }

    pub fn sqrt(self) -> Rounded {
        let v = self.v.max(0.0).sqrt();
        let e = if v > 0.0 { (self.e / v).min(self.e.sqrt()) } else { self.e.sqrt() };
        Rounded::op(v, e, 4.5)
    }

    pub fn exp(self) -> Rounded {
        let v = self.v.exp();
        Rounded::op(v, v * self.e.exp_m1(), 3.0 + 2.0 * self.v.abs())
    }

    /// Whether the f32 result `got` lies within the bound (NaN never does).
    pub fn holds(&self, got: f32) -> bool {
        (got as f64 - self.v).abs() <= self.e
    }
}

/// Asserts that every `got[i]` lies within `want[i]`'s rounding bound, naming the first that
/// does not.
#[track_caller]
pub fn assert_within(what: &str, got: &[f32], want: &[Rounded]) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    if let Some(i) = (0..got.len()).find(|&i| !want[i].holds(got[i])) {
        let w = want[i];
        panic!(
            "{what}: element {i} is {} (exact {}, error {:e} > the rounding bound {:e})",
            got[i],
            w.v,
            (got[i] as f64 - w.v).abs(),
            w.e
        );
    }
}
