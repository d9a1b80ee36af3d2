//! The linear layers' products at the step's precision, and the mixed-precision state (f16
//! weight copies, the kept f16 activations, the loss scaler's buffers).
//!
//! Every product is a `kernels::gemm` plan, made once per shape ([`Plans`]) and recorded with
//! one workspace for the whole step. Which core a plan takes follows from the step's
//! [`Products`]: the f32 SIMT product (`f32` without tensor cores: the trainer's original
//! kernels, bit for bit), the f32-accurate scaled split on tensor cores (`f32` where the adapter
//! has them), or f16 operands with f32 sums (mixed precision, where every linear layer's input is
//! kept only as its f16 copy, [`Kept::F16`]).
//!
//! The scaled split multiplies each operand by a power of two before splitting it into hi + lo
//! f16 halves, so it is f32-accurate over the whole f32 range — a mean loss's gradients (~1e-10)
//! included (tests/precise.rs); a split without the scale is accurate only in f16's normal range
//! and trains visibly worse (BENCHMARKS.md).

use super::B;
use crate::Error;
use crate::params::Param;
use crate::params::fused::Fused;
use kernels::gemm::{self, Elem, Epilogue, Gemm, GemmPlan, GemmWorkspace, Halves, Mat, Precision, RopeQkv};
use kernels::ops::{F16x4, Transpose, Transposes, f16x4_len};
use kernels::{Batch, Buffer, Gpu, Record};
use std::cell::RefCell;
use std::collections::HashMap;

/// How the linear layers' products run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Products {
    /// f32 SGEMM (`kernels::linear`).
    Sgemm,
    /// f16 operands, f32 sums (`ops::*_f16`).
    Half,
    /// f32-accurate products on tensor cores (`ops::*_split`: operands scaled by a power of two
    /// and split into hi + lo f16 halves, three products): `--precision f32` where the adapter
    /// has tensor cores.
    Split,
}

/// The step's product plans, made on first use per shape, and the workspace they share (grown
/// when a plan needs more, e.g. generation's shorter rows never do).
pub(super) struct Plans {
    mode: Products,
    plans: RefCell<HashMap<Gemm, GemmPlan>>,
    ws: RefCell<GemmWorkspace>,
    /// The split mode's output gradient, split once for both products of a layer's backward
    /// ([`backward`]); `None` in the other modes.
    /// Sized for the layers' widest output gradient; a wider one (the tied head's, whose halves
    /// would be as large as the logits) takes the products' own splits.
    dy: RefCell<Option<OwnHalves>>,
}

/// An f32 matrix's halves with a scale word of their own (slot 0 of a one-word buffer), made
/// again for each matrix split into them, up to the size they were made for: a layer's kept
/// input ([`Kept::Split`]) or an output gradient, each read by two products.
pub(super) struct OwnHalves {
    halves: Halves,
    scales: Buffer<u32>,
    /// [`F16x4`] elements per half.
    capacity: usize,
}

impl OwnHalves {
    pub fn new(gpu: &Gpu, rows: usize, cols: usize) -> Result<OwnHalves, Error> {
        let capacity = f16x4_len(rows, cols);
        Ok(OwnHalves { halves: Halves::new(gpu, rows, cols)?, scales: gpu.zeros(1)?, capacity })
    }

    /// Whether a `rows × cols` matrix fits.
    pub fn fits(&self, rows: usize, cols: usize) -> bool {
        f16x4_len(rows, cols) <= self.capacity
    }

    /// Records making them the halves of `x` `[rows, cols]` (f32): the word cleared, x's
    /// largest magnitude folded in, the split — what a product splitting x itself records.
    pub fn split_from(&mut self, b: &Batch<'_>, x: &B, (rows, cols): (usize, usize)) -> Result<(), Error> {
        self.halves.set_shape(rows, cols)?;
        Halves::clear_scales(b, &mut self.scales)?;
        Ok(self.halves.split(b, x, &mut self.scales, 0)?)
    }

    /// As a product operand (the shape of the last split).
    pub fn mat(&self) -> Mat<'_> {
        Mat::split(&self.halves, &self.scales, 0)
    }
}

impl Plans {
    /// Plans for `mode`, with the workspace sized for every product of a step over `rows` tokens
    /// of the `[out, in]` weights `shapes`; in the split mode, halves for output gradients up to
    /// `dy_cols` wide, shared by each layer's two backward products.
    pub fn new(
        gpu: &Gpu,
        mode: Products,
        rows: usize,
        shapes: &[(usize, usize)],
        dy_cols: usize,
    ) -> Result<Plans, Error> {
        let dy = if mode == Products::Split { Some(OwnHalves::new(gpu, rows, dy_cols)?) } else { None };
        let plans = Plans {
            mode,
            plans: RefCell::new(HashMap::new()),
            ws: RefCell::new(GemmWorkspace::new(gpu, &[])?),
            dy: RefCell::new(dy),
        };
        let mut need = (0, 0);
        for &(out, inp) in shapes {
            for g in step_products(mode, rows, out, inp) {
                let p = plans.plan(gpu, g)?;
                need = (need.0.max(p.scratch_len()), need.1.max(p.halves_len()));
            }
        }
        *plans.ws.borrow_mut() = GemmWorkspace::with_capacity(gpu, need.0, need.1)?;
        Ok(plans)
    }

    fn plan(&self, gpu: &Gpu, g: Gemm) -> Result<GemmPlan, Error> {
        if let Some(p) = self.plans.borrow().get(&g) {
            return Ok(p.clone());
        }
        // The split mode runs on the split core on any adapter (its portable form where there
        // are no tensor cores), which is how lavapipe tests it.
        let p = if self.mode == Products::Split { g.plan_split(gpu)? } else { g.plan(gpu)? };
        self.plans.borrow_mut().insert(g, p.clone());
        Ok(p)
    }

    /// Records the product of `a` and `b` into `c` with `epilogue` (`residual` for
    /// [`Epilogue::Residual`]).
    fn run(
        &self,
        b: &Batch<'_>,
        (a, bm): (Mat<'_>, Mat<'_>),
        epilogue: Epilogue,
        residual: Option<&B>,
        c: &mut B,
    ) -> Result<(), Error> {
        let g = Gemm::of(&a, &bm)?.epilogue(epilogue).precision(self.precision());
        let plan = self.plan(b.gpu(), g)?;
        let mut ws = self.ws.borrow_mut();
        if ws.scratch_len() < plan.scratch_len() || ws.halves_len() < plan.halves_len() {
            let (s, h) = (ws.scratch_len().max(plan.scratch_len()), ws.halves_len().max(plan.halves_len()));
            *ws = GemmWorkspace::with_capacity(b.gpu(), s, h)?;
        }
        gemm::gemm(b, &plan, a, bm, residual, c, &mut ws)?;
        Ok(())
    }

    /// Records the weight gradient `c += a·bm` (`a` transposed): where its plan splits the
    /// contraction and `defer` is given, the parts go to `defer`'s buffer and its sum is left
    /// for [`Deferral::add`] (at `dst` of the layer's gradients); otherwise as [`Plans::run`].
    fn run_weight_grad(
        &self,
        b: &Batch<'_>,
        (a, bm): (Mat<'_>, Mat<'_>),
        c: &mut B,
        defer: Option<(&mut Deferral, usize)>,
    ) -> Result<(), Error> {
        let g = Gemm::of(&a, &bm)?.epilogue(Epilogue::Accumulate).precision(self.precision());
        let plan = self.plan(b.gpu(), g)?;
        match defer {
            Some((d, dst)) if plan.defers_parts() => d.record(b, &plan, (a, bm), dst),
            _ => self.run(b, (a, bm), Epilogue::Accumulate, None, c),
        }
    }

    /// Floats a layer's [`Deferral`] needs for the weight gradients of the `[out, in]` weights
    /// `shapes` over `rows` tokens (0 when none of their plans defers its parts), each product's
    /// parts starting on the binding alignment (`align` floats).
    pub fn deferred_len(
        &self,
        gpu: &Gpu,
        rows: usize,
        shapes: &[(usize, usize)],
        align: usize,
    ) -> Result<usize, Error> {
        let mut total = 0;
        for &(out, inp) in shapes {
            let g = Gemm::new(out, inp, rows).elems(Elem::F16, Elem::F16).a_t(true).epilogue(Epilogue::Accumulate);
            let plan = self.plan(gpu, g.precision(self.precision()))?;
            if self.mode == Products::Half && plan.defers_parts() {
                total += plan.scratch_len().next_multiple_of(align);
            }
        }
        Ok(total)
    }

    /// Whether the input gradient `dY·W` of an `[out, in]` weight over `rows` tokens runs on the
    /// exact tensor-core kernels as `dY·(Wᵀ)ᵀ` on the weight's transposed copy (mixed precision).
    pub fn transposed_pays(&self, gpu: &Gpu, rows: usize, out: usize, inp: usize) -> Result<bool, Error> {
        if self.mode != Products::Half {
            return Ok(false);
        }
        let g = Gemm::new(rows, inp, out).b_t(true).elems(Elem::F16, Elem::F16).precision(Precision::F16);
        Ok(self.plan(gpu, g)?.exact_tc())
    }

    fn precision(&self) -> Precision {
        match self.mode {
            Products::Sgemm => Precision::F32Simt,
            Products::Split => Precision::F32,
            Products::Half => Precision::F16,
        }
    }
}

/// A layer's split weight gradients, their parts summed by one dispatch
/// (`kernels::gemm::add_parts`) instead of one each: each product leaves its parts in `parts`
/// ([`Plans::run_weight_grad`]) and [`Deferral::add`] adds them all into `grads`, the part of the
/// gradient pages that holds the layer's weight matrices.
pub(super) struct Deferral {
    pub parts: B,
    /// The floats one product's parts start on (the binding alignment).
    pub align: usize,
    /// Where the next product's parts start.
    next: usize,
    sums: Vec<kernels::gemm::PartsSum>,
}

impl Deferral {
    pub fn new(parts: B, align: usize) -> Deferral {
        Deferral { parts, align, next: 0, sums: Vec::new() }
    }

    fn record(&mut self, b: &Batch<'_>, plan: &GemmPlan, (a, bm): (Mat<'_>, Mat<'_>), dst: usize) -> Result<(), Error> {
        let (src, len) = (self.next, plan.scratch_len());
        let mut at = self.parts.part(src..src + len)?;
        gemm::gemm_parts(b, plan, a, bm, &mut at)?;
        let g = plan.gemm();
        self.sums.push(kernels::gemm::PartsSum { dst, len: g.m * g.n, parts: plan.parts(), src });
        self.next = (src + len).next_multiple_of(self.align);
        Ok(())
    }

    /// Adds the parts recorded since the last call into `grads` (one dispatch; none when no
    /// product deferred).
    pub fn add(&mut self, b: &Batch<'_>, grads: &mut B) -> Result<(), Error> {
        if !self.sums.is_empty() {
            gemm::add_parts(b, &self.parts, &self.sums, grads)?;
        }
        self.sums.clear();
        self.next = 0;
        Ok(())
    }
}

/// The products of one `[out, in]` weight in a step over `rows` tokens: the forward `x·wᵀ` (and
/// its residual form `r + x·wᵀ` for residual branches in f32), the input gradient `dy·w` (with and
/// without a residual) and the weight gradient `dw += dyᵀ·x`.
fn step_products(mode: Products, rows: usize, out: usize, inp: usize) -> Vec<Gemm> {
    let (e, precision) = match mode {
        Products::Half => (Elem::F16, Precision::F16),
        Products::Split => (Elem::F32, Precision::F32),
        Products::Sgemm => (Elem::F32, Precision::F32Simt),
    };
    // The split mode's operands come split: the weights ([`Prepared`]), the layers' kept inputs
    // ([`Kept::Split`]) and the output gradients (split once for both backward products).
    let g = |m, n, k| {
        let g = Gemm::new(m, n, k).elems(e, e).precision(precision);
        if mode == Products::Split { g.elems(Elem::Split, Elem::Split) } else { g }
    };
    let mut v = vec![
        g(rows, out, inp).b_t(true),
        g(rows, inp, out),
        g(rows, inp, out).epilogue(Epilogue::Residual),
        g(out, inp, rows).a_t(true).epilogue(Epilogue::Accumulate),
    ];
    if mode == Products::Half {
        // The input gradient on the weight's transposed copy ([`Transposed`]).
        v.push(g(rows, inp, out).b_t(true));
    } else {
        // f32 residual branches (mixed precision adds the residual in the next norm instead).
        v.push(g(rows, out, inp).b_t(true).epilogue(Epilogue::Residual));
    }
    v.dedup();
    v
}

/// Scratch floats the products of one `[out, in]` weight over `rows` tokens need at most, over
/// every precision the adapter runs (for the memory checks made before a model exists).
pub(super) fn scratch_bound(gpu: &Gpu, rows: usize, out: usize, inp: usize) -> usize {
    let f16 = gpu.features().contains(kernels::wgpu::Features::SHADER_F16);
    [Products::Sgemm, Products::Split, Products::Half]
        .into_iter()
        .filter(|&m| m != Products::Half || f16)
        .flat_map(|m| step_products(m, rows, out, inp).into_iter().map(move |g| (m, g)))
        .filter_map(|(m, g)| if m == Products::Split { g.plan_split(gpu).ok() } else { g.plan(gpu).ok() })
        .map(|p| p.scratch_len())
        .max()
        .unwrap_or(0)
}

/// The split mode's weight operands: every weight matrix scaled and split into its f16 halves
/// once per step, right after the optimizer writes it (and when the model is built), and read
/// by each product that takes the weight as its B operand (the forward `x·wᵀ` and the input
/// gradient `dy·w`), which then skip the weight's max and split passes. The products' results
/// are the bits they would have splitting the weight themselves (`kernels::gemm::Halves`).
pub(super) struct Prepared {
    /// One scale word per tensor (in layout order; vectors' words unused).
    pub scales: Buffer<u32>,
    /// Each matrix's halves with its word's slot; `None` for vectors (no product reads them).
    halves: Fused<Option<(usize, Halves)>>,
    /// Whether tensor i (layout order) is a matrix with halves.
    matrices: Vec<bool>,
}

impl Prepared {
    /// Halves for every matrix of `layout` (zeros until [`Prepared::record`]).
    pub fn new(gpu: &Gpu, layout: &Fused<Param>) -> Result<Prepared, Error> {
        let mut slot = 0;
        let halves = layout.as_ref().try_map(|p| {
            let here = slot;
            slot += 1;
            match p.shape[..] {
                [out, inp] => Halves::new(gpu, out, inp).map(|h| Some((here, h))),
                _ => Ok(None),
            }
        })?;
        let matrices = halves.iter().map(|h| h.is_some()).collect();
        Ok(Prepared { scales: gpu.zeros(slot.max(1))?, halves, matrices })
    }

    /// Records making every matrix's halves from `params`: one clear of the scale words, then a
    /// max and a split per matrix.
    pub fn record(&mut self, b: &Batch<'_>, params: &Fused<B>) -> Result<(), Error> {
        self.clear(b)?;
        for (w, h) in params.iter().zip(self.halves.iter_mut()) {
            if let Some((slot, h)) = h {
                h.split(b, w, &mut self.scales, *slot)?;
            }
        }
        Ok(())
    }

    /// Records zeroing the scale words (before an update folds the new weights' maxima in).
    pub fn clear(&mut self, b: &Batch<'_>) -> Result<(), Error> {
        Ok(Halves::clear_scales(b, &mut self.scales)?)
    }

    /// The scale word of tensor `i` (layout order) when it is a matrix with halves.
    pub fn slot(&self, i: usize) -> Option<usize> {
        self.matrices.get(i).copied().unwrap_or(false).then_some(i)
    }

    /// Records splitting every matrix of `params` by the scale word its update folded its
    /// largest magnitude into (`optimizer::adamw_update_absmax`, after [`Prepared::clear`]).
    pub fn split_scaled(&mut self, b: &Batch<'_>, params: &Fused<B>) -> Result<(), Error> {
        for (w, h) in params.iter().zip(self.halves.iter_mut()) {
            if let Some((slot, h)) = h {
                h.split_scaled(b, w, &self.scales, *slot)?;
            }
        }
        Ok(())
    }
}

/// Mixed precision: weight matrices' transposed f16 copies (`[in, out]`, the f16x4 row layout),
/// which the input gradients read as the B operand of an `X·Wᵀ` product (`dY·W = dY·(Wᵀ)ᵀ`),
/// where that runs on the exact tensor-core kernels ([`Plans::transposed_pays`]): those run
/// `X·Wᵀ` products faster than the full core runs `dY·W` ones. Made from the f16 copies by one
/// `ops::Transposes` dispatch per page after every update, and when the model is built.
pub(super) struct Transposed {
    /// Per tensor (fused order): its transposed copy, `None` for vectors and the matrices
    /// without one.
    pub parts: Fused<Option<Buffer<F16x4>>>,
    /// The f16 copies' pages the sets read, and the copies' pages they write.
    src: Vec<Buffer<F16x4>>,
    dst: Vec<Buffer<F16x4>>,
    sets: Vec<Transposes>,
}

impl Transposed {
    /// The copies of `parts` in the pages `dst`, made from the f16 copies' pages `src` by the
    /// transposes `items` (per page).
    pub fn new(
        gpu: &Gpu,
        (src, dst): (Vec<Buffer<F16x4>>, Vec<Buffer<F16x4>>),
        parts: Fused<Option<Buffer<F16x4>>>,
        items: &[Vec<Transpose>],
    ) -> Result<Transposed, Error> {
        let sets = items.iter().map(|t| Transposes::new(gpu, t)).collect::<Result<_, _>>()?;
        Ok(Transposed { parts, src, dst, sets })
    }

    /// Records rewriting every copy from the f16 copies (one dispatch per page that has any).
    pub fn record(&mut self, b: &Batch<'_>) -> Result<(), Error> {
        for ((set, src), dst) in self.sets.iter().zip(&self.src).zip(self.dst.iter_mut()) {
            set.record(b, src, dst)?;
        }
        Ok(())
    }
}

/// A weight as the products read it beside its f32 master: its f16 copy (mixed precision), its
/// prepared halves (the split mode) or nothing more (the SGEMM).
#[derive(Clone, Copy)]
pub(super) enum Prep<'a> {
    /// The f32 master only.
    Plain,
    /// The f16 copy, and the transposed one where the model keeps it ([`Transposed`]).
    F16(&'a Buffer<F16x4>, Option<&'a Buffer<F16x4>>),
    /// The halves and the scale words with the weight's slot.
    Split(&'a Halves, &'a Buffer<u32>, usize),
}

/// Every tensor's [`Prep`]: from `w16` (mixed precision, with the transposed copies `wt16`
/// where there are), else `prepared` (the split mode), else plain.
pub(super) fn preps<'a>(
    params: &Fused<B>,
    (w16, wt16): (Option<&'a Fused<Buffer<F16x4>>>, Option<&'a Transposed>),
    prepared: Option<&'a Prepared>,
) -> Fused<Prep<'a>> {
    match (w16, prepared) {
        (Some(w), _) => {
            // Both sets in the fused order.
            let mut t = wt16.map(|t| t.parts.iter());
            w.as_ref().map(|w| Prep::F16(w, t.as_mut().and_then(|t| t.next()).and_then(|p| p.as_ref())))
        }
        (None, Some(p)) => p.halves.as_ref().map(|h| match h {
            Some((slot, h)) => Prep::Split(h, &p.scales, *slot),
            None => Prep::Plain,
        }),
        (None, None) => params.as_ref().map(|_| Prep::Plain),
    }
}

/// The weight `w` `[n, k]` as a product's B operand beside the activation `x`: f16 `x` takes
/// the f16 copy, f32 `x` the prepared halves where there are, else `w` itself.
fn weight<'a>(x: &Operand<'_>, w: &'a B, prep: Prep<'a>, (n, k): (usize, usize)) -> Result<Mat<'a>, Error> {
    Ok(match (x, prep) {
        (Operand::F16(_), Prep::F16(w16, _)) => Mat::f16(w16, n, k),
        (Operand::F16(_), _) => return Err(missing()),
        (Operand::F32(_) | Operand::Split(..), Prep::Split(h, scales, slot)) => Mat::split(h, scales, slot),
        (Operand::F32(_) | Operand::Split(..), _) => Mat::f32(w, n, k),
    })
}

/// An activation `[m, k]` as a product's operand (halves carry their own shape, set when they
/// were made: [`OwnHalves::split_from`]).
fn activation<'a>(x: &Operand<'a>, (m, k): (usize, usize)) -> Mat<'a> {
    match *x {
        Operand::F32(x) => Mat::f32(x, m, k),
        Operand::F16(x) => Mat::f16(x, m, k),
        Operand::Split(h) => h.mat(),
    }
}

/// Mixed precision's loss-scaling buffers.
pub(super) struct Half {
    /// Set by the kernels that write f16 output gradients when a value overflows f16 (the rule of
    /// `kernels::cast::cast_grad_f16x4`).
    pub flag: Buffer<u32>,
    /// The loss scaler's state (`crate::scaler::STATE_LEN` floats).
    pub state: B,
    /// Clean steps before the loss scale doubles.
    pub growth_interval: u32,
}

/// A linear layer's input as the forward writes it and the backward's weight gradient reads it.
pub(super) enum Kept {
    /// f32 `[rows, cols]` (f32 precision).
    F32(B),
    /// Only the f16 copy, in the f16x4 row layout (mixed precision: written directly by
    /// `norm::rmsnorm_f16` and `activation::swiglu_f16`; nothing reads the f32 values).
    F16(Buffer<F16x4>),
    /// Only the scaled f16 halves and their scale word (f32 precision on the split core): the
    /// norm's or SwiGLU's f32 output goes to a temporary and is split once
    /// ([`OwnHalves::split_from`]); the forward product and the weight gradient both read the
    /// halves, the ones each would make itself, so the products keep their bits and the input is
    /// not split twice.
    Split(OwnHalves),
}

impl Kept {
    /// Zeros for `[rows, cols]`: f16 when `half`, else f32.
    pub fn zeros(gpu: &Gpu, half: bool, rows: usize, cols: usize) -> Result<Kept, Error> {
        Ok(if half { Kept::F16(gpu.zeros(f16x4_len(rows, cols))?) } else { Kept::F32(gpu.zeros(rows * cols)?) })
    }

    /// Halves for up to `[rows, cols]` (the split mode's layer inputs).
    pub fn halves(gpu: &Gpu, rows: usize, cols: usize) -> Result<Kept, Error> {
        Ok(Kept::Split(OwnHalves::new(gpu, rows, cols)?))
    }

    /// The product operand.
    pub fn operand(&self) -> Operand<'_> {
        match self {
            Kept::F32(x) => Operand::F32(x),
            Kept::F16(x) => Operand::F16(x),
            Kept::Split(h) => Operand::Split(h),
        }
    }

    /// Records `write` of this kept input's f32 values `[rows, cols]` (a norm's or SwiGLU's):
    /// into the input itself ([`Kept::F32`]), or into `tmp` and then split into its halves
    /// ([`Kept::Split`]).
    pub fn write_f32(
        &mut self,
        b: &Batch<'_>,
        tmp: Option<&mut B>,
        (rows, cols): (usize, usize),
        write: impl FnOnce(&mut B) -> Result<(), Error>,
    ) -> Result<(), Error> {
        match self {
            Kept::F32(y) => write(y),
            Kept::Split(h) => {
                let tmp = tmp.ok_or_else(|| {
                    Error::Config("internal: kept halves without the f32 temporary they are split from".into())
                })?;
                write(tmp)?;
                h.split_from(b, tmp, (rows, cols))
            }
            Kept::F16(_) => Err(Error::Config("internal: f32 values for an input kept in f16".into())),
        }
    }

    /// As an output gradient (an f16 one written, with the overflow check, by its producer).
    pub fn dy(&self) -> Result<Dy<'_>, Error> {
        match self {
            Kept::F32(x) => Ok(Dy::F32(x)),
            Kept::F16(x) => Ok(Dy::F16(x)),
            Kept::Split(..) => Err(Error::Config("internal: split halves as an output gradient".into())),
        }
    }
}

/// A product's activation operand: f32, f16 in the f16x4 row layout (the f16 products), or an
/// f32 matrix's halves (the split core, [`Kept::Split`]).
#[derive(Clone, Copy)]
pub(super) enum Operand<'a> {
    F32(&'a B),
    F16(&'a Buffer<F16x4>),
    Split(&'a OwnHalves),
}

/// A weight matrix's shape [out, in] as (rows, cols); a vector [n] as one row.
pub(super) fn rows_cols(shape: &[usize]) -> (usize, usize) {
    match shape {
        [n] => (1, *n),
        [out, inp] => (*out, *inp),
        _ => (1, shape.iter().product()),
    }
}

fn missing() -> Error {
    Error::Config("internal: a mixed-precision product without its f16 buffers".into())
}

/// `y = x·wᵀ` for x [m, k], w [n, k]: an f32 `x` with the f32 weight (or its prepared halves),
/// an f16 `x` with the weight's f16 copy.
pub(super) fn forward(
    b: &Batch<'_>,
    plans: &Plans,
    x: Operand<'_>,
    w: &B,
    prep: Prep<'_>,
    y: &mut B,
    (m, n, k): (u32, u32, u32),
) -> Result<(), Error> {
    let (mu, nu, ku) = (m as usize, n as usize, k as usize);
    let wb = weight(&x, w, prep, (nu, ku))?;
    plans.run(b, (activation(&x, (mu, ku)), wb.t()), Epilogue::Store, None, y)
}

/// What a forward product's epilogue makes of its output in the same dispatch, in f16 (mixed
/// precision): `kernels::gemm::gemm_swiglu`'s SwiGLU of the fused gate/up rows, or
/// `kernels::gemm::gemm_rope_qkv`'s rotated Q and K and V of the fused attention projection.
pub(super) enum Fused16<'a> {
    SwiGlu(&'a mut Buffer<F16x4>),
    Rope { rope: RopeQkv, q: &'a mut Buffer<F16x4>, k: &'a mut Buffer<F16x4>, v: &'a mut Buffer<F16x4> },
}

/// `y = x·wᵀ` as [`forward`], and `then` in the same dispatch where the plan takes that epilogue
/// (`GemmPlan::fuses_swiglu`, `GemmPlan::fuses_rope`). Returns whether it did; if not, only `y`
/// is written and the caller runs the separate kernel (which gives the same bits).
#[allow(clippy::too_many_arguments)]
pub(super) fn forward_fused(
    b: &Batch<'_>,
    plans: &Plans,
    x: Operand<'_>,
    w: &B,
    prep: Prep<'_>,
    y: &mut B,
    then: Fused16<'_>,
    (m, n, k): (u32, u32, u32),
) -> Result<bool, Error> {
    let (mu, nu, ku) = (m as usize, n as usize, k as usize);
    let (xa, wb) = (activation(&x, (mu, ku)), weight(&x, w, prep, (nu, ku))?.t());
    let g = Gemm::of(&xa, &wb)?.epilogue(Epilogue::Store).precision(plans.precision());
    let plan = plans.plan(b.gpu(), g)?;
    let fuses = match &then {
        Fused16::SwiGlu(_) => plan.fuses_swiglu(),
        Fused16::Rope { rope, .. } => plan.fuses_rope(rope),
    };
    if !fuses {
        plans.run(b, (xa, wb), Epilogue::Store, None, y)?;
        return Ok(false);
    }
    match then {
        Fused16::SwiGlu(h) => gemm::gemm_swiglu(b, &plan, xa, wb, y, h)?,
        Fused16::Rope { rope, q, k, v } => gemm::gemm_rope_qkv(b, &plan, xa, wb, y, rope, q, k, v)?,
    }
    Ok(true)
}

/// `y = resid + x·wᵀ` for an f32 `x` [m, k] (or its halves) and w [n, k] (`resid` a different
/// buffer from `y`).
#[allow(clippy::too_many_arguments)]
pub(super) fn forward_residual(
    b: &Batch<'_>,
    plans: &Plans,
    x: Operand<'_>,
    w: &B,
    prep: Prep<'_>,
    resid: &B,
    y: &mut B,
    (m, n, k): (u32, u32, u32),
) -> Result<(), Error> {
    let (mu, nu, ku) = (m as usize, n as usize, k as usize);
    if let Operand::F16(_) = x {
        return Err(Error::Config("internal: an f16 input for an f32 residual product".into()));
    }
    let wb = weight(&x, w, prep, (nu, ku))?;
    plans.run(b, (activation(&x, (mu, ku)), wb.t()), Epilogue::Residual, Some(resid), y)
}

/// An output gradient dY as a linear layer's backward receives it.
#[derive(Clone, Copy)]
pub(super) enum Dy<'a> {
    /// f32 (f32 precision).
    F32(&'a B),
    /// Already in f16 (the f16x4 row layout), written by the kernel that made it, which raised
    /// the loss scaler's overflow flag for any value beyond f16's range as the cast would
    /// (mixed precision only).
    F16(&'a Buffer<F16x4>),
}

/// The backward of one linear layer `Y = X·Wᵀ` (X [rows, in], W [out, in]) from dY [rows, out]:
/// the input gradient `dx = dy·w` (+ `residual`, a different buffer from `dx`) and the weight
/// gradient `dw += dyᵀ·x`.
///
/// f32 `x`: W as its prepared halves in the split mode ([`Prepared`]), else the f32 weight; dY
/// must be f32.
/// f16 `x` (mixed precision): dY must be f16 (written, with the loss scaler's overflow check,
/// by the kernel that made it: every output gradient of the mixed step is), the operand of both
/// products, with W's and X's kept f16 copies.
#[allow(clippy::too_many_arguments)]
pub(super) fn backward(
    b: &Batch<'_>,
    plans: &Plans,
    dy: Dy<'_>,
    w: &B,
    prep: Prep<'_>,
    x: Operand<'_>,
    dw: &mut B,
    residual: Option<&B>,
    dx: &mut B,
    (rows, out, inp): (usize, usize, usize),
    defer: Option<(&mut Deferral, usize)>,
) -> Result<(), Error> {
    let e = if residual.is_some() { Epilogue::Residual } else { Epilogue::Store };
    match (x, dy) {
        (Operand::F32(_) | Operand::Split(..), Dy::F32(dy)) => {
            let wb = weight(&x, w, prep, (out, inp))?;
            let xm = activation(&x, (rows, inp));
            let mut shared = plans.dy.borrow_mut();
            match shared.as_mut().filter(|s| s.fits(rows, out)) {
                Some(s) => {
                    // dY's max and split once, read by both products: the bits each would make.
                    s.split_from(b, dy, (rows, out))?;
                    let dys = s.mat();
                    plans.run(b, (dys, wb), e, residual, dx)?;
                    plans.run(b, (dys.t(), xm), Epilogue::Accumulate, None, dw)?;
                }
                None => {
                    plans.run(b, (Mat::f32(dy, rows, out), wb), e, residual, dx)?;
                    plans.run(b, (Mat::f32(dy, rows, out).t(), xm), Epilogue::Accumulate, None, dw)?;
                }
            }
        }
        (Operand::F32(_) | Operand::Split(..), Dy::F16(_)) => {
            return Err(Error::Config("internal: an f16 output gradient for an f32 linear layer".into()));
        }
        (Operand::F16(_), Dy::F32(_)) => {
            return Err(Error::Config("internal: an f32 output gradient for an f16 linear layer".into()));
        }
        (Operand::F16(x), Dy::F16(dy16)) => {
            // dY·W, or dY·(Wᵀ)ᵀ on W's transposed copy: the same sums in the same order.
            let wb = match prep {
                Prep::F16(_, Some(wt)) => Mat::f16(wt, inp, out).t(),
                _ => weight(&Operand::F16(x), w, prep, (out, inp))?,
            };
            plans.run(b, (Mat::f16(dy16, rows, out), wb), e, residual, dx)?;
            let (dyt, xs) = (Mat::f16(dy16, rows, out).t(), Mat::f16(x, rows, inp));
            plans.run_weight_grad(b, (dyt, xs), dw, defer)?;
        }
    }
    Ok(())
}
