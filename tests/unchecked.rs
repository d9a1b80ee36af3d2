//! Kernels marked `// @unchecked` (`tests/shaders/unchecked.wgsl`) on the test adapter: the
//! generated `KernelDef` says so, the module is created without wgpu's runtime checks and
//! computes what a CPU reference computes on fresh random inputs, its `@requires` still guard
//! it, and `GpuOptions::runtime_checks(RuntimeChecks::All)` builds it with the checks again —
//! observably, on arguments its `@unchecked` does not cover.

mod common;

use common::{TAIL, gpu_with, rng};
use kernels::{Error, Gpu, GpuOptions, RuntimeChecks};
use rand::Rng;
use rand::rngs::StdRng;

kernels::kernels!("tests/shaders/unchecked.wgsl", shared = "shaders/00_shared.wgsl");

use unchecked::{circular_window, out_of_range};

/// The options of the tests, with the runtime checks as `checks` says whatever the environment
/// says (`KERNELS_RUNTIME_CHECKS`).
fn gpu(checks: RuntimeChecks) -> Option<Gpu> {
    gpu_with(GpuOptions::from_env().runtime_checks(checks))
}

/// `circular_window` in u64 (no wrapping): every row's window sums, divided.
fn reference(x: &[u32], p: circular_window::Params) -> Vec<u32> {
    let (rows, cols) = (p.rows as usize, p.cols as usize);
    let mut y = vec![0u32; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            let sum: u64 = (0..p.window as usize).map(|k| x[r * cols + (c + k) % cols] as u64).sum();
            y[r * cols + c] = u32::try_from(sum / p.div as u64).expect("the inputs keep sums in u32");
        }
    }
    y
}

/// Runs `circular_window` on fresh random input of `p`'s shape; checks every element and that
/// the output's tail is untouched.
fn check_window(gpu: &Gpu, rng: &mut StdRng, p: circular_window::Params) {
    let n = (p.rows * p.cols) as usize;
    // Below 2^20, so that a window of up to 4 rows of 256 sums within u32.
    let x: Vec<u32> = (0..n).map(|_| rng.random_range(0..1u32 << 20)).collect();
    let xb = gpu.upload(&x).unwrap();
    let mut y = gpu.filled(n + TAIL, u32::MAX).unwrap();
    circular_window(gpu, &xb, &mut y, p).unwrap();
    let got = y.read(gpu).unwrap();
    let want = reference(&x, p);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "{p:?}: y[{i}] (row {}, column {})", i / p.cols as usize, i % p.cols as usize);
    }
    assert!(got[n..].iter().all(|&v| v == u32::MAX), "{p:?}: written past rows × cols");
}

/// Shapes at the edges (one column, a full tile, windows of 0, 1, exactly a row and past several
/// rows' worth of wraps) and random ones.
fn shapes(rng: &mut StdRng) -> Vec<circular_window::Params> {
    let mut shapes = vec![
        circular_window::Params::new(1, 1, 0, 1),
        circular_window::Params::new(3, 1, 5, 2),
        circular_window::Params::new(2, 256, 256, 1),
        circular_window::Params::new(5, 256, 1024, 7),
        circular_window::Params::new(4, 77, 1, 3),
    ];
    for _ in 0..6 {
        let cols = rng.random_range(2..=256u32);
        let window = rng.random_range(0..=4 * cols);
        shapes.push(circular_window::Params::new(rng.random_range(1..=40), cols, window, rng.random_range(1..=9)));
    }
    shapes
}

#[test]
fn the_kernel_def_says_which_kernels_are_unchecked() {
    assert!(circular_window::KERNEL.unchecked && out_of_range::KERNEL.unchecked);
    assert!(!kernels::infrastructure::scale::KERNEL.unchecked, "a kernel without the annotation is checked");
}

#[test]
fn an_unchecked_kernel_computes_its_reference() {
    let Some(gpu) = gpu(RuntimeChecks::AsDeclared) else { return };
    assert!(!gpu.runtime_checks_for(&circular_window::KERNEL), "built without the checks");
    assert!(gpu.runtime_checks_for(&kernels::infrastructure::scale::KERNEL));
    assert_eq!(gpu.report().runtime_checks, RuntimeChecks::AsDeclared);
    let mut rng = rng("an_unchecked_kernel_computes_its_reference");
    for p in shapes(&mut rng) {
        check_window(&gpu, &mut rng, p);
    }
    // In range, the deliberately loose kernel computes what it says too.
    let at = rng.random_range(0..8u32);
    let (num, den) = (rng.random::<u32>(), rng.random_range(1..=u32::MAX));
    let mut out = gpu.filled(2, 0u32).unwrap();
    out_of_range(&gpu, &mut out, out_of_range::Probe::new(at, num, den)).unwrap();
    assert_eq!(out.read(&gpu).unwrap(), vec![100 + at, num / den]);
}

#[test]
fn its_requires_still_guard_it() {
    let Some(gpu) = gpu(RuntimeChecks::AsDeclared) else { return };
    let x = gpu.upload(&[1u32; 300]).unwrap();
    let mut y = gpu.filled(300, 0u32).unwrap();
    let refused = |p: circular_window::Params, y: &mut kernels::Buffer<u32>| match circular_window(&gpu, &x, y, p) {
        Err(Error::Shape { requirement, .. }) => requirement,
        other => panic!("{p:?}: {other:?}"),
    };
    assert_eq!(refused(circular_window::Params::new(1, 4, 4, 0), &mut y), "p.div > 0");
    assert_eq!(refused(circular_window::Params::new(1, 257, 4, 1), &mut y), "p.cols <= TILE");
    let mut short = gpu.filled(7, 0u32).unwrap();
    assert_eq!(refused(circular_window::Params::new(2, 4, 4, 1), &mut short), "len(y) >= p.rows * p.cols");
    // Nothing is dispatched: `y` keeps its zeros.
    assert!(y.read(&gpu).unwrap().iter().all(|&v| v == 0));
}

#[test]
fn every_kernel_is_checked_when_asked() {
    let Some(gpu) = gpu(RuntimeChecks::All) else { return };
    assert!(gpu.runtime_checks_for(&circular_window::KERNEL) && gpu.runtime_checks_for(&out_of_range::KERNEL));
    assert_eq!(gpu.report().runtime_checks, RuntimeChecks::All);
    assert!(gpu.report().to_string().contains("runtime checks: every kernel"), "{}", gpu.report());
    let mut rng = rng("every_kernel_is_checked_when_asked");
    for p in shapes(&mut rng) {
        check_window(&gpu, &mut rng, p);
    }
    // Out of range, which only the checks make defined: naga clamps the index to the last entry
    // and a zero divisor leaves the dividend.
    let at = rng.random_range(8..=u32::MAX);
    let num = rng.random::<u32>();
    let mut out = gpu.filled(2, 0u32).unwrap();
    out_of_range(&gpu, &mut out, out_of_range::Probe::new(at, num, 0)).unwrap();
    assert_eq!(out.read(&gpu).unwrap(), vec![107, num], "index {at}, {num} / 0");
}
