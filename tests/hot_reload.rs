//! Hot reload under a running program: each test copies `tests/shaders/hot/` to a directory of
//! its own, points the context at the copy (`GpuOptions::remap_sources`), runs the compiled
//! kernels, edits the copy and waits for the reload's report: an edit that compiles and fits
//! the Rust function runs from the next call (with the runtime checks its `@unchecked` or its
//! absence declares); one that does not is reported as the compile error would be, and the
//! kernel keeps computing what it computed before.

mod common;

use common::{gpu_with, poisoned, rng, uniform};
use kernels::{Gpu, GpuOptions, ReloadReport};
use std::path::{Path, PathBuf};
use std::time::Duration;

kernels::kernels!("tests/shaders/hot/01_hot.wgsl");

/// Long enough for a debug build on a loaded 2-core machine; a reload takes milliseconds.
const WAIT: Duration = Duration::from_secs(120);
const N: usize = 1000;

/// A copy of the crate's `tests/shaders/hot/` under a fresh directory laid out like the crate,
/// so that messages show the paths the compile errors show.
struct Copy {
    root: PathBuf,
}

impl Copy {
    fn new(test: &str) -> Copy {
        let root = std::env::temp_dir().join(format!("kernels-hot-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/shaders/hot");
        for rel in ["00_shared.wgsl", "01_hot.wgsl", "lib/bias.wgsl"] {
            let to = root.join("tests/shaders/hot").join(rel);
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(from.join(rel), &to).unwrap();
        }
        Copy { root }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.join("tests/shaders/hot").join(rel)
    }

    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap()
    }

    /// Replaces the one occurrence of `old` in `rel`.
    fn edit(&self, rel: &str, old: &str, new: &str) {
        self.edits(rel, &[(old, new)]);
    }

    /// Several replacements written at once (a poll between them would compile a half edit).
    fn edits(&self, rel: &str, pairs: &[(&str, &str)]) {
        let mut text = self.read(rel);
        for (old, new) in pairs {
            assert_eq!(text.matches(old).count(), 1, "`{old}` once in {rel}");
            text = text.replace(old, new);
        }
        std::fs::write(self.path(rel), text).unwrap();
    }

    /// The 1-based line of `rel` holding `snippet`.
    fn line_of(&self, rel: &str, snippet: &str) -> usize {
        self.read(rel).lines().position(|l| l.contains(snippet)).expect("snippet in file") + 1
    }

    /// A context reading the copy, with the runtime checks as the kernels declare them.
    fn gpu(&self) -> Option<Gpu> {
        let options = GpuOptions::from_env()
            .runtime_checks(kernels::RuntimeChecks::AsDeclared)
            .hot_reload(true)
            .remap_sources(env!("CARGO_MANIFEST_DIR"), &self.root)
            .pipeline_cache_dir(None::<PathBuf>);
        gpu_with(options)
    }
}

impl Drop for Copy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The first report after `after` that says something about `kernel`.
fn report_on(gpu: &Gpu, after: u64, kernel: &str) -> ReloadReport {
    let mut seen = after;
    loop {
        let r = gpu.wait_for_reload(seen, WAIT).unwrap_or_else(|| panic!("no reload report on `{kernel}`"));
        if r.swapped.iter().chain(&r.kept).any(|k| k == kernel) {
            return r;
        }
        seen = r.generation;
    }
}

fn run_affine(gpu: &Gpu, x: &kernels::Buffer<f32>, a: f32) -> Vec<f32> {
    let mut y = poisoned(gpu, N);
    hot::affine(gpu, x, &mut y, hot::affine::Params::new(N as u32, a)).unwrap();
    let out = y.read(gpu).unwrap();
    common::check_tail("affine", &out, N);
    out[..N].to_vec()
}

fn run_gain(gpu: &Gpu, x: &kernels::Buffer<f32>, gain: f32) -> Vec<f32> {
    let mut y = poisoned(gpu, N);
    hot::gain(gpu, x, &mut y, N as u32, hot::gain::Overrides { GAIN: Some(gain) }).unwrap();
    let out = y.read(gpu).unwrap();
    common::check_tail("gain", &out, N);
    out[..N].to_vec()
}

/// `got` against `want` (float64 of the same formula): one f32 rounding per operation.
#[track_caller]
fn check(what: &str, got: &[f32], want: impl Fn(f64) -> f64, x: &[f32]) {
    for (i, (&g, &xi)) in got.iter().zip(x).enumerate() {
        let w = want(xi as f64);
        assert!((g as f64 - w).abs() <= 4.0 * f32::EPSILON as f64 * (1.0 + w.abs()), "{what}[{i}] = {g}, want {w}");
    }
}

#[test]
fn an_edit_runs_at_the_next_call() {
    let copy = Copy::new("edit");
    let Some(gpu) = copy.gpu() else { return };
    let mut rng = rng("an_edit_runs_at_the_next_call");
    let xs = uniform(&mut rng, N, -4.0, 4.0);
    let x = gpu.upload(&xs).unwrap();
    let a = 1.5f32;
    let a64 = a as f64;
    check("affine as compiled", &run_affine(&gpu, &x, a), |v| v * a64 + 1.0, &xs);
    // Two pipelines of one kernel (one per override value): both are rebuilt.
    check("gain 2 as compiled", &run_gain(&gpu, &x, 2.0), |v| v * 2.0, &xs);
    check("gain 3 as compiled", &run_gain(&gpu, &x, 3.0), |v| v * 3.0, &xs);

    // The kernel file's section.
    let before = gpu.reload_generation();
    copy.edit("01_hot.wgsl", "y[i] = bias(x[i] * p.a);", "y[i] = bias(x[i] * p.a) - x[i];");
    let r = report_on(&gpu, before, "hot::affine");
    assert!(r.is_ok() && r.swapped == ["hot::affine"], "{r}");
    check("affine after the edit", &run_affine(&gpu, &x, a), |v| v * a64 + 1.0 - v, &xs);

    // A file the shared preamble includes: every kernel that calls it.
    let before = gpu.reload_generation();
    copy.edit("lib/bias.wgsl", "return v + 1.0;", "return v + 0.25;");
    let r = report_on(&gpu, before, "hot::affine");
    assert!(r.is_ok() && r.swapped == ["hot::affine"], "only affine calls bias: {r}");
    check("affine after the include's edit", &run_affine(&gpu, &x, a), |v| v * a64 + 0.25 - v, &xs);

    // An overridden kernel: each cached pipeline, and one built after the swap.
    let before = gpu.reload_generation();
    copy.edit("01_hot.wgsl", "y[i] = x[i] * GAIN;", "y[i] = x[i] * GAIN + 0.5;");
    let r = report_on(&gpu, before, "hot::gain");
    assert!(r.is_ok() && r.swapped == ["hot::gain"], "{r}");
    for g in [2.0f32, 3.0, 5.0] {
        check(&format!("gain {g} after the edit"), &run_gain(&gpu, &x, g), |v| v * g as f64 + 0.5, &xs);
    }
    // A touch without a change compiles nothing new.
    let before = gpu.reload_generation();
    let text = copy.read("01_hot.wgsl");
    std::fs::write(copy.path("01_hot.wgsl"), &text).unwrap();
    if let Some(r) = gpu.wait_for_reload(before, Duration::from_secs(2)) {
        assert!(r.swapped.is_empty() && r.is_ok(), "{r}");
    }
}

#[test]
fn an_edit_may_add_or_remove_unchecked() {
    let copy = Copy::new("unchecked");
    let Some(gpu) = copy.gpu() else { return };
    let mut rng = rng("an_edit_may_add_or_remove_unchecked");
    let xs = uniform(&mut rng, N, -4.0, 4.0);
    let x = gpu.upload(&xs).unwrap();
    let a = 0.5f32;
    let a64 = a as f64;
    assert!(!hot::affine::KERNEL.unchecked);
    check("affine as compiled", &run_affine(&gpu, &x, a), |v| v * a64 + 1.0, &xs);
    assert!(gpu.runtime_checks_for(&hot::affine::KERNEL));

    // Added: the new source runs without the checks (its annotation is the source's own).
    let before = gpu.reload_generation();
    copy.edit("01_hot.wgsl", "// @requires len(y) >= p.n\n", "// @requires len(y) >= p.n\n// @unchecked\n");
    let r = report_on(&gpu, before, "hot::affine");
    assert!(r.is_ok() && r.swapped == ["hot::affine"], "{r}");
    assert!(!gpu.runtime_checks_for(&hot::affine::KERNEL));
    check("affine unchecked", &run_affine(&gpu, &x, a), |v| v * a64 + 1.0, &xs);

    // Removed, the rest of the WGSL as compiled: the kernel runs with the checks.
    let before = gpu.reload_generation();
    copy.edit("01_hot.wgsl", "// @unchecked\n", "");
    let r = report_on(&gpu, before, "hot::affine");
    assert!(r.is_ok() && r.swapped == ["hot::affine"], "{r}");
    assert!(gpu.runtime_checks_for(&hot::affine::KERNEL));
    check("affine checked again", &run_affine(&gpu, &x, a), |v| v * a64 + 1.0, &xs);
}

#[test]
fn a_broken_edit_is_reported_and_the_old_pipeline_kept() {
    let copy = Copy::new("broken");
    let Some(gpu) = copy.gpu() else { return };
    let mut rng = rng("a_broken_edit_is_reported_and_the_old_pipeline_kept");
    let xs = uniform(&mut rng, N, -4.0, 4.0);
    let x = gpu.upload(&xs).unwrap();
    let a = -0.75f32;
    let a64 = a as f64;
    let compiled = |v: f64| v * a64 + 1.0;
    check("affine as compiled", &run_affine(&gpu, &x, a), compiled, &xs);

    // WGSL that does not validate: the error is the compile error, at the file and line.
    let before = gpu.reload_generation();
    copy.edit("01_hot.wgsl", "y[i] = bias(x[i] * p.a);", "y[i] = bias(x[i] * p.a) + offset;");
    let line = copy.line_of("01_hot.wgsl", "+ offset;");
    let r = report_on(&gpu, before, "hot::affine");
    assert!(!r.is_ok() && r.kept.contains(&"hot::affine".to_string()) && r.swapped.is_empty(), "{r}");
    let text = r.errors.join("\n");
    assert!(text.contains(&format!("┌─ tests/shaders/hot/01_hot.wgsl:{line}:")), "{text}");
    assert!(text.contains("y[i] = bias(x[i] * p.a) + offset;") && text.contains("offset"), "{text}");
    check("affine after a broken edit", &run_affine(&gpu, &x, a), compiled, &xs);

    // WGSL that compiles but no longer fits the Rust function: a binding's element type.
    let before = gpu.reload_generation();
    copy.edits(
        "01_hot.wgsl",
        &[
            ("y[i] = bias(x[i] * p.a) + offset;", "y[i] = bias(x[i].x * p.a);"),
            (
                "x: array<f32>;\n@group(0) @binding(1) var<storage, read_write> y: array<f32>;\n@group(0) @binding(2) var<uniform> p",
                "x: array<vec2<f32>>;\n@group(0) @binding(1) var<storage, read_write> y: array<f32>;\n@group(0) @binding(2) var<uniform> p",
            ),
        ],
    );
    let line = copy.line_of("01_hot.wgsl", "x: array<vec2<f32>>");
    let r = report_on(&gpu, before, "hot::affine");
    let text = r.errors.join("\n");
    assert!(r.kept.contains(&"hot::affine".to_string()), "{r}");
    assert!(text.contains("kernel `affine`: its interface changed"), "{text}");
    assert!(text.contains(&format!("┌─ tests/shaders/hot/01_hot.wgsl:{line}:")), "at the binding: {text}");
    assert!(text.contains("binding x: compiled as") && text.contains("[f32; 2]"), "{text}");
    check("affine after an interface change", &run_affine(&gpu, &x, a), compiled, &xs);

    // A uniform's layout (a field added) is the same kind of change.
    let before = gpu.reload_generation();
    copy.edits(
        "01_hot.wgsl",
        &[
            ("x: array<vec2<f32>>", "x: array<f32>"),
            ("bias(x[i].x * p.a)", "bias(x[i] * p.a)"),
            ("    a: f32,\n}", "    a: f32,\n    b: f32,\n}"),
        ],
    );
    let r = report_on(&gpu, before, "hot::affine");
    let text = r.errors.join("\n");
    assert!(text.contains("struct Params: compiled as") && r.kept.contains(&"hot::affine".to_string()), "{text}");
    check("affine after a layout change", &run_affine(&gpu, &x, a), compiled, &xs);

    // Fixed: the next report swaps it in.
    let before = gpu.reload_generation();
    copy.edits(
        "01_hot.wgsl",
        &[
            ("    a: f32,\n    b: f32,\n}", "    a: f32,\n}"),
            ("y[i] = bias(x[i] * p.a);", "y[i] = 2.0 * bias(x[i] * p.a);"),
        ],
    );
    let r = report_on(&gpu, before, "hot::affine");
    assert!(r.is_ok() && r.swapped == ["hot::affine"], "{r}");
    check("affine after the fix", &run_affine(&gpu, &x, a), |v| 2.0 * (v * a64 + 1.0), &xs);
}

#[test]
fn a_constant_the_host_reads_is_part_of_the_interface() {
    let copy = Copy::new("constant");
    let Some(gpu) = copy.gpu() else { return };
    let xs = vec![1.0f32; N];
    let x = gpu.upload(&xs).unwrap();
    check("gain as compiled", &run_gain(&gpu, &x, 2.0), |v| v * 2.0, &xs);
    assert_eq!(hot::WG, 64);
    // `hot::WG` is compiled into the host code: a new value cannot reach it.
    let before = gpu.reload_generation();
    copy.edit("00_shared.wgsl", "const WG: u32 = 64u;", "const WG: u32 = 128u;");
    let line = copy.line_of("00_shared.wgsl", "const WG");
    let r = report_on(&gpu, before, "hot::gain");
    let text = r.errors.join("\n");
    assert!(r.swapped.is_empty() && r.kept.contains(&"hot::gain".to_string()), "{r}");
    assert!(text.contains("a constant of `tests/shaders/hot/01_hot.wgsl` that the program reads changed"), "{text}");
    assert!(text.contains(&format!("┌─ tests/shaders/hot/00_shared.wgsl:{line}:")), "{text}");
    check("gain after the refused edit", &run_gain(&gpu, &x, 2.0), |v| v * 2.0, &xs);
}

#[test]
fn hot_reload_is_off_unless_asked_for() {
    let Some(gpu) = gpu_with(GpuOptions::default()) else { return };
    assert!(!gpu.hot_reload());
    assert!(gpu.wait_for_reload(0, Duration::from_millis(10)).is_none());
    let options = GpuOptions::default();
    assert!(!options.hot_reload, "the default is off");
}
