//! The browser page: the library's kernels on WebGPU, checked against the CPU.
//!
//! [`run_checks`] opens nothing itself: given a [`Gpu`] it builds the pipeline of every kernel
//! of the library, runs the infrastructure kernels, the whole-array reductions, the workgroup
//! reduction probe, a matmul and two texture kernels (a blur through a sampler, a storage
//! texture write) on random data, and the kernels whose docs say what NaN and ±Inf do on inputs
//! holding them, and compares each with values computed here on the CPU, reporting one
//! [`Line`] per check. It only uses what works on the web (no blocking:
//! results come back through `read_async`), so the same code runs
//!
//! - in a browser, compiled for `wasm32-unknown-unknown`: `run()` (exported to JavaScript through
//!   wasm-bindgen, called by `index.html`) opens the browser's adapter and writes the lines into
//!   the page (`<li data-status="pass|fail|info|needs-f16|needs-tensor-cores|native-only">`);
//! - natively, on the native adapter, in this crate's unit test.
//!
//! [`train`] is the second page, `train.html`: the trainer of `kernels-train` in the browser.

mod textures;
pub mod train;

use kernels::infrastructure::{axpy, clamp_inplace, copy, fill_const, fill_zero, reduce_max, reduce_sum, scale};
use kernels::ops::{ReduceScratch, reduce_max_into, reduce_sum_into};
use kernels::{Buffer, Element, Error, Gpu, Grid, KernelDef, Result, linear};

// The probes of the shared preamble's reductions, from the tests.
kernels::kernels!("../../tests/shaders/probe.wgsl", shared = "../../shaders/00_shared.wgsl");
use probe::{reduce_probe, subgroup_only};

/// The probes whose pipelines are built with the library's.
static PROBES: [&KernelDef; 2] = [&reduce_probe::KERNEL, &subgroup_only::KERNEL];

/// How a check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// The GPU agreed with the CPU (or the pipeline was built).
    Pass,
    /// It did not, or something failed.
    Fail,
    /// Information: the adapter, the subgroup size, a summary.
    Info,
    /// The kernel needs `shader-f16`, which the device lacks (expected, not a failure).
    NeedsF16,
    /// The kernel has only tensor-core forms (its callers record another kernel where there
    /// are none), and the device has no tensor cores (expected, not a failure).
    NeedsTensorCores,
}

impl Status {
    /// The name the page uses (`data-status`).
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "fail",
            Status::Info => "info",
            Status::NeedsF16 => "needs-f16",
            Status::NeedsTensorCores => "needs-tensor-cores",
        }
    }
}

/// One line of the report.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    /// The outcome.
    pub status: Status,
    /// What was checked (`infrastructure::axpy`, `pipeline linear::matmul`, …).
    pub check: String,
    /// Details: errors, sizes, the largest difference.
    pub detail: String,
}

impl std::fmt::Display for Line {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.status.as_str(), self.check, self.detail)
    }
}

/// SplitMix64: random inputs without a crate (and without `getrandom` on the web).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// `n` values uniform in `[lo, hi)`.
    pub fn uniform(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| lo + (hi - lo) * ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32)).collect()
    }
}

/// Collects lines, passes each to the page as it comes, and remembers failures.
struct Report<'a> {
    emit: &'a mut dyn FnMut(&Line),
    failed: usize,
    passed: usize,
}

impl Report<'_> {
    fn line(&mut self, status: Status, check: impl Into<String>, detail: impl Into<String>) {
        match status {
            Status::Fail => self.failed += 1,
            Status::Pass => self.passed += 1,
            _ => {}
        }
        (self.emit)(&Line { status, check: check.into(), detail: detail.into() });
    }

    fn check(&mut self, ok: bool, check: &str, detail: String) {
        self.line(if ok { Status::Pass } else { Status::Fail }, check, detail);
    }

    /// Compares `got` with `want` elementwise: `|got − want| ≤ tol`; where `want` is NaN, `got`
    /// must be NaN, and a NaN anywhere else never passes.
    fn compare(&mut self, check: &str, got: &[f32], want: &[f64], tol: f64) {
        let mut worst = 0.0f64;
        let mut bad = None;
        for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
            let err = if w.is_nan() && g.is_nan() { 0.0 } else { (g as f64 - w).abs() };
            if err.is_nan() || err > tol {
                bad.get_or_insert((i, g, w));
            }
            if err > worst || err.is_nan() {
                worst = err;
            }
        }
        let detail = match (got.len() == want.len(), bad) {
            (false, _) => format!("{} values read, {} expected", got.len(), want.len()),
            (true, Some((i, g, w))) => format!("[{i}] = {g}, CPU {w} (tolerance {tol:e})"),
            (true, None) => format!("{} values, max |gpu − cpu| = {worst:e}", got.len()),
        };
        self.check(got.len() == want.len() && bad.is_none(), check, detail);
    }
}

/// Waits for the GPU (reporting errors it raised) and reads a buffer back, without blocking.
async fn read<T: Element>(gpu: &Gpu, buffer: &Buffer<T>) -> Result<Vec<T>> {
    gpu.wait_async().await?;
    buffer.read_async(gpu).await
}

/// Runs every check on `gpu` with inputs from `seed`, passing each line to `emit`; returns
/// whether all passed.
pub async fn run_checks(gpu: &Gpu, seed: u64, emit: &mut dyn FnMut(&Line)) -> bool {
    let mut report = Report { emit, failed: 0, passed: 0 };
    let r = &mut report;
    r.line(Status::Info, "adapter", gpu.report().to_string());
    r.line(Status::Info, "seed", seed.to_string());
    let mut rng = Rng::new(seed);

    // Pipelines first: on the web a pipeline is only checked when its build is awaited.
    pipelines(gpu, r).await;
    let checks: [(&str, Result<()>); 7] = [
        ("subgroups", subgroups(gpu, r).await),
        ("infrastructure", infrastructure(gpu, &mut rng, r).await),
        ("reductions", reductions(gpu, &mut rng, r).await),
        ("probe", probe(gpu, &mut rng, r).await),
        ("matmul", matmul(gpu, &mut rng, r).await),
        ("textures", textures::textures(gpu, &mut rng, r).await),
        ("non-finite", non_finite(gpu, &mut rng, r).await),
    ];
    for (name, result) in checks {
        if let Err(e) = result {
            r.line(Status::Fail, name, e.to_string());
        }
    }
    let (passed, failed) = (r.passed, r.failed);
    r.line(
        if failed == 0 && passed > 0 { Status::Info } else { Status::Fail },
        "summary",
        format!("{passed} passed, {failed} failed"),
    );
    failed == 0 && passed > 0
}

/// Builds the pipeline of every kernel of the library (and of the probes): a kernel that needs
/// `SHADER_F16` on a device without it is `needs-f16`, one with only tensor-core forms on a
/// device without them `needs-tensor-cores`, any other error a failure. Also checks
/// the browser sources' `enable` directives: `f16` only where a variant needs it, `subgroups`
/// exactly where a variant uses them.
async fn pipelines(gpu: &Gpu, r: &mut Report<'_>) {
    let (mut built, mut needs_f16) = (0usize, Vec::new());
    for &kernel in kernels::all_kernels().chain(PROBES.iter()) {
        let name = kernel.qualified_name();
        if let Some(problem) = directive_problem(kernel) {
            r.line(Status::Fail, format!("enable {name}"), problem);
        }
        match gpu.build_async(kernel).await {
            Ok(()) => {
                built += 1;
                let variant = gpu.variant_for(kernel).map(|v| describe_variant(v.subgroups, v.f16));
                r.line(Status::Pass, format!("pipeline {name}"), variant.unwrap_or_default());
            }
            Err(Error::MissingFeature { feature: "SHADER_F16", .. }) => {
                needs_f16.push(name.clone());
                r.line(Status::NeedsF16, format!("pipeline {name}"), "needs shader-f16");
            }
            Err(Error::MissingFeature { feature: "EXPERIMENTAL_COOPERATIVE_MATRIX", .. })
                if kernel.needs_tensor_cores() =>
            {
                r.line(Status::NeedsTensorCores, format!("pipeline {name}"), "needs tensor cores");
            }
            Err(e) => r.line(Status::Fail, format!("pipeline {name}"), e.to_string()),
        }
    }
    r.line(
        Status::Info,
        "pipelines",
        match needs_f16.len() {
            0 => format!("{built} built; none needs shader-f16"),
            n => format!("{built} built; {n} need shader-f16: {}", needs_f16.join(", ")),
        },
    );
}

fn describe_variant(subgroups: bool, f16: bool) -> String {
    match (subgroups, f16) {
        (true, true) => "built (subgroups, f16)".into(),
        (true, false) => "built (subgroups)".into(),
        (false, true) => "built (f16)".into(),
        (false, false) => "built".into(),
    }
}

/// What is wrong with the `enable` directives of a kernel's browser sources, if anything.
fn directive_problem(kernel: &KernelDef) -> Option<String> {
    // Variants with cooperative matrices are native only (no browser source).
    for v in kernel.variants.iter().filter(|v| v.coop.is_empty()) {
        let has = |directive: &str| v.browser_wgsl.lines().any(|l| l.trim() == directive);
        if has("enable f16;") != v.f16 {
            return Some(format!(
                "`enable f16;` {} a variant that {} f16",
                if v.f16 { "missing in" } else { "in" },
                if v.f16 { "uses" } else { "does not use" }
            ));
        }
        if has("enable subgroups;") != v.subgroups {
            return Some(format!(
                "`enable subgroups;` {} a variant that {} subgroups",
                if v.subgroups { "missing in" } else { "in" },
                if v.subgroups { "uses" } else { "does not use" }
            ));
        }
    }
    None
}

/// The subgroup size the kernels run at, measured (`subgroupAdd(1)`).
async fn subgroups(gpu: &Gpu, r: &mut Report<'_>) -> Result<()> {
    if !gpu.uses_subgroups() {
        r.line(Status::Info, "subgroups", "off: the reductions run their tree variants");
        return Ok(());
    }
    let mut out = gpu.filled(256, u32::MAX)?;
    subgroup_only(gpu, &mut out, Grid::Workgroups(1))?;
    let sizes = read(gpu, &out).await?;
    let size = sizes[0];
    let ok = sizes.iter().all(|&s| s == size) && (4..=128).contains(&size);
    r.line(
        if ok { Status::Info } else { Status::Fail },
        "subgroups",
        format!(
            "on, subgroup size in use: {size} (adapter reports {}–{})",
            gpu.report().subgroup_min_size,
            gpu.report().subgroup_max_size
        ),
    );
    Ok(())
}

/// Every kernel of `kernels::infrastructure`, on a length that is not a multiple of the
/// workgroup size; elements past `n` must stay untouched.
async fn infrastructure(gpu: &Gpu, rng: &mut Rng, r: &mut Report<'_>) -> Result<()> {
    const N: usize = 100_003;
    const SENTINEL: f32 = 7.0;
    let n = N as u32;
    let xs = rng.uniform(N, -1.0, 1.0);
    let ys = rng.uniform(N, -1.0, 1.0);
    let with_tail = |v: &[f32]| v.iter().copied().chain([SENTINEL; 5]).collect::<Vec<f32>>();
    let wide = |v: &[f32]| v.iter().map(|&x| x as f64).chain([SENTINEL as f64; 5]).collect::<Vec<f64>>();

    let mut z = gpu.upload(&with_tail(&xs))?;
    fill_zero(gpu, &mut z, n)?;
    r.compare("infrastructure::fill_zero", &read(gpu, &z).await?, &wide(&vec![0.0; N]), 0.0);

    fill_const(gpu, &mut z, fill_const::Params::new(n, -2.5))?;
    r.compare("infrastructure::fill_const", &read(gpu, &z).await?, &wide(&vec![-2.5; N]), 0.0);

    let x = gpu.upload(&xs)?;
    copy(gpu, &x, &mut z, n)?;
    r.compare("infrastructure::copy", &read(gpu, &z).await?, &wide(&xs), 0.0);

    let mut y = gpu.upload(&with_tail(&ys))?;
    scale(gpu, &mut y, scale::Params::new(n, 1.75))?;
    let scaled: Vec<f32> = ys.iter().map(|&v| v * 1.75).collect();
    r.compare("infrastructure::scale", &read(gpu, &y).await?, &wide(&scaled), 0.0);

    axpy(gpu, &x, &mut y, axpy::Params::new(n, -0.5))?;
    let axpied: Vec<f64> =
        scaled.iter().zip(&xs).map(|(&v, &x)| v as f64 - 0.5 * x as f64).chain([SENTINEL as f64; 5]).collect();
    r.compare("infrastructure::axpy", &read(gpu, &y).await?, &axpied, 1e-6);

    // NaNs (quiet, negative, with payloads) stay NaN; ±Inf go to the bounds. The kernel finds
    // NaN on the bits: a `v != v` test is folded away by some browsers' compilers.
    let mut cs = xs.clone();
    let specials = [
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7f80_0001),
        f32::from_bits(0xffc0_1234),
        f32::INFINITY,
        f32::NEG_INFINITY,
    ];
    for (k, s) in specials.into_iter().enumerate() {
        cs[k * (N / specials.len()) + (rng.next_u64() % (N / specials.len()) as u64) as usize] = s;
    }
    let mut c = gpu.upload(&with_tail(&cs))?;
    clamp_inplace(gpu, &mut c, clamp_inplace::Params::new(n, -0.25, 0.5))?;
    let clamped: Vec<f32> = cs.iter().map(|&v| v.clamp(-0.25, 0.5)).collect();
    r.compare("infrastructure::clamp_inplace", &read(gpu, &c).await?, &wide(&clamped), 0.0);

    // One pass of each reduction: one partial per chunk of 1024.
    let m = 3000usize;
    let chunk = kernels::ops::REDUCE_CHUNK;
    let mut partials = gpu.filled(m.div_ceil(chunk), f32::NAN)?;
    reduce_sum(gpu, &x, &mut partials, m as u32)?;
    let sums: Vec<f64> = xs[..m].chunks(chunk).map(|c| c.iter().map(|&v| v as f64).sum()).collect();
    r.compare("infrastructure::reduce_sum", &read(gpu, &partials).await?, &sums, 1e-6 * chunk as f64);
    reduce_max(gpu, &x, &mut partials, m as u32)?;
    let maxes: Vec<f64> =
        xs[..m].chunks(chunk).map(|c| c.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64).collect();
    r.compare("infrastructure::reduce_max", &read(gpu, &partials).await?, &maxes, 0.0);
    Ok(())
}

/// Where in `0..n` the `k`-th of `count` planted values goes: one in each `count`-th of the
/// range, at a random place in it.
fn planted(rng: &mut Rng, n: usize, count: usize, k: usize) -> usize {
    let part = n / count;
    k * part + (rng.next_u64() % part as u64) as usize
}

/// The kernels whose docs say what NaN and ±Inf do, given them (compilers may fold a `v != v`
/// test away; the kernels test the bits, and this checks that the browser agrees): the
/// gradient norm leaves them out and counts them, both AdamW forms skip their elements and
/// zero every gradient, the split products' absmax leaves them out, the f16 fast path's dS (`attention_ds_f16`) flags
/// them (and values beyond f16's range) for the loss scaler.
async fn non_finite(gpu: &Gpu, rng: &mut Rng, r: &mut Report<'_>) -> Result<()> {
    use kernels::optimizer::{adamw_8bit_update, adamw_update, finalize_grad_stats, reduce_norm_sq};
    const N: usize = 5000;
    let mut g = rng.uniform(N, -1.0, 1.0);
    let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, f32::from_bits(0xffc0_1234)];
    let bad_at: Vec<usize> = (0..specials.len()).map(|k| planted(rng, N, specials.len(), k)).collect();
    for (&at, &v) in bad_at.iter().zip(&specials) {
        g[at] = v;
    }
    let finite = |i: usize| !bad_at.contains(&i);

    // The norm: finite values only, the rest counted; clipping off (scale 1).
    let blocks = N.div_ceil(4096);
    let mut partials = gpu.filled(blocks, f32::NAN)?;
    let mut bad = gpu.filled(blocks, u32::MAX)?;
    let mut stats = gpu.filled(4, f32::NAN)?;
    reduce_norm_sq(gpu, &gpu.upload(&g)?, &mut partials, &mut bad, reduce_norm_sq::Params::new(N as u32, 0))?;
    finalize_grad_stats(gpu, &partials, &bad, &mut stats, finalize_grad_stats::Params::new(blocks as u32, 0.0))?;
    let sq: f64 = (0..N).filter(|&i| finite(i)).map(|i| (g[i] as f64).powi(2)).sum();
    let want = [sq, 1.0, sq.sqrt(), specials.len() as f64];
    r.compare(
        "optimizer::reduce_norm_sq + finalize_grad_stats (NaN, ±Inf)",
        &read(gpu, &stats).await?,
        &want,
        1e-5 * sq,
    );

    // One AdamW step at t = 3 from random state, and one 8-bit step from zero state (its first
    // step updates p from exact moments, so p matches the f32 form's at t = 1).
    let (lr, b1, b2, eps, wd) = (0.01f32, 0.9f32, 0.999f32, 1e-8f32, 0.1f32);
    let p0 = rng.uniform(N, -1.0, 1.0);
    let m0 = rng.uniform(N, -0.1, 0.1);
    // v away from 0, so that m̂ / √v̂ stays O(1) and an absolute tolerance fits every element.
    let v0 = rng.uniform(N, 0.001, 0.01);
    let step = |t: i32, m: f64, v: f64, p: f64, x: f64| {
        let (b1, b2) = (b1 as f64, b2 as f64);
        let m1 = b1 * m + (1.0 - b1) * x;
        let v1 = b2 * v + (1.0 - b2) * x * x;
        let (mh, vh) = (m1 / (1.0 - b1.powi(t)), v1 / (1.0 - b2.powi(t)));
        (p - lr as f64 * (mh / (vh.sqrt() + eps as f64) + wd as f64 * p), m1, v1)
    };
    let bias = |b: f32, t: i32| (1.0 - (b as f64).powi(t)) as f32;
    let (mut p, mut gb, mut m, mut v) = (gpu.upload(&p0)?, gpu.upload(&g)?, gpu.upload(&m0)?, gpu.upload(&v0)?);
    let h = adamw_update::Params::new(N as u32, lr, b1, b2, eps, wd, bias(b1, 3), bias(b2, 3));
    adamw_update(gpu, &mut p, &mut gb, &mut m, &mut v, &stats, h)?;
    let want: Vec<(f64, f64, f64)> = (0..N)
        .map(|i| {
            if finite(i) {
                step(3, m0[i] as f64, v0[i] as f64, p0[i] as f64, g[i] as f64)
            } else {
                (p0[i] as f64, m0[i] as f64, v0[i] as f64)
            }
        })
        .collect();
    r.compare(
        "optimizer::adamw_update p (NaN, ±Inf gradients skipped)",
        &read(gpu, &p).await?,
        &want.iter().map(|w| w.0).collect::<Vec<_>>(),
        1e-6,
    );
    r.compare("optimizer::adamw_update m", &read(gpu, &m).await?, &want.iter().map(|w| w.1).collect::<Vec<_>>(), 1e-6);
    r.compare("optimizer::adamw_update v", &read(gpu, &v).await?, &want.iter().map(|w| w.2).collect::<Vec<_>>(), 1e-6);
    r.compare("optimizer::adamw_update g", &read(gpu, &gb).await?, &[0.0; N], 0.0);

    let (mut p, mut gb) = (gpu.upload(&p0)?, gpu.upload(&g)?);
    let (mut mq, mut vq) = (gpu.filled(N.div_ceil(4), 0u32)?, gpu.filled(N.div_ceil(4), 0u32)?);
    let mut qscale = gpu.filled(2 * N.div_ceil(256), 0.0f32)?;
    let h = adamw_8bit_update::Params::new(N as u32, lr, b1, b2, eps, wd, bias(b1, 1), bias(b2, 1), 0);
    adamw_8bit_update(gpu, &mut p, &mut gb, &mut mq, &mut vq, &mut qscale, &stats, h)?;
    let want: Vec<f64> =
        (0..N).map(|i| if finite(i) { step(1, 0.0, 0.0, p0[i] as f64, g[i] as f64).0 } else { p0[i] as f64 }).collect();
    r.compare("optimizer::adamw_8bit_update p (NaN, ±Inf gradients skipped)", &read(gpu, &p).await?, &want, 1e-6);
    r.compare("optimizer::adamw_8bit_update g", &read(gpu, &gb).await?, &[0.0; N], 0.0);

    // absmax: the largest finite magnitude, planted among the specials.
    let mut x = rng.uniform(N, -1.0, 1.0);
    let big = planted(rng, N, 1, 0);
    if !finite(big) {
        x[(big + 1) % N] = -2.5;
    } else {
        x[big] = -2.5;
    }
    for (&at, &s) in bad_at.iter().zip(&specials) {
        x[at] = s;
    }
    let mut amax = gpu.upload(&[0u32, 7])?;
    kernels::linear::precise_absmax(gpu, &gpu.upload(&x)?, &mut amax, kernels::linear::AbsParams::new(N as u32, 0))?;
    let got = read(gpu, &amax).await?;
    r.check(
        got == [2.5f32.to_bits(), 7],
        "linear::precise_absmax (NaN, ±Inf left out)",
        format!("slot 0 = {} (want 2.5), slot 1 = {} (untouched: 7)", f32::from_bits(got[0]), got[1]),
    );

    // GELU of NaN is NaN (lib/activations.wgsl), of finite values finite.
    let mut x = gpu.upload(&[f32::NAN, -1.0e4, 1.0e4, 0.5])?;
    kernels::activation::gelu_inplace(gpu, &mut x, kernels::activation::gelu_inplace::Params::new(4))?;
    let got = read(gpu, &x).await?;
    r.check(
        got[0].is_nan() && got[1..].iter().all(|v| v.is_finite()),
        "activation::gelu_inplace (NaN)",
        format!("gelu(NaN, -1e4, 1e4, 0.5) = {got:?}"),
    );

    // the f16 fast path's dS (`attention_ds_f16`): P·(dP − Δ) up to the diagonal, 0 past it in its tile; the flag set by
    // any NaN, ±Inf or |dS| > 65504, and left clear otherwise.
    let kernel = &kernels::backward_attention::attention_ds_f16::KERNEL;
    if gpu.variant_for(kernel).is_err() {
        r.line(Status::NeedsF16, "backward_attention::attention_ds_f16 (NaN, ±Inf)", "not runnable here");
        return Ok(());
    }
    let seq = 12usize;
    let mut probs = rng.uniform(seq * seq, 0.0, 1.0);
    let delta = rng.uniform(seq, -1.0, 1.0);
    let clean = rng.uniform(seq * seq, -1.0, 1.0);
    let at = 5 * seq + 2; // row 5, key 2: below the diagonal
    // Where the value is planted, P = 0.5: dP = 1e6 then gives |dS| ≈ 5e5, beyond f16 whatever
    // Δ is (a random P could be small enough to bring it back into range).
    probs[at] = 0.5;
    let params = kernels::backward_attention::attention_ds_f16::Params::new(1, seq as u32, 1);
    for (label, planted_value) in
        [("clean", None), ("NaN", Some(f32::NAN)), ("+Inf", Some(f32::INFINITY)), ("beyond f16", Some(1e6))]
    {
        let mut dp = clean.clone();
        if let Some(v) = planted_value {
            dp[at] = v;
        }
        let mut ds = gpu.upload(&dp)?;
        let mut flag = gpu.upload(&[0u32])?;
        kernels::backward_attention::attention_ds_f16(
            gpu,
            &gpu.upload(&probs)?,
            &gpu.upload(&delta)?,
            &mut ds,
            &mut flag,
            params,
        )?;
        let flagged = read(gpu, &flag).await?[0] != 0;
        let name = format!("backward_attention::attention_ds_f16 ({label})");
        r.check(flagged == planted_value.is_some(), &format!("{name} flag"), format!("flag {}", flagged as u32));
        if planted_value.is_none() {
            let want: Vec<f64> = (0..seq * seq)
                .map(|e| {
                    let (s, j) = (e / seq, e % seq);
                    if j <= s { probs[e] as f64 * (dp[e] as f64 - delta[s] as f64) } else { 0.0 }
                })
                .collect();
            r.compare(&name, &read(gpu, &ds).await?, &want, 1e-6);
        }
    }
    Ok(())
}

/// `ops::reduce_sum_into` / `reduce_max_into` over one to three passes.
async fn reductions(gpu: &Gpu, rng: &mut Rng, r: &mut Report<'_>) -> Result<()> {
    for n in [1usize, 1000, 1025, 300_001, 1_100_000] {
        let xs = rng.uniform(n, -1.0, 1.0);
        let x = gpu.upload(&xs)?;
        let mut scratch = ReduceScratch::new(gpu, n)?;
        let mut sum = gpu.filled(1, f32::NAN)?;
        let mut max = gpu.filled(1, f32::NAN)?;
        let batch = gpu.batch();
        reduce_sum_into(&batch, &x, n, &mut sum, &mut scratch)?;
        reduce_max_into(&batch, &x, n, &mut max, &mut scratch)?;
        batch.submit()?;
        let want: f64 = xs.iter().map(|&v| v as f64).sum();
        let scale: f64 = xs.iter().map(|&v| (v as f64).abs()).sum();
        r.compare(&format!("ops::reduce_sum_into n={n}"), &read(gpu, &sum).await?, &[want], 1e-6 * scale);
        let want = xs.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        r.compare(&format!("ops::reduce_max_into n={n}"), &read(gpu, &max).await?, &[want], 0.0);
    }
    Ok(())
}

/// The preamble's `wg_reduce_sum` / `wg_reduce_max` directly, max then two sums back to back:
/// every invocation must get its workgroup's result, and Σ 0..255 must be exactly 32640 at
/// whatever subgroup size the device runs (a reduction written for one subgroup size sums wrong at another).
async fn probe(gpu: &Gpu, rng: &mut Rng, r: &mut Report<'_>) -> Result<()> {
    const GROUPS: usize = 5;
    let mut vals: Vec<f32> = (0..256).map(|t| t as f32).collect();
    vals.extend(rng.uniform(256 * (GROUPS - 1), -2.0, 2.0));
    let v = gpu.upload(&vals)?;
    let mut sums = gpu.filled(256 * GROUPS, f32::NAN)?;
    let mut maxes = gpu.filled(256 * GROUPS, f32::NAN)?;
    let mut sums2 = gpu.filled(256 * GROUPS, f32::NAN)?;
    reduce_probe(gpu, &v, &mut sums, &mut maxes, &mut sums2, GROUPS as u32)?;
    let (s, m, s2) = (read(gpu, &sums).await?, read(gpu, &maxes).await?, read(gpu, &sums2).await?);
    let variant = if gpu.variant_for(&reduce_probe::KERNEL)?.subgroups { "subgroup variant" } else { "tree variant" };
    let exact = s[..256].iter().all(|&x| x == 32640.0);
    r.check(exact, "probe Σ0..255", format!("{} on every invocation (must be 32640; {variant})", s[0]));
    let mut want_s = Vec::new();
    let mut want_m = Vec::new();
    let mut want_s2 = Vec::new();
    let mut worst_abs = 0.0f64;
    for w in 0..GROUPS {
        let chunk = &vals[w * 256..(w + 1) * 256];
        let sum: f64 = chunk.iter().map(|&x| x as f64).sum();
        let max = chunk.iter().map(|&x| -x).fold(f32::NEG_INFINITY, f32::max) as f64;
        worst_abs = worst_abs.max(chunk.iter().map(|&x| (x as f64).abs()).sum());
        want_s.extend([sum; 256]);
        want_m.extend([max; 256]);
        want_s2.extend([2.0 * sum; 256]);
    }
    r.compare("probe wg_reduce_sum", &s, &want_s, 1e-6 * worst_abs);
    r.compare("probe wg_reduce_max", &m, &want_m, 0.0);
    r.compare("probe wg_reduce_sum (second)", &s2, &want_s2, 2e-6 * worst_abs);
    let agree = (0..GROUPS).all(|w| s[w * 256..(w + 1) * 256].iter().all(|x| x.to_bits() == s[w * 256].to_bits()));
    r.check(agree, "probe invocations agree", "every invocation of a workgroup got the same bits".into());
    Ok(())
}

/// `linear::matmul` at shapes on and off the 128×64×16 tiles; elements past M·N stay NaN.
async fn matmul(gpu: &Gpu, rng: &mut Rng, r: &mut Report<'_>) -> Result<()> {
    for (m, n, k) in [(1usize, 1usize, 1usize), (65, 70, 33), (128, 192, 80)] {
        let xs = rng.uniform(m * k, -1.0, 1.0);
        let ws = rng.uniform(k * n, -1.0, 1.0);
        let x = gpu.upload(&xs)?;
        let w = gpu.upload(&ws)?;
        let mut y = gpu.filled(m * n + 3, f32::NAN)?;
        linear::matmul(gpu, &x, &w, &mut y, linear::matmul::Params::new(m as u32, n as u32, k as u32))?;
        let got = read(gpu, &y).await?;
        let mut want = vec![0.0f64; m * n];
        let mut bound = 0.0f64;
        for i in 0..m {
            for j in 0..n {
                let (mut acc, mut abs) = (0.0f64, 0.0f64);
                for p in 0..k {
                    let t = xs[i * k + p] as f64 * ws[p * n + j] as f64;
                    acc += t;
                    abs += t.abs();
                }
                want[i * n + j] = acc;
                bound = bound.max(abs);
            }
        }
        let tail_ok = got[m * n..].iter().all(|v| v.is_nan());
        r.compare(&format!("linear::matmul {m}×{n}×{k}"), &got[..m * n], &want, 1e-6 * bound.max(1.0));
        r.check(tail_ok, &format!("linear::matmul {m}×{n}×{k} tail"), "elements past M·N untouched".into());
    }
    Ok(())
}

/// The page's entry point (wasm32 only).
#[cfg(target_arch = "wasm32")]
mod page {
    use super::{Line, Status, run_checks};
    use kernels::{Gpu, GpuOptions};
    use wasm_bindgen::prelude::*;

    /// Appends one line to `#checks` (and the console).
    fn append(line: &Line) {
        web_sys::console::log_1(&JsValue::from_str(&line.to_string()));
        let Some(document) = web_sys::window().and_then(|w| w.document()) else { return };
        let (Some(list), Ok(li)) = (document.get_element_by_id("checks"), document.create_element("li")) else {
            return;
        };
        let _ = li.set_attribute("data-status", line.status.as_str());
        let _ = li.set_attribute("data-check", &line.check);
        li.set_text_content(Some(&line.to_string()));
        let _ = list.append_child(&li);
    }

    /// Opens the browser's adapter and runs every check, writing one `<li>` per line into
    /// `#checks`, on inputs from `seed` (a decimal u64: the page's `?seed=N`, which the test
    /// passes from `KERNELS_TEST_SEED`; fresh when absent). Resolves to whether all passed.
    #[wasm_bindgen]
    pub async fn run(seed: Option<String>) -> bool {
        // A panic becomes a failed line instead of a bare `unreachable` trap.
        std::panic::set_hook(Box::new(|info| {
            append(&Line { status: Status::Fail, check: "panic".into(), detail: info.to_string() })
        }));
        let gpu = match Gpu::with_options(GpuOptions::default()).await {
            Ok(gpu) => gpu,
            Err(e) => {
                append(&Line { status: Status::Fail, check: "adapter".into(), detail: e.to_string() });
                return false;
            }
        };
        let seed = match seed.as_deref().map(str::parse::<u64>) {
            Some(Ok(seed)) => seed,
            Some(Err(e)) => {
                append(&Line { status: Status::Fail, check: "seed".into(), detail: format!("?seed={seed:?}: {e}") });
                return false;
            }
            None => (js_sys::Math::random() * 9_007_199_254_740_992.0) as u64,
        };
        run_checks(&gpu, seed, &mut |line| append(line)).await
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;

    /// The page's checks on the native adapter (lavapipe in CI), so that a wrong check is
    /// found without a browser. Skipped without an adapter, except under `CI=true`.
    #[test]
    fn the_page_checks_pass_natively() {
        let gpu = match Gpu::with_options_blocking(kernels::GpuOptions::from_env()) {
            Ok(gpu) => gpu,
            Err(e) if std::env::var("CI").as_deref() != Ok("true") => {
                eprintln!("skipped: {e}");
                return;
            }
            Err(e) => panic!("no adapter under CI=true: {e}"),
        };
        let seed = std::env::var("KERNELS_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
        });
        let mut lines = Vec::new();
        let ok = pollster::block_on(run_checks(&gpu, seed, &mut |l| {
            eprintln!("{l}");
            lines.push(l.clone())
        }));
        let failed: Vec<String> = lines.iter().filter(|l| l.status == Status::Fail).map(|l| l.to_string()).collect();
        assert!(ok && failed.is_empty(), "KERNELS_TEST_SEED={seed}:\n{}", failed.join("\n"));
        assert!(lines.iter().any(|l| l.check == "probe Σ0..255" && l.status == Status::Pass));
    }

    #[test]
    fn directives_match_the_variants() {
        for kernel in kernels::all_kernels() {
            assert_eq!(directive_problem(kernel), None, "{}", kernel.qualified_name());
        }
    }
}
