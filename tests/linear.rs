//! The matrix products of `shaders/03_linear.wgsl` against float64 CPU references, on fresh
//! random inputs: every kernel at shapes that are and are not multiples of the 128×64×16 tiles
//! (1×1×1 included), outputs poisoned with NaN (accumulating outputs filled with random values),
//! bit-for-bit determinism and agreement between the forms, finite differences for the forms
//! used as backward passes, more than 65535 rows, and `Err` for short or aliased buffers.

mod common;
#[path = "reference/linear.rs"]
mod reference;

use common::{TAIL, assert_close, gpu, has_f16, rng, uniform};
use kernels::linear::{
    self, matmul, matmul_at, matmul_at_acc, matmul_residual, matmul_residual_w16, matmul_t, matmul_t_acc, matmul_t_w16,
    matmul_w16,
};
use kernels::{Arg, Buffer, Call, Error, Gpu, Grid, Record, f16};
use rand::Rng;
use rand::rngs::StdRng;

type Params = linear::matmul::Params;

/// (m, n, k): one element; every dimension off the tiles; N and K past a few tiles; a long K
/// with a narrow N; a larger product.
const SHAPES: [(usize, usize, usize); 5] = [(1, 1, 1), (65, 70, 33), (130, 257, 64), (37, 5, 300), (256, 384, 200)];

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Matmul,
    Residual,
    T,
    TAcc,
    At,
    AtAcc,
    W16,
    ResidualW16,
    TW16,
}

const ALL: [Kind; 9] = [
    Kind::Matmul,
    Kind::Residual,
    Kind::T,
    Kind::TAcc,
    Kind::At,
    Kind::AtAcc,
    Kind::W16,
    Kind::ResidualW16,
    Kind::TW16,
];

impl Kind {
    fn f16(self) -> bool {
        matches!(self, Kind::W16 | Kind::ResidualW16 | Kind::TW16)
    }
    fn residual(self) -> bool {
        matches!(self, Kind::Residual | Kind::ResidualW16)
    }
    fn accumulates(self) -> bool {
        matches!(self, Kind::TAcc | Kind::AtAcc)
    }
    fn at(self) -> bool {
        matches!(self, Kind::At | Kind::AtAcc)
    }
    /// Length of the output Y: `[m, n]`, or `[k, n]` for Xᵀ·B.
    fn out_len(self, (m, n, k): (usize, usize, usize)) -> usize {
        if self.at() { k * n } else { m * n }
    }
    /// Length of the second operand: W `[k, n]` / `[n, k]`, or B `[m, n]` for Xᵀ·B.
    fn second_len(self, (m, n, k): (usize, usize, usize)) -> usize {
        if self.at() { m * n } else { k * n }
    }
}

/// The inputs of one call. `w` is the second operand as drawn (W or B); the f16 kinds upload
/// `w` rounded to f16, and `w_seen` is what the GPU then multiplies by (widened back to f32).
struct Inputs {
    shape: (usize, usize, usize),
    x: Vec<f32>,
    w: Vec<f32>,
    w_seen: Vec<f32>,
    r: Vec<f32>,
    y0: Vec<f32>,
}

fn inputs(rng: &mut StdRng, kind: Kind, shape: (usize, usize, usize)) -> Inputs {
    let (m, _, k) = shape;
    let x = uniform(rng, m * k, -1.0, 1.0);
    let w = uniform(rng, kind.second_len(shape), -1.0, 1.0);
    let w_seen = if kind.f16() { w.iter().map(|&v| f16::from_f32(v).to_f32()).collect() } else { w.clone() };
    let out = kind.out_len(shape);
    let r = if kind.residual() { uniform(rng, out, -1.0, 1.0) } else { Vec::new() };
    let y0 = if kind.accumulates() { uniform(rng, out, -1.0, 1.0) } else { vec![f32::NAN; out] };
    Inputs { shape, x, w, w_seen, r, y0 }
}

fn params((m, n, k): (usize, usize, usize)) -> Params {
    Params::new(m as u32, n as u32, k as u32)
}

/// Device buffers for one call; `w16` and `r` hold one dummy element where the kind does not
/// use them.
struct Bufs {
    x: Buffer<f32>,
    w: Buffer<f32>,
    w16: Buffer<f16>,
    r: Buffer<f32>,
    y: Buffer<f32>,
}

fn upload(gpu: &Gpu, kind: Kind, inp: &Inputs) -> Bufs {
    let or_dummy = |v: &[f32]| if v.is_empty() { vec![0.0] } else { v.to_vec() };
    let mut y0 = inp.y0.clone();
    y0.extend([f32::NAN; TAIL]);
    let w16: Vec<f16> = if kind.f16() { inp.w.iter().map(|&v| f16::from_f32(v)).collect() } else { vec![f16::ZERO] };
    Bufs {
        x: gpu.upload(&or_dummy(&inp.x)).unwrap(),
        w: gpu.upload(&or_dummy(&inp.w)).unwrap(),
        w16: gpu.upload(&w16).unwrap(),
        r: gpu.upload(&or_dummy(&inp.r)).unwrap(),
        y: gpu.upload(&y0).unwrap(),
    }
}

/// Calls the kernel of `kind` on `b`.
fn call(rec: impl Record, kind: Kind, b: &mut Bufs, p: Params) -> Result<(), Error> {
    match kind {
        Kind::Matmul => matmul(rec, &b.x, &b.w, &mut b.y, p),
        Kind::Residual => matmul_residual(rec, &b.x, &b.w, &b.r, &mut b.y, p),
        Kind::T => matmul_t(rec, &b.x, &b.w, &mut b.y, p),
        Kind::TAcc => matmul_t_acc(rec, &b.x, &b.w, &mut b.y, p),
        Kind::At => matmul_at(rec, &b.x, &b.w, &mut b.y, p),
        Kind::AtAcc => matmul_at_acc(rec, &b.x, &b.w, &mut b.y, p),
        Kind::W16 => matmul_w16(rec, &b.x, &b.w16, &mut b.y, p),
        Kind::ResidualW16 => matmul_residual_w16(rec, &b.x, &b.w16, &b.r, &mut b.y, p),
        Kind::TW16 => matmul_t_w16(rec, &b.x, &b.w16, &mut b.y, p),
    }
}

/// Runs `kind` on `inp` and returns Y, checking that nothing past it was written.
fn run(gpu: &Gpu, kind: Kind, inp: &Inputs) -> Vec<f32> {
    let mut b = upload(gpu, kind, inp);
    call(gpu, kind, &mut b, params(inp.shape)).unwrap();
    let mut y = b.y.read(gpu).unwrap();
    let out = kind.out_len(inp.shape);
    assert!(y[out..].iter().all(|v| v.is_nan()), "{kind:?} {:?}: wrote past the output", inp.shape);
    y.truncate(out);
    y
}

/// The float64 reference of `kind` on `inp`, with the second operand `w`.
fn reference(kind: Kind, inp: &Inputs, w: &[f32]) -> Vec<f64> {
    let (m, n, k) = inp.shape;
    let x = &inp.x;
    match kind {
        Kind::Matmul | Kind::W16 => reference::matmul(x, w, m, n, k),
        Kind::Residual | Kind::ResidualW16 => reference::matmul_residual(x, w, &inp.r, m, n, k),
        Kind::T | Kind::TW16 => reference::matmul_t(x, w, m, n, k),
        Kind::TAcc => reference::matmul_t_acc(&inp.y0, x, w, m, n, k),
        Kind::At => reference::matmul_at(x, w, m, n, k),
        Kind::AtAcc => reference::matmul_at_acc(&inp.y0, x, w, m, n, k),
    }
}

/// `inp` with every value replaced by its magnitude and `w` as the weights, for bounds: the
/// reference on it is Σ|x|·|w| per output, plus |r| and |y0| where `added` (else those are 0).
fn magnitudes(inp: &Inputs, w: &[f32], added: bool) -> Inputs {
    let abs = |v: &[f32]| v.iter().map(|x| x.abs()).collect::<Vec<f32>>();
    let added_term = |v: &[f32]| if added { abs(v) } else { vec![0.0f32; v.len()] };
    Inputs {
        shape: inp.shape,
        x: abs(&inp.x),
        w: abs(w),
        w_seen: abs(w),
        r: added_term(&inp.r),
        y0: added_term(&inp.y0),
    }
}

/// The f16 kinds against the unrounded f32 weights: rounding moves each weight by at most 2⁻¹¹
/// of itself, so each output moves by at most 2⁻¹¹·Σ|x|·|w| (a bound per element: a relative
/// error in norm fails when a residual or accumulated value cancels the product).
fn within_f16_rounding(what: &str, kind: Kind, inp: &Inputs, got: &[f32]) {
    let want = reference(kind, inp, &inp.w);
    let magnitude = magnitudes(inp, &inp.w, false);
    let bound = reference(kind, &magnitude, &magnitude.w);
    let terms = if kind.at() { inp.shape.0 } else { inp.shape.2 } as f64;
    for (i, ((g, w), b)) in got.iter().zip(&want).zip(&bound).enumerate() {
        // Plus f16's subnormal spacing 2⁻²⁴ per term (|x| ≤ 1) and the f32 accumulation.
        let allowed = 2f64.powi(-11) * b * 1.01 + 2f64.powi(-24) * terms + 1e-5 * (w.abs() + b);
        let e = (*g as f64 - w).abs();
        assert!(e <= allowed, "{what} vs f32 weights: element {i}: {g} vs {w} (error {e:e} > {allowed:e})");
    }
}

/// The forms that add a residual or an accumulated Y to the product, per element: within 1e-5 of
/// Σ|x|·|w| + |r| + |y0| (the reference on the inputs' magnitudes). A relative error in norm
/// fails these at small shapes whenever the added term cancels the product, whatever the
/// rounding; a wrong or missing term is far beyond this bound.
fn within_f32_rounding(what: &str, kind: Kind, inp: &Inputs, got: &[f32], want: &[f64]) {
    let magnitude = magnitudes(inp, &inp.w_seen, true);
    let bound = reference(kind, &magnitude, &magnitude.w);
    for (i, ((g, w), b)) in got.iter().zip(want).zip(&bound).enumerate() {
        let e = (*g as f64 - w).abs();
        assert!(e <= 1e-5 * b, "{what}: element {i}: {g} vs {w} (error {e:e} > 1e-5 · {b:e})");
    }
}

/// `kind` at every shape against float64: < 1e-5 relative for the f32 path (per element of the
/// magnitudes for the forms that add to the product, [`within_f32_rounding`]). The f16 kinds are
/// held to 1e-5 against the reference on the rounded weights they actually use (which checks
/// the f32 accumulation), and against the unrounded f32 weights to what f16 rounding allows
/// ([`within_f16_rounding`]). One shape is run twice and must repeat bit for bit.
fn check_kind(kind: Kind) {
    let Some(gpu) = gpu() else { return };
    if kind.f16() && !has_f16(&gpu, "the f16-weight kernels") {
        return;
    }
    let mut rng = rng(&format!("{kind:?}"));
    for shape in SHAPES {
        let inp = inputs(&mut rng, kind, shape);
        let got = run(&gpu, kind, &inp);
        let what = format!("{kind:?} (m, n, k) = {shape:?}");
        let want = reference(kind, &inp, &inp.w_seen);
        if kind.residual() || kind.accumulates() {
            within_f32_rounding(&what, kind, &inp, &got, &want);
        } else {
            assert_close(&what, &got, &want, 1e-5);
        }
        if kind.f16() {
            within_f16_rounding(&what, kind, &inp, &got);
        }
        if shape == (130, 257, 64) {
            let again = run(&gpu, kind, &inp);
            let same = got.iter().zip(&again).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{what}: two runs differ");
        }
    }
}

#[test]
fn matmul_vs_reference() {
    check_kind(Kind::Matmul);
}

#[test]
fn matmul_residual_vs_reference() {
    check_kind(Kind::Residual);
}

#[test]
fn matmul_t_vs_reference() {
    check_kind(Kind::T);
}

#[test]
fn matmul_t_acc_vs_reference() {
    check_kind(Kind::TAcc);
}

#[test]
fn matmul_at_vs_reference() {
    check_kind(Kind::At);
}

#[test]
fn matmul_at_acc_vs_reference() {
    check_kind(Kind::AtAcc);
}

#[test]
fn matmul_w16_vs_reference() {
    check_kind(Kind::W16);
}

#[test]
fn matmul_residual_w16_vs_reference() {
    check_kind(Kind::ResidualW16);
}

#[test]
fn matmul_t_w16_vs_reference() {
    check_kind(Kind::TW16);
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Inputs from explicit values (the second operand used as is).
fn given(shape: (usize, usize, usize), x: Vec<f32>, w: Vec<f32>, r: Vec<f32>, y0: Vec<f32>) -> Inputs {
    Inputs { shape, x, w_seen: w.clone(), w, r, y0 }
}

/// `a + b` in f32, as the accumulating and residual forms add.
fn add32(a: &[f32], b: &[f32]) -> Vec<f32> {
    a.iter().zip(b).map(|(a, b)| a + b).collect()
}

/// Every output is one FMA chain over k in order, whatever the layout of the operands, so the
/// forms agree bit for bit: X·Wᵀ with X·(Wᵀ stored explicitly), Xᵀ·B with (Xᵀ stored)·B, the
/// accumulating forms with Y0 + (the overwriting form), the residual form with X·W + R, and the
/// f16-weight forms with the f32 forms on the same (rounded) weights.
#[test]
fn forms_agree_with_each_other() {
    let Some(gpu) = gpu() else { return };
    let f16_ok = has_f16(&gpu, "the f16-weight kernels");
    let mut rng = rng("forms");
    for (m, n, k) in [(65, 70, 33), (37, 5, 300), (1, 1, 1)] {
        let shape = (m, n, k);
        let nan = |len: usize| vec![f32::NAN; len];

        // X·Wᵀ (W [n, k]) against X·W' with W' = Wᵀ [k, n] stored.
        let t = inputs(&mut rng, Kind::T, shape);
        let yt = run(&gpu, Kind::T, &t);
        let explicit = given(shape, t.x.clone(), reference::transpose(&t.w, n, k), Vec::new(), nan(m * n));
        assert_eq!(bits(&yt), bits(&run(&gpu, Kind::Matmul, &explicit)), "matmul_t vs matmul(Wᵀ) {shape:?}");

        // Y0 + X·Wᵀ.
        let y0 = uniform(&mut rng, m * n, -1.0, 1.0);
        let acc = given(shape, t.x.clone(), t.w.clone(), Vec::new(), y0.clone());
        assert_eq!(bits(&run(&gpu, Kind::TAcc, &acc)), bits(&add32(&y0, &yt)), "matmul_t_acc vs Y0 + X·Wᵀ {shape:?}");

        // Xᵀ·B (X [m, k], B [m, n]) against X'·B with X' = Xᵀ [k, m] stored: (m, n, k) → (k, n, m).
        let at = inputs(&mut rng, Kind::At, shape);
        let yat = run(&gpu, Kind::At, &at);
        let explicit = given((k, n, m), reference::transpose(&at.x, m, k), at.w.clone(), Vec::new(), nan(k * n));
        assert_eq!(bits(&yat), bits(&run(&gpu, Kind::Matmul, &explicit)), "matmul_at vs matmul(Xᵀ) {shape:?}");

        // Y0 + Xᵀ·B.
        let y0 = uniform(&mut rng, k * n, -1.0, 1.0);
        let acc = given(shape, at.x.clone(), at.w.clone(), Vec::new(), y0.clone());
        assert_eq!(
            bits(&run(&gpu, Kind::AtAcc, &acc)),
            bits(&add32(&y0, &yat)),
            "matmul_at_acc vs Y0 + Xᵀ·B {shape:?}"
        );

        // X·W + R.
        let res = inputs(&mut rng, Kind::Residual, shape);
        let plain = given(shape, res.x.clone(), res.w.clone(), Vec::new(), nan(m * n));
        let want = add32(&run(&gpu, Kind::Matmul, &plain), &res.r);
        assert_eq!(bits(&run(&gpu, Kind::Residual, &res)), bits(&want), "matmul_residual vs X·W + R {shape:?}");

        // f16 weights against f32 weights holding the same rounded values.
        if f16_ok {
            for (h, f) in [(Kind::W16, Kind::Matmul), (Kind::ResidualW16, Kind::Residual), (Kind::TW16, Kind::T)] {
                let inp = inputs(&mut rng, h, shape);
                let rounded = given(shape, inp.x.clone(), inp.w_seen.clone(), inp.r.clone(), inp.y0.clone());
                assert_eq!(bits(&run(&gpu, h, &inp)), bits(&run(&gpu, f, &rounded)), "{h:?} vs {f:?} {shape:?}");
            }
        }
    }
}

/// L(X, W) = Σ G ⊙ (X·W) in float64, from the GPU's forward `matmul`.
fn loss(gpu: &Gpu, g: &[f32], x: &[f32], w: &[f32], shape: (usize, usize, usize)) -> f64 {
    let (m, n, _) = shape;
    let y = run(gpu, Kind::Matmul, &given(shape, x.to_vec(), w.to_vec(), Vec::new(), vec![f32::NAN; m * n]));
    y.iter().zip(g).map(|(&y, &g)| y as f64 * g as f64).sum()
}

/// The products used as backward passes of Y = X·W, against central differences of the GPU
/// forward: dW = Xᵀ·G (`matmul_at`) and dX = G·Wᵀ (`matmul_t` with W [k, n] read as [N', K']).
///
/// L is linear in every coordinate, so the difference quotient has no truncation error; h = 1e-2
/// (inputs are O(1)) only bounds the rounding error: L changes only through the outputs the
/// coordinate touches (the others repeat bit for bit), each rounded to ~6e-8 relative, so the
/// quotient is off by ≲ 1e-5 absolute on derivatives of size ~1. Tolerance: 1e-2 relative (to
/// max(|dL|, 0.1)), far above that and far below any indexing mistake.
#[test]
fn backward_forms_match_finite_differences() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("finite differences");
    let (m, n, k) = (9, 11, 7);
    let shape = (m, n, k);
    let x = uniform(&mut rng, m * k, -1.0, 1.0);
    let w = uniform(&mut rng, k * n, -1.0, 1.0);
    let g = uniform(&mut rng, m * n, -1.0, 1.0);
    let dw = run(&gpu, Kind::At, &given(shape, x.clone(), g.clone(), Vec::new(), vec![f32::NAN; k * n]));
    let dx = run(&gpu, Kind::T, &given((m, k, n), g.clone(), w.clone(), Vec::new(), vec![f32::NAN; m * k]));
    let h = 1e-2f32;
    let check = |what: &str, i: usize, analytic: f32, plus: f64, minus: f64, hh: f32| {
        let fd = (plus - minus) / (2.0 * hh as f64);
        let err = (fd - analytic as f64).abs();
        assert!(err <= 1e-2 * (analytic.abs() as f64).max(0.1), "{what}[{i}]: finite difference {fd} vs {analytic}");
    };
    for _ in 0..12 {
        let i = rng.random_range(0..k * n);
        let (mut wp, mut wm) = (w.clone(), w.clone());
        wp[i] += h;
        wm[i] -= h;
        // The step actually taken in f32.
        let hh = (wp[i] - wm[i]) / 2.0;
        check("dW", i, dw[i], loss(&gpu, &g, &x, &wp, shape), loss(&gpu, &g, &x, &wm, shape), hh);

        let i = rng.random_range(0..m * k);
        let (mut xp, mut xm) = (x.clone(), x.clone());
        xp[i] += h;
        xm[i] -= h;
        let hh = (xp[i] - xm[i]) / 2.0;
        check("dX", i, dx[i], loss(&gpu, &g, &xp, &w, shape), loss(&gpu, &g, &xm, &w, shape), hh);
    }
}

/// Output rows past 65535 (the row tiles stay under the grid limit: up to 65535·64 rows), and a
/// contraction over more than 65535 rows for Xᵀ·B.
#[test]
fn more_than_65535_rows() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("many rows");
    let rows = 70_001;
    for (kind, shape) in [(Kind::Matmul, (rows, 3, 5)), (Kind::T, (rows, 3, 5)), (Kind::At, (3, 5, rows))] {
        let inp = inputs(&mut rng, kind, shape);
        let got = run(&gpu, kind, &inp);
        assert_close(&format!("{kind:?} {shape:?}"), &got, &reference(kind, &inp, &inp.w), 1e-5);
    }
    // Xᵀ·B summed over 70,001 rows: 4,376 contraction steps, past the ~3,640 at which lavapipe's
    // loop limiter (65535 loop iterations per invocation in total) cut off a version with an
    // inner loop over the 16 staged k. Each output is one sequential f32 sum, whose rounding
    // error grows like √M (observed ≈ 5e-6 relative here); 1e-4 leaves room for unlucky draws.
    let inp = inputs(&mut rng, Kind::AtAcc, (rows, 5, 3));
    let got = run(&gpu, Kind::AtAcc, &inp);
    let want = reference(Kind::AtAcc, &inp, &inp.w);
    eprintln!("AtAcc (70001, 5, 3): relative error {:e}", common::rel_err(&got, &want));
    assert_close("AtAcc (70001, 5, 3)", &got, &want, 1e-4);
}

/// Every buffer of every kernel, one element short, is an `Err` naming its requirement, before
/// anything runs; with the exact lengths the call succeeds.
#[test]
fn a_short_buffer_is_an_error() {
    let Some(gpu) = gpu() else { return };
    let f16_ok = has_f16(&gpu, "the f16-weight kernels");
    let shape @ (m, _, k) = (5, 6, 7);
    for kind in ALL {
        let out = kind.out_len(shape);
        let second = kind.second_len(shape);
        let full = |gpu: &Gpu, short: &str| Bufs {
            x: gpu.zeros(m * k - usize::from(short == "x")).unwrap(),
            w: gpu.zeros(if kind.f16() { 1 } else { second - usize::from(short == "w") }).unwrap(),
            w16: gpu.zeros(if kind.f16() { second - usize::from(short == "w") } else { 1 }).unwrap(),
            r: gpu.zeros(if kind.residual() { out - usize::from(short == "r") } else { 1 }).unwrap(),
            y: gpu.filled(out - usize::from(short == "y"), 1.0).unwrap(),
        };
        let mut names = vec!["x", "w", "y"];
        if kind.residual() {
            names.push("r");
        }
        for name in names {
            let mut b = full(&gpu, name);
            let e = call(&gpu, kind, &mut b, params(shape)).unwrap_err();
            assert!(matches!(e, Error::Shape { .. }), "{kind:?} short {name}: {e:?}");
            let name = if kind.at() && name == "w" { "b" } else { name };
            assert!(e.to_string().contains(&format!("len({name}) >=")), "{kind:?}: {e}");
            assert!(b.y.read(&gpu).unwrap().iter().all(|&v| v == 1.0), "{kind:?}: ran despite the error");
        }
        if !kind.f16() || f16_ok {
            let mut b = full(&gpu, "");
            call(&gpu, kind, &mut b, params(shape)).unwrap();
        }
    }
}

/// The residual forms read R and never write it; binding R and Y to one buffer (only possible
/// through the untyped API) is an `Err`.
#[test]
fn residual_is_read_only_and_distinct() {
    let Some(gpu) = gpu() else { return };
    let f16_ok = has_f16(&gpu, "the f16-weight kernels");
    let mut rng = rng("residual");
    let shape = (65, 70, 33);
    for kind in [Kind::Residual, Kind::ResidualW16] {
        if kind.f16() && !f16_ok {
            continue;
        }
        let inp = inputs(&mut rng, kind, shape);
        let mut b = upload(&gpu, kind, &inp);
        call(&gpu, kind, &mut b, params(shape)).unwrap();
        assert_eq!(bits(&b.r.read(&gpu).unwrap()), bits(&inp.r), "{kind:?} wrote R");

        let p = params(shape);
        let bytes = kernels::__private::bytemuck::bytes_of(&p);
        let (def, w) = match kind {
            Kind::Residual => (&matmul_residual::KERNEL, Arg::storage(&b.w, false)),
            _ => (&matmul_residual_w16::KERNEL, Arg::storage(&b.w16, false)),
        };
        let args =
            [Arg::storage(&b.x, false), w, Arg::storage(&b.r, false), Arg::storage(&b.r, true), Arg::uniform(bytes)];
        let e = (&gpu)
            .record(Call { kernel: def, grid: Grid::Explicit([2, 2, 1]), args: &args, overrides: &[] })
            .unwrap_err();
        assert!(matches!(e, Error::Aliased { .. }), "{kind:?}: {e:?}");
        assert_eq!(bits(&b.r.read(&gpu).unwrap()), bits(&inp.r), "{kind:?}: ran despite the error");
    }
}

/// The SIMT weight gradient through `kernels::gemm` (`linear::matmul_at_split`, then
/// `matmul_parts_add`): parts of the contraction, then a fixed-order sum added to Y. Against
/// float64, against itself (bits), and its part count for the trainer's shapes.
#[test]
fn split_weight_gradient() {
    use kernels::gemm::{self, Epilogue, Gemm, GemmWorkspace, Mat, Precision};
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("split weight gradient");
    // Y [k, n] += Xᵀ·B over m rows: C [k, n] with A = X [m, k] transposed.
    let wgrad = |m: usize, n: usize, k: usize| {
        Gemm::new(k, n, m).a_t(true).epilogue(Epilogue::Accumulate).precision(Precision::F32Simt).plan(&gpu).unwrap()
    };
    assert_eq!(wgrad(8192, 768, 768).parts(), 11);
    assert_eq!(wgrad(8192, 2048, 768).parts(), 4);
    assert_eq!(wgrad(8192, 256, 768).parts(), 16);
    assert_eq!(wgrad(4096, 4096, 4096).parts(), 1, "enough tiles");
    assert_eq!(wgrad(100, 5, 5).parts(), 1, "too few rows to split");
    for (m, n, k) in [(3000usize, 70usize, 33usize), (2049, 64, 64), (1537, 5, 130)] {
        let plan = wgrad(m, n, k);
        let parts = plan.parts();
        assert!(parts > 1, "{m}×{n}×{k} should split");
        let x = uniform(&mut rng, m * k, -1.0, 1.0);
        let b = uniform(&mut rng, m * n, -1.0, 1.0);
        let y0 = uniform(&mut rng, k * n, -1.0, 1.0);
        let (xb, bb) = (gpu.upload(&x).unwrap(), gpu.upload(&b).unwrap());
        let mut ws = GemmWorkspace::new(&gpu, &[&plan]).unwrap();
        let mut run = || {
            let mut y = gpu.upload(&y0).unwrap();
            gemm::gemm(&gpu, &plan, Mat::f32(&xb, m, k).t(), Mat::f32(&bb, m, n), None, &mut y, &mut ws).unwrap();
            y.read(&gpu).unwrap()
        };
        let got = run();
        let mut want = vec![0f64; k * n];
        for r in 0..m {
            for i in 0..k {
                for j in 0..n {
                    want[i * n + j] += x[r * k + i] as f64 * b[r * n + j] as f64;
                }
            }
        }
        for (w, y) in want.iter_mut().zip(&y0) {
            *w += *y as f64;
        }
        assert_close(&format!("split {m}×{n}×{k} in {parts} parts"), &got, &want, 1e-5);
        assert_eq!(bits(&got), bits(&run()), "not deterministic");
    }
}
