//! Matrix products through one entry point: [`gemm`] records `C (=|+=) op(A)·op(B) (+ R)` from a
//! [`GemmPlan`], made once per shape, precision and adapter.
//!
//! ```no_run
//! # fn main() -> kernels::Result<()> {
//! use kernels::gemm::{self, Epilogue, Gemm, GemmWorkspace, Mat};
//! let gpu = kernels::Gpu::new()?;
//! let (m, n, k) = (256, 128, 64);
//! let x = gpu.upload(&vec![1.0f32; m * k])?;
//! let w = gpu.upload(&vec![0.5f32; n * k])?; // [out, in], as PyTorch stores it
//! let mut y = gpu.zeros::<f32>(m * n)?;
//! // Y = X·Wᵀ, f32-accurate (the scaled split on tensor cores, the f32 SGEMM elsewhere).
//! let plan = Gemm::new(m, n, k).b_t(true).epilogue(Epilogue::Store).plan(&gpu)?;
//! let mut ws = GemmWorkspace::new(&gpu, &[&plan])?;
//! gemm::gemm(&gpu, &plan, Mat::f32(&x, m, k), Mat::f32(&w, n, k).t(), None, &mut y, &mut ws)?;
//! # Ok(()) }
//! ```
//!
//! # The plan
//! Every choice a product makes lives in [`Gemm::plan`]: which core runs it ([`Core`]: f16
//! operands on tensor cores or their portable form, the scaled f32-accurate split, or the f32
//! SIMT product), the block shape of the f16 core ([`F16Config`]), how many parts its
//! contraction is split into, the kernels it records and the scratch and workspace it needs
//! ([`GemmPlan::scratch_len`], [`GemmPlan::halves_len`]). The f16 core's block shape comes from
//! the adapter's tuning table (`tuning/*.txt`, measured by `cargo bench --bench gemm -- --tune`; the H200's is
//! committed), else from [`F16Config::default_for`]; with `KERNELS_GEMM_AUTOTUNE=1` a plan of the
//! f16 core on tensor cores instead times a few candidates on first use and keeps the fastest in
//! a cache file (see [`autotune`]). The plan compiles the shape into the
//! pipeline (one cached pipeline per shape and choice) where tensor cores run, since the
//! measured gain of folded index arithmetic there is large.

use crate::ops::{F16x4, f16x4_len};
use crate::{Buffer, Error, Gpu, Record, Result};

/// The element type of an operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Elem {
    /// `f32`, row-major.
    F32,
    /// f16 in the f16x4 row layout ([`F16x4`]: rows padded to a multiple of 4 elements).
    F16,
    /// An f32 matrix already scaled and split into its f16 halves ([`Halves`]): an operand of an
    /// f32 product on the split core, which then takes the halves instead of splitting it.
    Split,
}

/// An operand's buffer.
#[derive(Clone, Copy, Debug)]
pub enum Data<'a> {
    /// Row-major f32.
    F32(&'a Buffer<f32>),
    /// f16 in the f16x4 row layout.
    F16(&'a Buffer<F16x4>),
    /// An f32 matrix's prepared halves and the buffer of scale words holding its scale at `slot`.
    Split {
        /// The halves.
        halves: &'a Halves,
        /// Scale words ([`Halves::split`] wrote this operand's at `slot`).
        scales: &'a Buffer<u32>,
        /// The operand's word in `scales`.
        slot: usize,
    },
}

/// An operand of a product: a `rows × cols` matrix as stored, used as it is or transposed
/// ([`Mat::t`]). `op(M)` is `rows × cols`, or `cols × rows` when transposed.
#[derive(Clone, Copy, Debug)]
pub struct Mat<'a> {
    /// The buffer.
    pub data: Data<'a>,
    /// Rows as stored.
    pub rows: usize,
    /// Columns as stored.
    pub cols: usize,
    /// Whether the product uses the transpose.
    pub transposed: bool,
}

impl<'a> Mat<'a> {
    /// A row-major f32 `rows × cols` matrix.
    pub fn f32(buffer: &'a Buffer<f32>, rows: usize, cols: usize) -> Self {
        Mat { data: Data::F32(buffer), rows, cols, transposed: false }
    }

    /// An f16 `rows × cols` matrix in the f16x4 row layout ([`f16x4_len`]`(rows, cols)` elements).
    pub fn f16(buffer: &'a Buffer<F16x4>, rows: usize, cols: usize) -> Self {
        Mat { data: Data::F16(buffer), rows, cols, transposed: false }
    }

    /// An f32 `rows × cols` matrix by its prepared halves ([`Halves::split`]), its scale word at
    /// `slot` of `scales`: an operand of an f32 product on the split core (A, B or both), which
    /// reads the halves instead of splitting the matrix again (the same bits as splitting it
    /// itself). One split serves every product of the matrix, e.g. an output gradient's input-
    /// and weight-gradient products.
    pub fn split(halves: &'a Halves, scales: &'a Buffer<u32>, slot: usize) -> Self {
        Mat { data: Data::Split { halves, scales, slot }, rows: halves.rows, cols: halves.cols, transposed: false }
    }

    /// The transpose (no data moves: the product reads the matrix the other way).
    pub fn t(self) -> Self {
        Mat { transposed: !self.transposed, ..self }
    }

    /// The element type.
    pub fn elem(&self) -> Elem {
        match self.data {
            Data::F32(_) => Elem::F32,
            Data::F16(_) => Elem::F16,
            Data::Split { .. } => Elem::Split,
        }
    }

    /// (rows, cols) of op(M).
    pub fn shape(&self) -> (usize, usize) {
        if self.transposed { (self.cols, self.rows) } else { (self.rows, self.cols) }
    }

    fn stored_len(&self) -> usize {
        match self.data {
            Data::F32(_) => self.rows * self.cols,
            Data::F16(_) | Data::Split { .. } => f16x4_len(self.rows, self.cols),
        }
    }

    fn buffer_len(&self) -> usize {
        match self.data {
            Data::F32(b) => b.len(),
            Data::F16(b) => b.len(),
            Data::Split { halves, .. } => halves.hi.len(),
        }
    }
}

/// What a product does with C.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Epilogue {
    /// C = op(A)·op(B).
    Store,
    /// C += op(A)·op(B).
    Accumulate,
    /// C = op(A)·op(B) + R (R a different buffer from C).
    Residual,
}

/// The accuracy a product must have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Precision {
    /// From the operands: [`Precision::F16`] when both are f16, else [`Precision::F32`].
    Auto,
    /// f16 operands (they must be f16 already: cast f32 ones with `ops::cast_f16x4`), f32 sums:
    /// an error of at most about 1e-3 of Σ|a||b|, from rounding the operands (typically 1e-5 to
    /// 5e-5). Tensor cores where the adapter has them, f32 FMAs on the same operands elsewhere.
    F16,
    /// f32 accuracy over the whole f32 range, at most about 1e-6 of Σ|a||b| per output: on
    /// tensor cores each operand is scaled by a power of two and split into two f16 halves,
    /// three products ([`Core::Split`]); elsewhere the f32 SIMT product.
    F32,
    /// The f32 SIMT product (`linear::matmul` and friends) on any adapter: the library's
    /// original products, bit for bit.
    F32Simt,
}

/// A product without its buffers: what a plan is made for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Gemm {
    /// Rows of C and op(A).
    pub m: usize,
    /// Columns of C and op(B).
    pub n: usize,
    /// The contraction: columns of op(A), rows of op(B).
    pub k: usize,
    /// A's elements.
    pub a: Elem,
    /// B's elements.
    pub b: Elem,
    /// A is stored `[k, m]` (op(A) = Aᵀ).
    pub a_t: bool,
    /// B is stored `[n, k]` (op(B) = Bᵀ), as a linear layer's `[out, in]` weight.
    pub b_t: bool,
    /// What happens to C.
    pub epilogue: Epilogue,
    /// The accuracy asked for.
    pub precision: Precision,
}

impl Gemm {
    /// C `[m, n]` = A `[m, k]` · B `[k, n]`, f32 operands, [`Precision::Auto`], [`Epilogue::Store`].
    pub fn new(m: usize, n: usize, k: usize) -> Gemm {
        Gemm {
            m,
            n,
            k,
            a: Elem::F32,
            b: Elem::F32,
            a_t: false,
            b_t: false,
            epilogue: Epilogue::Store,
            precision: Precision::Auto,
        }
    }

    /// The product of these operands (their element types, shapes and orientations).
    pub fn of(a: &Mat<'_>, b: &Mat<'_>) -> Result<Gemm> {
        let ((m, ka), (kb, n)) = (a.shape(), b.shape());
        if ka != kb {
            return Err(Error::LengthMismatch {
                detail: format!("gemm: op(A) is {m}×{ka} and op(B) is {kb}×{n}: the contraction lengths differ"),
            });
        }
        Ok(Gemm { a: a.elem(), b: b.elem(), a_t: a.transposed, b_t: b.transposed, ..Gemm::new(m, n, ka) })
    }

    /// Whether A is stored `[k, m]`.
    pub fn a_t(self, transposed: bool) -> Gemm {
        Gemm { a_t: transposed, ..self }
    }

    /// Whether B is stored `[n, k]`.
    pub fn b_t(self, transposed: bool) -> Gemm {
        Gemm { b_t: transposed, ..self }
    }

    /// The operands' element types.
    pub fn elems(self, a: Elem, b: Elem) -> Gemm {
        Gemm { a, b, ..self }
    }

    /// What happens to C.
    pub fn epilogue(self, epilogue: Epilogue) -> Gemm {
        Gemm { epilogue, ..self }
    }

    /// The accuracy asked for.
    pub fn precision(self, precision: Precision) -> Gemm {
        Gemm { precision, ..self }
    }

    /// The plan for `gpu`: the core, block shape and split the adapter runs fastest (its tuning
    /// table, else defaults).
    pub fn plan(self, gpu: &Gpu) -> Result<GemmPlan> {
        GemmPlan::new(gpu, self, None)
    }

    /// The plan with the f16 core's block shape and split given (for tuning and tests); an
    /// error when the product does not run on the f16 core or the shape breaks its limits.
    pub fn plan_with(self, gpu: &Gpu, config: F16Config, parts: usize) -> Result<GemmPlan> {
        GemmPlan::new(gpu, self, Some((config, parts)))
    }

    /// The plan on the scaled split core whatever the adapter: its portable form (f32 FMAs on
    /// the same halves) where there are no tensor cores. For tests and comparisons; an error for
    /// f16 operands or both operands transposed.
    pub fn plan_split(self, gpu: &Gpu) -> Result<GemmPlan> {
        // The SIMT plan of the same f32 product checks the shape and orientation.
        let f32_of = |e: Elem| if e == Elem::Split { Elem::F32 } else { e };
        let (a, b) = (f32_of(self.a), f32_of(self.b));
        let mut plan = GemmPlan::new(gpu, Gemm { precision: Precision::F32Simt, a, b, ..self }, None)?;
        plan.gemm = self;
        plan.make_split();
        Ok(plan)
    }

    /// The precision this product runs at: [`Precision::Auto`] resolved.
    pub fn resolved_precision(&self) -> Precision {
        match self.precision {
            Precision::Auto if self.a == Elem::F16 && self.b == Elem::F16 => Precision::F16,
            Precision::Auto => Precision::F32,
            p => p,
        }
    }
}

/// The block shape of the f16 core (`shaders/lib/gemm16.wgsl`): what the tuner varies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct F16Config {
    /// Output rows per workgroup (a multiple of 128).
    pub bm: u32,
    /// Output columns per workgroup (a multiple of 64).
    pub bn: u32,
    /// Contraction depth staged per step: 16, 32 or 64.
    pub bk: u32,
    /// 16×16 tiles per subgroup, down and across (1–4 each).
    pub tm: u32,
    /// See `tm`.
    pub tn: u32,
    /// f16 elements of padding per staged row (a multiple of 8).
    pub pad: u32,
    /// Register prefetch of the next slice (else each slice is loaded just before it is staged).
    pub prefetch: bool,
    /// Block rows per group of the launch order (L2 reuse); 1 is row-major.
    pub group: u32,
    /// Invocations per workgroup: 256; 128 (fewer registers per workgroup, so more of them per
    /// multiprocessor); or 512 (sixteen subgroups of 32 with smaller tiles each, more subgroups in
    /// flight to hide the staging's latency), which runs on tensor cores only for blocks wholly
    /// inside the output ([`F16Config::covers`]).
    pub wg: u32,
}

impl Default for F16Config {
    fn default() -> Self {
        F16Config { bm: 128, bn: 256, bk: 32, tm: 4, tn: 4, pad: 8, prefetch: false, group: 4, wg: 256 }
    }
}

/// vec4<f16>s a staged operand slice may take: the f16 core's `G16_STAGE`, with tensor cores and
/// without (a unit test checks these against the WGSL).
const STAGE_COOP: u32 = 2560;
const STAGE_PORTABLE: u32 = 1024;

impl F16Config {
    /// The shape the plan uses where the adapter has no tuning table: on tensor cores the H200's
    /// fastest at 4096³ and at the trainer's forward shapes (128×256 blocks staged 32 deep, 4×4 tiles per subgroup, no
    /// register prefetch, launch groups of 4 block rows); 128×64 staged 16 deep on the portable
    /// path (within a browser's 16 KiB of workgroup memory).
    pub fn default_for(tensor_cores: bool) -> F16Config {
        if tensor_cores {
            F16Config::default()
        } else {
            F16Config { bm: 128, bn: 64, bk: 16, tm: 4, tn: 2, pad: 8, prefetch: true, group: 1, wg: 256 }
        }
    }

    /// Checks the core's limits for a product of orientation (a_t, b_t) (the staged slices must
    /// fit the variant that runs: `tensor_cores` or the portable one).
    pub fn validate(&self, a_t: bool, b_t: bool, tensor_cores: bool) -> Result<()> {
        let bad = |why: String| Err(Error::BadArguments { kernel: "linear::gemm16".into(), detail: why });
        let c = *self;
        if c.bm == 0 || !c.bm.is_multiple_of(128) || c.bn == 0 || !c.bn.is_multiple_of(64) {
            return bad(format!("block {}×{}: rows a multiple of 128, columns of 64", c.bm, c.bn));
        }
        if !matches!(c.bk, 16 | 32 | 64) {
            return bad(format!("depth {}: 16, 32 or 64", c.bk));
        }
        if !(1..=4).contains(&c.tm)
            || !(1..=4).contains(&c.tn)
            || !c.bm.is_multiple_of(16 * c.tm)
            || !c.bn.is_multiple_of(16 * c.tn)
        {
            return bad(format!("subgroup tiles {}×{} for a {}×{} block", c.tm, c.tn, c.bm, c.bn));
        }
        if !c.pad.is_multiple_of(8) || c.group == 0 || !matches!(c.wg, 128 | 256 | 512) {
            return bad(format!(
                "padding {} (a multiple of 8), group {} (≥ 1), {} invocations (128, 256 or 512)",
                c.pad, c.group, c.wg
            ));
        }
        for (rows, what) in [(c.bm, "A"), (c.bn, "B")] {
            let vec4s = rows * c.bk / 4;
            if !vec4s.is_multiple_of(c.wg) || !matches!(vec4s / c.wg, 1 | 2 | 4 | 6 | 8) {
                return bad(format!("{what}'s {rows}×{} slice: 1, 2, 4, 6 or 8 whole vec4 loads per invocation", c.bk));
            }
        }
        let stage = if tensor_cores { STAGE_COOP } else { STAGE_PORTABLE };
        let a = if a_t { c.bk * (c.bm + c.pad) / 4 } else { c.bm * (c.bk + c.pad) / 4 };
        let b = if b_t { c.bn * (c.bk + c.pad) / 4 } else { c.bk * (c.bn + c.pad) / 4 };
        if a > stage || b > stage {
            return bad(format!("staged slices of {a} and {b} vec4s; this variant holds {stage} each"));
        }
        Ok(())
    }

    /// Whether the tensor-core path runs every block of an m × n output with this shape: a
    /// block not wholly inside the output stores through one edge tile per subgroup, for which
    /// workgroup memory holds 8, so 512-invocation blocks (16 subgroups of 32) need every block
    /// inside (there the kernel takes the portable path for such a block).
    pub fn covers(&self, m: usize, n: usize) -> bool {
        self.wg <= 256
            || (m.is_multiple_of(self.bm as usize) && n.is_multiple_of(self.bn as usize) && n.is_multiple_of(4))
    }

    /// The block shapes the exact kernels have been run with on tensor cores (the tables' choices
    /// and the tests': 32-deep slices, 4×4 tiles a subgroup, 128 or 256 invocations); others stay
    /// on the full core until they have.
    fn tested_exact_tc(&self) -> bool {
        self.bk == 32 && self.tm == 4 && matches!(self.tn, 3 | 4) && matches!(self.wg, 128 | 256)
    }

    /// Tensor-core tile groups of a block (each one subgroup's share).
    pub fn groups(&self) -> u32 {
        (self.bm / (16 * self.tm)) * (self.bn / (16 * self.tn))
    }

    /// Whether the exact tensor-core kernels (`linear::gemm16_tc`, `gemm16_rope_qkv_tc`) run an
    /// m × n × k product of orientation (`a_t`, `b_t`) split into `parts` with this shape on
    /// `gpu`: their tensor-core form selected, an X·Wᵀ product (`!a_t && b_t`) whole, every
    /// block inside the output, whole contraction steps, and the workgroup's subgroups one per
    /// tile group (a subgroup size the adapter fixes), with a block shape they have run with on
    /// tensor cores (32-deep slices, 4×4 tiles, 128 or 256 invocations). Other orientations and
    /// split products compute right on those kernels too, but measured faster on the full core's
    /// loop (H100, BENCHMARKS.md §1). The fused SwiGLU product (a column map the exact form does not have)
    /// runs on the full core whatever this says. [`EXACT_TC_ENV`]` = 0` says no.
    #[allow(clippy::too_many_arguments)]
    pub fn exact_tc(&self, gpu: &Gpu, m: usize, n: usize, k: usize, a_t: bool, b_t: bool, parts: usize) -> bool {
        let r = gpu.report();
        let (bm, bn, bk) = (self.bm as usize, self.bn as usize, self.bk as usize);
        let sg = r.subgroup_min_size;
        exact_tc_allowed()
            && sg != 0
            && sg == r.subgroup_max_size
            && self.wg == sg * self.groups()
            && self.tested_exact_tc()
            && m.is_multiple_of(bm)
            && n.is_multiple_of(bn)
            && k.is_multiple_of(bk)
            && !a_t
            && b_t
            && parts <= 1
            && [&crate::linear::gemm16_tc::KERNEL, &crate::linear::gemm16_rope_qkv_tc::KERNEL]
                .into_iter()
                .all(|kernel| crate::ops::on_tensor_cores(gpu, kernel))
    }

    fn label(&self) -> String {
        format!(
            "{}x{}x{} t{}x{} p{}{}{}{}",
            self.bm,
            self.bn,
            self.bk,
            self.tm,
            self.tn,
            self.pad,
            if self.prefetch { " pf" } else { "" },
            if self.group > 1 { format!(" g{}", self.group) } else { String::new() },
            if self.wg != 256 { format!(" w{}", self.wg) } else { String::new() }
        )
    }
}

/// Which core runs a product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Core {
    /// The f32 SIMT product (`linear::matmul` and friends; `linear::matmul_at_split` and
    /// `matmul_parts_add` for weight gradients with a small output).
    Simt,
    /// f16 operands (`linear::gemm16`, `linear::gemm16_residual`), on tensor cores when
    /// `tensor_cores`.
    F16 {
        /// Whether the tensor-core variant runs.
        tensor_cores: bool,
        /// The block shape.
        config: F16Config,
    },
    /// f32 operands scaled and split into hi + lo f16 halves, three products on tensor cores
    /// (`linear::precise_*`, `linear::*_pres*`).
    Split,
}

/// A product made ready for one adapter: see the [module docs](self).
#[derive(Clone, Debug)]
pub struct GemmPlan {
    gemm: Gemm,
    core: Core,
    /// Parts of the contraction (1: no split) and the contraction length of each.
    parts: usize,
    chunk: usize,
    /// Scratch floats (split parts, an accumulate's temporary).
    scratch: usize,
    /// F16x4 elements per operand half of the split core.
    halves: usize,
    /// The f16 product runs on the exact tensor-core kernels ([`F16Config::exact_tc`]).
    exact_tc: bool,
}

fn u32_of(v: usize, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::LengthMismatch { detail: format!("gemm: {what} = {v} is over u32::MAX") })
}

impl GemmPlan {
    fn new(gpu: &Gpu, gemm: Gemm, forced: Option<(F16Config, usize)>) -> Result<GemmPlan> {
        let Gemm { m, n, k, a, b, a_t, b_t, epilogue, .. } = gemm;
        for (v, what) in [(m, "m"), (n, "n"), (k, "k"), (m * n, "m·n"), (m.max(n) * k, "max(m, n)·k")] {
            u32_of(v, what)?;
        }
        let precision = gemm.resolved_precision();
        let unsupported = |why: &str| Err(Error::BadArguments { kernel: "gemm".into(), detail: why.to_string() });
        let mut plan = GemmPlan { gemm, core: Core::Simt, parts: 1, chunk: k, scratch: 0, halves: 0, exact_tc: false };
        match precision {
            Precision::F16 => {
                if a != Elem::F16 || b != Elem::F16 {
                    return unsupported(
                        "Precision::F16 takes f16 operands (the f16x4 row layout): cast f32 ones with ops::cast_f16x4",
                    );
                }
                let tensor_cores = crate::ops::on_tensor_cores(gpu, &crate::linear::gemm16::KERNEL);
                let (config, parts) = match forced {
                    Some(f) => f,
                    None => {
                        let table = tuned(gpu, &gemm).unwrap_or_else(|| {
                            let c = F16Config::default_for(tensor_cores);
                            (c, default_parts(m, n, k, &c, tensor_cores))
                        });
                        #[cfg(not(target_arch = "wasm32"))]
                        let table = if tensor_cores && autotune::enabled() {
                            autotune::choose(gpu, &gemm, table)
                        } else {
                            table
                        };
                        // The residual epilogue adds once, so its product runs whole whatever
                        // the table or the default chose for the shape.
                        if epilogue == Epilogue::Residual { (table.0, 1) } else { table }
                    }
                };
                config.validate(a_t, b_t, tensor_cores)?;
                if epilogue == Epilogue::Residual && parts > 1 {
                    return unsupported("a residual product is not split along its contraction");
                }
                plan.core = Core::F16 { tensor_cores, config };
                plan.set_parts(parts, config.bk as usize);
                plan.exact_tc = tensor_cores && config.exact_tc(gpu, m, n, k, a_t, b_t, plan.parts);
            }
            Precision::F32 | Precision::F32Simt | Precision::Auto => {
                if forced.is_some() {
                    return unsupported("an f16 block shape for a product that does not run on the f16 core");
                }
                if !matches!(a, Elem::F32 | Elem::Split) || !matches!(b, Elem::F32 | Elem::Split) {
                    return unsupported("f32 precision takes f32 operands (or an f32 matrix's prepared halves)");
                }
                if a_t && b_t {
                    return unsupported("both operands transposed: no f32 core has this orientation");
                }
                let split = precision == Precision::F32
                    && crate::ops::on_tensor_cores(gpu, &crate::linear::matmul_t_pres::KERNEL);
                if split {
                    plan.make_split();
                } else if a == Elem::Split || b == Elem::Split {
                    return unsupported(
                        "prepared halves (Elem::Split) are read by the split core only, which this adapter does not \
                         run for this product (Gemm::plan_split makes its portable form)",
                    );
                } else {
                    plan.core = Core::Simt;
                    if a_t {
                        // The weight-gradient form: split when the output has few 128×64 tiles.
                        let parts = simt_parts(k, n, m);
                        plan.parts = parts;
                        plan.chunk = k.div_ceil(parts);
                        if parts > 1 {
                            plan.scratch = parts * m * n;
                        }
                    } else if !b_t && epilogue == Epilogue::Accumulate {
                        plan.scratch = m * n;
                    }
                }
            }
        }
        Ok(plan)
    }

    /// The scaled split core for this (f32) product.
    fn make_split(&mut self) {
        let Gemm { m, n, k, a_t, .. } = self.gemm;
        self.core = Core::Split;
        self.halves =
            [f16x4_len(m, k), f16x4_len(k, m), f16x4_len(n, k), f16x4_len(k, n)].into_iter().max().unwrap_or(0);
        (self.parts, self.chunk, self.scratch) = (1, k, 0);
        if a_t {
            let (parts, chunk) = split_parts_precise(k, n, m);
            (self.parts, self.chunk, self.scratch) = (parts, chunk, parts * m * n);
        }
    }

    /// Splits the f16 core's contraction into `parts` (each a multiple of `bk` long).
    fn set_parts(&mut self, parts: usize, bk: usize) {
        let k = self.gemm.k;
        let chunk = k.div_ceil(parts.max(1)).next_multiple_of(bk).max(bk);
        let parts = k.div_ceil(chunk).max(1);
        self.parts = parts;
        self.chunk = if parts > 1 { chunk } else { k };
        let (m, n) = (self.gemm.m, self.gemm.n);
        self.scratch = if parts > 1 { parts * m * n } else { 0 };
    }

    /// Whether the product runs on the exact tensor-core kernels ([`F16Config::exact_tc`]).
    pub fn exact_tc(&self) -> bool {
        self.exact_tc
    }

    /// The product this plan is for.
    pub fn gemm(&self) -> &Gemm {
        &self.gemm
    }

    /// The core that runs it.
    pub fn core(&self) -> Core {
        self.core
    }

    /// Parts the contraction is split into (1: none); their sums are added in a fixed order.
    pub fn parts(&self) -> usize {
        self.parts
    }

    /// Scratch floats the product needs in its [`GemmWorkspace`].
    pub fn scratch_len(&self) -> usize {
        self.scratch
    }

    /// [`F16x4`] elements per operand half the split core needs in its [`GemmWorkspace`].
    pub fn halves_len(&self) -> usize {
        self.halves
    }

    /// Dispatches [`gemm`] records for this plan.
    pub fn dispatches(&self) -> usize {
        let e = self.gemm.epilogue;
        match self.core {
            Core::F16 { .. } => {
                1 + usize::from(self.parts > 1) + usize::from(self.parts > 1 && e != Epilogue::Accumulate)
            }
            Core::Split => {
                // The scale words (`precise_take_scales`; a clear where neither operand is
                // prepared), a max and a split for each operand not prepared, the product; a
                // weight gradient's parts sum.
                let own = |x: Elem| 2 * usize::from(x != Elem::Split);
                let base = 2 + own(self.gemm.a) + own(self.gemm.b) + usize::from(self.gemm.a_t);
                base + usize::from(e == Epilogue::Residual) + usize::from(self.gemm.a_t && e == Epilogue::Store)
            }
            Core::Simt => {
                let (a_t, b_t) = (self.gemm.a_t, self.gemm.b_t);
                match (a_t, b_t, e) {
                    (false, false, Epilogue::Accumulate) => 2,
                    (true, _, _) => {
                        let split = self.parts > 1;
                        let extra = match e {
                            Epilogue::Store => usize::from(split),
                            Epilogue::Accumulate => 0,
                            Epilogue::Residual => 1,
                        };
                        1 + usize::from(split) + extra
                    }
                    _ => 1,
                }
            }
        }
    }

    /// One line for logs and benchmarks: the core, its block shape and split.
    pub fn describe(&self) -> String {
        let parts = if self.parts > 1 { format!(", {} parts", self.parts) } else { String::new() };
        match self.core {
            Core::Simt => format!("f32 SIMT{parts}"),
            Core::Split => format!("f32 scaled split on tensor cores{parts}"),
            Core::F16 { tensor_cores, config } => {
                let core = match (tensor_cores, self.exact_tc) {
                    (true, true) => "tensor cores (exact)",
                    (true, false) => "tensor cores",
                    _ => "portable",
                };
                format!("f16 {core} {}{parts}", config.label())
            }
        }
    }
}

/// Parts of a split f16 contraction when no table says: enough for about 264 workgroups (two per
/// multiprocessor of the largest GPUs we measure) when the output has fewer blocks, each part at
/// least 256 long and a multiple of the block's depth, at most 16.
fn default_parts(m: usize, n: usize, k: usize, c: &F16Config, tensor_cores: bool) -> usize {
    if !tensor_cores {
        return 1;
    }
    let blocks = m.div_ceil(c.bm as usize) * n.div_ceil(c.bn as usize);
    264usize.div_ceil(blocks.max(1)).min(k / 256).clamp(1, 16)
}

/// Parts of the SIMT weight gradient (k×n output over `rows`): about 768 workgroups of 128×64
/// when the output has fewer tiles, each part at least 512 rows, at most 16 (measured on an
/// H200 for the trainer's shapes).
fn simt_parts(rows: usize, n: usize, k: usize) -> usize {
    let tiles = n.div_ceil(64) * k.div_ceil(128);
    768usize.div_ceil(tiles.max(1)).min(rows / 512).clamp(1, 16)
}

/// (parts, rows per part) of the split core's weight gradient: about 576 workgroups of 128×128,
/// at most 8 parts, each at least 256 rows and a whole number of its 32-deep steps.
fn split_parts_precise(rows: usize, n: usize, k: usize) -> (usize, usize) {
    let blocks = n.div_ceil(128) * k.div_ceil(128);
    let parts = 576usize.div_ceil(blocks.max(1)).min(8).min(rows / 256).max(1);
    let chunk = rows.div_ceil(parts).next_multiple_of(32).max(1);
    (rows.div_ceil(chunk).max(1), chunk)
}

// ---- Tuning tables ----

/// One line of a tuning table: `core a_t b_t m n k bm bn bk tm tn pad prefetch group wg parts`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Entry {
    a_t: bool,
    b_t: bool,
    m: usize,
    n: usize,
    k: usize,
    config: F16Config,
    parts: usize,
}

/// The environment variable that, set to `0`, keeps every f16 product on the full core
/// (`linear::gemm16` and its fused forms) where the exact tensor-core kernels would run: for
/// measuring one against the other in the same process.
pub const EXACT_TC_ENV: &str = "KERNELS_GEMM_EXACT_TC";

fn exact_tc_allowed() -> bool {
    #[cfg(not(target_arch = "wasm32"))]
    {
        std::env::var(EXACT_TC_ENV).map_or(true, |v| v.trim() != "0")
    }
    #[cfg(target_arch = "wasm32")]
    {
        true
    }
}

/// The environment variable naming a tuning table file to use instead of the committed ones
/// (what `benches/gemm.rs --tune --table PATH` wrote), for measuring a table before committing it,
/// or for forcing block shapes and splits on any adapter (tests of the split paths).
pub const TABLE_ENV: &str = "KERNELS_GEMM_TABLE";

/// The committed tables: (adapter name fragment, text), each measured on its adapter.
const H200_TABLE: &str = include_str!("../tuning/nvidia-h200.txt");
const H100_TABLE: &str = include_str!("../tuning/nvidia-h100.txt");
const TABLES: &[(&str, &str)] = &[("H200", H200_TABLE), ("H100", H100_TABLE)];

fn parse_table(text: &str) -> Vec<Entry> {
    text.lines().filter_map(parse_entry).collect()
}

fn parse_entry(line: &str) -> Option<Entry> {
    let line = line.split('#').next()?.trim();
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() != 16 || f[0] != "f16" {
        return None;
    }
    let u = |i: usize| f[i].parse::<u32>().ok();
    let z = |i: usize| f[i].parse::<usize>().ok();
    let b = |i: usize| match f[i] {
        "1" | "t" => Some(true),
        "0" | "n" => Some(false),
        _ => None,
    };
    Some(Entry {
        a_t: b(1)?,
        b_t: b(2)?,
        m: z(3)?,
        n: z(4)?,
        k: z(5)?,
        config: F16Config {
            bm: u(6)?,
            bn: u(7)?,
            bk: u(8)?,
            tm: u(9)?,
            tn: u(10)?,
            pad: u(11)?,
            prefetch: b(12)?,
            group: u(13)?,
            wg: u(14)?,
        },
        parts: z(15)?,
    })
}

/// The table line of an entry (the format `parse_entry` reads).
fn entry_line(e: &Entry) -> String {
    let c = &e.config;
    format!(
        "f16 {} {} {} {} {} {} {} {} {} {} {} {} {} {} {}",
        u8::from(e.a_t),
        u8::from(e.b_t),
        e.m,
        e.n,
        e.k,
        c.bm,
        c.bn,
        c.bk,
        c.tm,
        c.tn,
        c.pad,
        u8::from(c.prefetch),
        c.group,
        c.wg,
        e.parts
    )
}

/// The tuning table line for a measured choice: what `cargo bench --bench gemm -- --tune` writes.
pub fn table_line(gemm: &Gemm, config: &F16Config, parts: usize) -> String {
    entry_line(&Entry { a_t: gemm.a_t, b_t: gemm.b_t, m: gemm.m, n: gemm.n, k: gemm.k, config: *config, parts })
}

/// The entry of the adapter's table for this product: same orientation, the nearest shape
/// (by the log-distance of m, n, k), its split rescaled to this shape's block count. None
/// without a table; the committed tables apply on tensor cores only (they are measured there),
/// a table named by [`TABLE_ENV`] on any adapter (an empty value is no table; one that cannot be
/// read or has no table lines is reported once on stderr, and the committed tables apply).
fn tuned(gpu: &Gpu, gemm: &Gemm) -> Option<(F16Config, usize)> {
    // A table of one's own (a tuning run's output) in place of the committed ones, on any
    // adapter (its block shapes must suit the variant that runs there).
    #[cfg(not(target_arch = "wasm32"))]
    if let Some(path) = std::env::var_os(TABLE_ENV).filter(|p| !p.is_empty()) {
        match std::fs::read_to_string(&path).map(|text| parse_table(&text)) {
            Ok(entries) if !entries.is_empty() => return nearest(&entries, gemm),
            // A table that cannot be used is said once, and the committed tables apply: a
            // mistyped path should not quietly give every product the untuned default shape.
            read => {
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| {
                    let why = read.err().map_or_else(|| "no table lines in it".to_string(), |e| e.to_string());
                    eprintln!("kernels: {TABLE_ENV}={}: {why}; using the committed tables", path.to_string_lossy());
                });
            }
        }
    }
    if !crate::ops::on_tensor_cores(gpu, &crate::linear::gemm16::KERNEL) {
        return None;
    }
    let name = &gpu.report().name;
    let entries = TABLES.iter().find(|(key, _)| name.contains(key)).map(|(_, text)| parse_table(text))?;
    nearest(&entries, gemm)
}

fn nearest(entries: &[Entry], gemm: &Gemm) -> Option<(F16Config, usize)> {
    let d = |a: usize, b: usize| ((a.max(1) as f64).ln() - (b.max(1) as f64).ln()).abs();
    let best = entries
        .iter()
        .filter(|e| e.a_t == gemm.a_t && e.b_t == gemm.b_t && e.config.covers(gemm.m, gemm.n))
        .min_by(|x, y| {
            let dx = d(x.m, gemm.m) + d(x.n, gemm.n) + d(x.k, gemm.k);
            let dy = d(y.m, gemm.m) + d(y.n, gemm.n) + d(y.k, gemm.k);
            dx.total_cmp(&dy)
        })?;
    // The measured split aimed at filling the GPU: keep the workgroup count, not the part count.
    let c = best.config;
    let blocks = |m: usize, n: usize| m.div_ceil(c.bm as usize) * n.div_ceil(c.bn as usize);
    let target = blocks(best.m, best.n) * best.parts;
    let parts = if best.parts <= 1 {
        1
    } else {
        target.div_ceil(blocks(gemm.m, gemm.n).max(1)).min(gemm.k / (c.bk as usize).max(1)).clamp(1, 16)
    };
    Some((c, parts))
}

/// Opt-in autotuning of the f16 core (native only): with `KERNELS_GEMM_AUTOTUNE=1`, the first
/// plan of a product shape on tensor cores times the table's choice (or the default) against a
/// few others (`CANDIDATES`, each with its split for weight gradients) on random operands of that
/// shape, and keeps the fastest. Choices are cached in the library's cache directory
/// ([`crate::cache_dir`]: `$KERNELS_CACHE_DIR`, else the platform's) in
/// `gemm-<adapter>-<driver>.txt`, the tuning table's format, keyed by adapter, driver and wgpu
/// version (in the file's name and first line); a file that does not parse, or whose first line
/// names another adapter, driver or wgpu, is ignored and rewritten. The file is replaced
/// atomically (a temporary file renamed over it).
#[cfg(not(target_arch = "wasm32"))]
pub mod autotune {
    use super::*;
    use std::sync::Mutex;

    /// The environment switch.
    pub const ENV: &str = "KERNELS_GEMM_AUTOTUNE";

    /// Block shapes tried beside the table's or default choice.
    pub const CANDIDATES: &[F16Config] = &[
        F16Config { bm: 128, bn: 128, bk: 32, tm: 4, tn: 2, pad: 8, prefetch: true, group: 1, wg: 256 },
        F16Config { bm: 128, bn: 256, bk: 32, tm: 4, tn: 4, pad: 8, prefetch: true, group: 8, wg: 256 },
        F16Config { bm: 256, bn: 128, bk: 32, tm: 4, tn: 4, pad: 8, prefetch: true, group: 8, wg: 256 },
        F16Config { bm: 128, bn: 128, bk: 64, tm: 4, tn: 4, pad: 8, prefetch: false, group: 8, wg: 256 },
        F16Config { bm: 128, bn: 256, bk: 32, tm: 4, tn: 2, pad: 8, prefetch: true, group: 4, wg: 512 },
    ];

    /// Whether `KERNELS_GEMM_AUTOTUNE` asks for it (`1`, `true`, `on`).
    pub fn enabled() -> bool {
        std::env::var(ENV).is_ok_and(|v| matches!(v.as_str(), "1" | "true" | "on"))
    }

    /// The cache file for `gpu`.
    pub fn cache_path(gpu: &Gpu) -> Option<std::path::PathBuf> {
        let dir = crate::cache_dir()?;
        let r = gpu.report();
        let clean = |s: &str| s.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect::<String>();
        Some(dir.join(format!("gemm-{}-{}.txt", clean(&r.name), clean(&r.driver))))
    }

    /// The first line of `gpu`'s cache file: adapter, backend, driver and wgpu version.
    pub fn header(gpu: &Gpu) -> String {
        let r = gpu.report();
        format!("# kernels gemm autotune: {} | {} | {} | wgpu 30", r.name, r.backend, r.driver)
    }

    /// Parses a cache file: its entries if its first line is `header`.
    pub(crate) fn parse_cache(text: &str, header: &str) -> Vec<Entry> {
        let mut lines = text.lines();
        if lines.next() != Some(header) {
            return Vec::new();
        }
        lines.filter_map(parse_entry).collect()
    }

    static CACHE: Mutex<Option<(String, Vec<Entry>)>> = Mutex::new(None);

    /// The cached choice for `gemm`, else the fastest of `first` and [`CANDIDATES`] (measured now
    /// and cached). A measurement that fails keeps `first`.
    pub fn choose(gpu: &Gpu, gemm: &Gemm, first: (F16Config, usize)) -> (F16Config, usize) {
        choose_in(gpu, gemm, first, cache_path(gpu).as_deref())
    }

    /// [`choose`] with the cache file given (`None`: measure, cache in memory only).
    pub fn choose_in(
        gpu: &Gpu,
        gemm: &Gemm,
        first: (F16Config, usize),
        path: Option<&std::path::Path>,
    ) -> (F16Config, usize) {
        let head = header(gpu);
        let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
        let key = format!("{head}|{}", path.map(|p| p.display().to_string()).unwrap_or_default());
        if cache.as_ref().is_none_or(|(h, _)| *h != key) {
            let text = path.and_then(|p| std::fs::read_to_string(p).ok()).unwrap_or_default();
            *cache = Some((key, parse_cache(&text, &head)));
        }
        let entries = &mut cache.as_mut().expect("set above").1;
        let same = |e: &&Entry| (e.a_t, e.b_t, e.m, e.n, e.k) == (gemm.a_t, gemm.b_t, gemm.m, gemm.n, gemm.k);
        if let Some(e) = entries.iter().find(same) {
            return (e.config, e.parts);
        }
        let best = measure_candidates(gpu, gemm, first).unwrap_or(first);
        entries.push(Entry {
            a_t: gemm.a_t,
            b_t: gemm.b_t,
            m: gemm.m,
            n: gemm.n,
            k: gemm.k,
            config: best.0,
            parts: best.1,
        });
        if let Some(p) = path {
            let mut text = head + "\n";
            for e in entries.iter() {
                text.push_str(&entry_line(e));
                text.push('\n');
            }
            let _ = crate::write_atomically(p, text.as_bytes());
        }
        best
    }

    /// GPU time of each candidate (median of 5 after 3 warm-ups) on random operands: the fastest.
    fn measure_candidates(gpu: &Gpu, g0: &Gemm, first: (F16Config, usize)) -> Result<(F16Config, usize)> {
        let Gemm { m, n, k, a_t, b_t, .. } = *g0;
        let (ar, ac) = if a_t { (k, m) } else { (m, k) };
        let (br, bc) = if b_t { (n, k) } else { (k, n) };
        let one = [crate::f16::from_f32(0.5); 4];
        let a = gpu.filled(f16x4_len(ar, ac), one)?;
        let b = gpu.filled(f16x4_len(br, bc), one)?;
        let mut c = gpu.zeros::<f32>(m * n)?;
        let mut tries = vec![first];
        for cand in CANDIDATES {
            let parts = default_parts(m, n, k, cand, true);
            if cand.validate(a_t, b_t, true).is_ok() && cand.covers(m, n) && !tries.iter().any(|t| t.0 == *cand) {
                tries.push((*cand, if a_t { parts } else { 1 }));
            }
        }
        let mut best: Option<(f64, (F16Config, usize))> = None;
        for (config, parts) in tries {
            let g = Gemm { epilogue: Epilogue::Store, ..*g0 };
            let plan = GemmPlan::new(gpu, g, Some((config, parts)))?;
            let mut ws = GemmWorkspace::new(gpu, &[&plan])?;
            let (am, bm) = (Mat::f16(&a, ar, ac), Mat::f16(&b, br, bc));
            let (am, bm) = (if a_t { am.t() } else { am }, if b_t { bm.t() } else { bm });
            let per = plan.dispatches();
            let t = match gpu.profiled_batch((8 * per) as u32) {
                Ok(batch) => {
                    for _ in 0..8 {
                        gemm(&batch, &plan, am, bm, None, &mut c, &mut ws)?;
                    }
                    let prof = batch.submit_profiled()?;
                    let mut v: Vec<f64> = prof
                        .dispatches
                        .chunks(per.max(1))
                        .skip(3)
                        .map(|d| d.iter().map(|x| x.end_ns - x.start_ns).sum())
                        .collect();
                    v.sort_by(f64::total_cmp);
                    v.get(v.len() / 2).copied().unwrap_or(f64::INFINITY)
                }
                // No timestamps: wall time of 5 products after a warm-up.
                Err(_) => {
                    gemm(gpu, &plan, am, bm, None, &mut c, &mut ws)?;
                    gpu.wait()?;
                    let start = std::time::Instant::now();
                    let batch = gpu.batch();
                    for _ in 0..5 {
                        gemm(&batch, &plan, am, bm, None, &mut c, &mut ws)?;
                    }
                    batch.submit()?;
                    gpu.wait()?;
                    start.elapsed().as_secs_f64() * 1e9 / 5.0
                }
            };
            if best.is_none_or(|b| t < b.0) {
                best = Some((t, (config, parts)));
            }
        }
        Ok(best.map(|b| b.1).unwrap_or(first))
    }
}

// ---- Operands split ahead ----

/// An f32 matrix's scaled f16 halves made once and read by many products: an operand of the
/// split core ([`Mat::split`]), e.g. a weight split when the optimizer writes it and read by its
/// forward and input-gradient products, or an output gradient split once for its input- and
/// weight-gradient products, each of which then skips that operand's max and split passes. The
/// halves are what the product would make itself (the same kernels, the same scale), so its
/// result is the same bits.
///
/// The scale word lives outside, in a `Buffer<u32>` of one word per operand shared by any
/// number of them: [`Halves::clear_scales`] zeroes the words (one dispatch for all), then
/// [`Halves::split`] folds the matrix's largest magnitude into its word and splits it (two
/// dispatches), or [`Halves::split_scaled`] only splits, when the word already holds the bits of
/// the matrix's largest finite magnitude (folded in by whoever wrote the matrix).
#[derive(Debug)]
pub struct Halves {
    hi: Buffer<F16x4>,
    lo: Buffer<F16x4>,
    rows: usize,
    cols: usize,
}

impl Halves {
    /// Halves for an f32 `rows × cols` matrix (f16x4 rows, zeros until split).
    pub fn new(gpu: &Gpu, rows: usize, cols: usize) -> Result<Halves> {
        u32_of(rows * cols, "rows·cols")?;
        let len = f16x4_len(rows, cols).max(1);
        Ok(Halves { hi: gpu.zeros(len)?, lo: gpu.zeros(len)?, rows, cols })
    }

    /// Rows of the matrix.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns of the matrix.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Makes these halves those of a `rows × cols` matrix (zeros or stale values until split),
    /// reusing the buffers: one set of halves serves matrices of several shapes in turn. An error
    /// when the buffers are too small.
    pub fn set_shape(&mut self, rows: usize, cols: usize) -> Result<()> {
        u32_of(rows * cols, "rows·cols")?;
        let need = f16x4_len(rows, cols);
        if need > self.hi.len() {
            return Err(len_error("the halves of the reshaped matrix", need, self.hi.len()));
        }
        (self.rows, self.cols) = (rows, cols);
        Ok(())
    }

    /// Records zeroing every scale word of `scales` (before [`Halves::split`] or a kernel folds
    /// maxima into them).
    pub fn clear_scales(rec: impl Record + Copy, scales: &mut Buffer<u32>) -> Result<()> {
        let n = u32_of(scales.len(), "scale words")?;
        crate::linear::precise_clear(rec, scales, n)
    }

    /// Records folding max |x| into `scales[slot]` (cleared before) and splitting `x` (`rows ×
    /// cols` f32, row-major) by that word into the halves.
    pub fn split(
        &mut self,
        rec: impl Record + Copy,
        x: &Buffer<f32>,
        scales: &mut Buffer<u32>,
        slot: usize,
    ) -> Result<()> {
        self.check(x, scales, slot)?;
        let p = crate::linear::precise_absmax::AbsParams::new(
            u32_of(self.rows * self.cols, "rows·cols")?,
            u32_of(slot, "slot")?,
        );
        crate::linear::precise_absmax(rec, x, scales, p)?;
        self.split_scaled(rec, x, scales, slot)
    }

    /// Records splitting `x` by the scale word `scales[slot]`, which must hold the bits of
    /// max |x| over its finite values (as `precise_absmax` leaves them).
    pub fn split_scaled(
        &mut self,
        rec: impl Record + Copy,
        x: &Buffer<f32>,
        scales: &Buffer<u32>,
        slot: usize,
    ) -> Result<()> {
        self.check(x, scales, slot)?;
        let p = crate::linear::HalvesParams::new(
            u32_of(self.rows, "rows")?,
            u32_of(self.cols, "cols")?,
            u32_of(slot, "slot")?,
        );
        crate::linear::precise_split(rec, x, scales, &mut self.hi, &mut self.lo, p)
    }

    fn check(&self, x: &Buffer<f32>, scales: &Buffer<u32>, slot: usize) -> Result<()> {
        if x.len() < self.rows * self.cols {
            return Err(len_error("the split matrix", self.rows * self.cols, x.len()));
        }
        if slot >= scales.len() {
            return Err(len_error("the scale word's slot", slot + 1, scales.len()));
        }
        Ok(())
    }
}

// ---- The workspace ----

/// Scratch for products: split parts and temporaries, and the split core's operand halves.
/// One workspace serves any number of products recorded in order (sized by [`GemmWorkspace::new`]
/// for the largest of its plans).
#[derive(Debug)]
pub struct GemmWorkspace {
    scratch: Buffer<f32>,
    a_hi: Buffer<F16x4>,
    a_lo: Buffer<F16x4>,
    b_hi: Buffer<F16x4>,
    b_lo: Buffer<F16x4>,
    amax: Buffer<u32>,
    scratch_len: usize,
    halves_len: usize,
}

impl GemmWorkspace {
    /// A workspace for every product of `plans`.
    pub fn new(gpu: &Gpu, plans: &[&GemmPlan]) -> Result<Self> {
        let scratch = plans.iter().map(|p| p.scratch).max().unwrap_or(0);
        let halves = plans.iter().map(|p| p.halves).max().unwrap_or(0);
        GemmWorkspace::with_capacity(gpu, scratch, halves)
    }

    /// A workspace of `scratch` floats and operand halves of `halves` [`F16x4`] elements.
    pub fn with_capacity(gpu: &Gpu, scratch: usize, halves: usize) -> Result<Self> {
        Ok(GemmWorkspace {
            scratch: gpu.zeros(scratch.max(1))?,
            a_hi: gpu.zeros(halves.max(1))?,
            a_lo: gpu.zeros(halves.max(1))?,
            b_hi: gpu.zeros(halves.max(1))?,
            b_lo: gpu.zeros(halves.max(1))?,
            amax: gpu.zeros(2)?,
            scratch_len: scratch,
            halves_len: halves,
        })
    }

    /// Scratch floats it holds.
    pub fn scratch_len(&self) -> usize {
        self.scratch_len
    }

    /// [`F16x4`] elements per operand half it holds.
    pub fn halves_len(&self) -> usize {
        self.halves_len
    }
}

// ---- Recording ----

fn len_error(what: &str, need: usize, have: usize) -> Error {
    Error::LengthMismatch { detail: format!("gemm: {what} needs {need} elements, its buffer holds {have}") }
}

/// Records `C (=|+=) op(A)·op(B) (+ R)` as `plan` says: `a` and `b` must be what the plan was
/// made for (element types, shapes, orientations), `residual` is given exactly for
/// [`Epilogue::Residual`], `c` is `[m, n]` f32 row-major, and `ws` holds at least the plan's
/// scratch and halves. Every length is checked before anything is recorded.
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    rec: impl Record + Copy,
    plan: &GemmPlan,
    a: Mat<'_>,
    b: Mat<'_>,
    residual: Option<&Buffer<f32>>,
    c: &mut Buffer<f32>,
    ws: &mut GemmWorkspace,
) -> Result<()> {
    check_operands(plan, &a, &b)?;
    let g = plan.gemm;
    let (m, n) = (g.m, g.n);
    if c.len() < m * n {
        return Err(len_error("C", m * n, c.len()));
    }
    match (g.epilogue, residual) {
        (Epilogue::Residual, Some(r)) if r.len() < m * n => return Err(len_error("R", m * n, r.len())),
        (Epilogue::Residual, None) => {
            return Err(Error::BadArguments { kernel: "gemm".into(), detail: "Epilogue::Residual needs R".into() });
        }
        (Epilogue::Store | Epilogue::Accumulate, Some(_)) => {
            return Err(Error::BadArguments {
                kernel: "gemm".into(),
                detail: "R is given but the epilogue is not Epilogue::Residual".into(),
            });
        }
        _ => {}
    }
    if ws.scratch_len < plan.scratch || ws.halves_len < plan.halves {
        return Err(Error::LengthMismatch {
            detail: format!(
                "gemm: the plan needs a workspace of {} scratch floats and {} halves; this one holds {} and {} \
                 (size it with GemmWorkspace::new over every plan it serves)",
                plan.scratch, plan.halves, ws.scratch_len, ws.halves_len
            ),
        });
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    match plan.core {
        Core::F16 { tensor_cores, config } => {
            record_f16(rec, plan, tensor_cores, &config, a, b, residual, F16Out::C { c, ws })
        }
        Core::Split => record_split(rec, plan, a, b, residual, c, ws),
        Core::Simt => record_simt(rec, plan, a, b, residual, c, ws),
    }
}

/// The operands against the plan: the product they make and their buffers' lengths.
fn check_operands(plan: &GemmPlan, a: &Mat<'_>, b: &Mat<'_>) -> Result<()> {
    let g = plan.gemm;
    let want = Gemm { epilogue: g.epilogue, precision: g.precision, ..Gemm::of(a, b)? };
    if want != g {
        return Err(Error::BadArguments {
            kernel: "gemm".into(),
            detail: format!("the operands make {want:?}, the plan is for {g:?}"),
        });
    }
    for (mat, what) in [(a, "A"), (b, "B")] {
        if mat.buffer_len() < mat.stored_len() {
            return Err(len_error(what, mat.stored_len(), mat.buffer_len()));
        }
    }
    for (mat, what) in [(a, "A's scale word's slot"), (b, "B's scale word's slot")] {
        if let Data::Split { scales, slot, .. } = mat.data
            && slot >= scales.len()
        {
            return Err(len_error(what, slot + 1, scales.len()));
        }
    }
    Ok(())
}

/// Where one product's contraction parts lie, for [`add_parts`]: `parts` parts of `len`
/// elements each, from element `src` of the parts buffer, to be added into elements
/// `dst .. dst + len` of the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartsSum {
    /// The first output element.
    pub dst: usize,
    /// Elements of the output (the product's m·n).
    pub len: usize,
    /// Parts (the plan's [`GemmPlan::parts`]).
    pub parts: usize,
    /// Where the first part starts in the parts buffer.
    pub src: usize,
}

impl GemmPlan {
    /// Whether the product can leave its contraction's parts for [`add_parts`]
    /// ([`gemm_parts`]): the f16 core, split into parts, accumulating into C.
    pub fn defers_parts(&self) -> bool {
        matches!(self.core, Core::F16 { .. }) && self.parts > 1 && self.gemm.epilogue == Epilogue::Accumulate
    }
}

/// Records the product of a plan that [`GemmPlan::defers_parts`] with its contraction's parts
/// written into `parts` (`[parts, m·n]`, overwritten: the plan's [`GemmPlan::scratch_len`]
/// floats) instead of added into C: one dispatch. [`add_parts`] adds them, with up to three other
/// products', in one more; together they give the bits [`gemm`] gives.
pub fn gemm_parts(
    rec: impl Record + Copy,
    plan: &GemmPlan,
    a: Mat<'_>,
    b: Mat<'_>,
    parts: &mut Buffer<f32>,
) -> Result<()> {
    let Core::F16 { tensor_cores, config } = plan.core else {
        return Err(Error::BadArguments { kernel: "gemm_parts".into(), detail: "a product off the f16 core".into() });
    };
    if !plan.defers_parts() {
        return Err(Error::BadArguments {
            kernel: "gemm_parts".into(),
            detail: format!(
                "a plan of {} parts with {:?} (it takes a split that accumulates)",
                plan.parts, plan.gemm.epilogue
            ),
        });
    }
    check_operands(plan, &a, &b)?;
    if parts.len() < plan.scratch {
        return Err(len_error("the parts", plan.scratch, parts.len()));
    }
    record_f16(rec, plan, tensor_cores, &config, a, b, None, F16Out::Parts(parts))
}

/// Adds the parts of up to four products (each left by [`gemm_parts`]; `sums` says where) into
/// `c` in one dispatch (`linear::matmul_parts_add4`): `c[s.dst + i] += Σ_p parts[s.src + p·s.len
/// + i]` for each `s`, i < s.len, the parts in increasing order. The outputs may not overlap and
/// must lie inside `c`, the parts inside `parts`; elements of `c` outside them are untouched.
pub fn add_parts(rec: impl Record + Copy, parts: &Buffer<f32>, sums: &[PartsSum], c: &mut Buffer<f32>) -> Result<()> {
    use crate::linear::matmul_parts_add4;
    if sums.len() > 4 {
        return Err(Error::BadArguments {
            kernel: "add_parts".into(),
            detail: format!("{} products; one dispatch adds at most 4", sums.len()),
        });
    }
    let mut seg = [[0u32; 4]; 4];
    let mut span = 0usize;
    for (i, s) in sums.iter().enumerate() {
        let end = s.dst.checked_add(s.len).filter(|&e| e <= c.len());
        let src_end = s.len.checked_mul(s.parts).and_then(|n| n.checked_add(s.src)).filter(|&e| e <= parts.len());
        let (Some(end), Some(_)) = (end, src_end) else {
            return Err(Error::LengthMismatch {
                detail: format!(
                    "add_parts: {s:?} reaches past the output ({} elements) or the parts ({})",
                    c.len(),
                    parts.len()
                ),
            });
        };
        if sums[..i].iter().any(|o| o.dst < end && s.dst < o.dst + o.len) {
            return Err(Error::BadArguments {
                kernel: "add_parts".into(),
                detail: format!("{s:?} overlaps another output"),
            });
        }
        seg[i] = [u32_of(s.dst, "dst")?, u32_of(s.len, "len")?, u32_of(s.parts, "parts")?, u32_of(s.src, "src")?];
        span = span.max(end);
    }
    if span == 0 {
        return Ok(());
    }
    matmul_parts_add4(rec, parts, c, matmul_parts_add4::Sums::new(seg, u32_of(span, "span")?))
}

/// Where the f16 core's product goes: C (through the workspace's scratch where it is split);
/// for [`gemm_parts`], its parts left in a buffer; for [`gemm_swiglu`] and [`gemm_rope_qkv`], C
/// and what their epilogues make of it.
enum F16Out<'a> {
    C {
        c: &'a mut Buffer<f32>,
        ws: &'a mut GemmWorkspace,
    },
    Parts(&'a mut Buffer<f32>),
    SwiGlu {
        c: &'a mut Buffer<f32>,
        h: &'a mut Buffer<F16x4>,
    },
    Rope {
        c: &'a mut Buffer<f32>,
        q: &'a mut Buffer<F16x4>,
        k: &'a mut Buffer<F16x4>,
        v: &'a mut Buffer<F16x4>,
        rope: RopeQkv,
    },
}

/// The columns of a tile of `gemm16_swiglu`'s product order (`G_NMAP`): gate and up tiles of
/// this many columns alternate, so the fused product's N must be a multiple of twice it.
const SWIGLU_TILE: u32 = 16;

// ---- Fused epilogues ----

impl GemmPlan {
    /// Whether the product can run with a fused epilogue ([`gemm_swiglu`], [`gemm_rope_qkv`]):
    /// the f16 core, its contraction whole, C overwritten.
    pub fn fuses_epilogue(&self) -> bool {
        matches!(self.core, Core::F16 { .. }) && self.parts == 1 && self.gemm.epilogue == Epilogue::Store
    }

    /// Whether [`gemm_swiglu`] takes this plan: it [`GemmPlan::fuses_epilogue`] and its n is a
    /// multiple of 32.
    pub fn fuses_swiglu(&self) -> bool {
        self.fuses_epilogue() && swiglu_mismatch(self.gemm.n).is_none()
    }

    /// Whether [`gemm_rope_qkv`] takes this plan for `rope`: it [`GemmPlan::fuses_epilogue`],
    /// `rope` makes its shape and the head dim is a multiple of 4.
    pub fn fuses_rope(&self, rope: &RopeQkv) -> bool {
        self.fuses_epilogue() && rope.mismatch(self.gemm.m, self.gemm.n).is_none()
    }

    /// The f16 core's variant and block shape, or why the plan takes no fused epilogue.
    fn check_fused(&self, what: &str) -> Result<(bool, F16Config)> {
        match self.core {
            Core::F16 { tensor_cores, config } if self.fuses_epilogue() => Ok((tensor_cores, config)),
            _ => Err(Error::BadArguments {
                kernel: what.into(),
                detail: format!(
                    "the plan is {} with {:?}: a fused epilogue takes the f16 core, its contraction whole (1 \
                     part), Epilogue::Store",
                    self.describe(),
                    self.gemm.epilogue
                ),
            }),
        }
    }
}

/// Why a product of n columns is no fused gate/up product for [`gemm_swiglu`], if it is not.
fn swiglu_mismatch(n: usize) -> Option<String> {
    (!n.is_multiple_of(2 * SWIGLU_TILE as usize))
        .then(|| format!("n = {n}: the fused gate/up product's columns must be a multiple of 32"))
}

/// Records `C = op(A)·op(B)` over a fused gate/up weight (C's n = 2·F columns: the gate's F,
/// then the up's F) and, in the same dispatch, SwiGLU of it: `h[r, j] = silu(C[r, j]) · C[r, F +
/// j]` rounded to f16 into `h` (`[m, F]`, the f16x4 row layout) — the bits
/// `activation::swiglu_gu_f16` makes of C (`linear::gemm16_swiglu`). C is written too (the
/// backward reads it). The plan must [`GemmPlan::fuses_swiglu`].
pub fn gemm_swiglu(
    rec: impl Record + Copy,
    plan: &GemmPlan,
    a: Mat<'_>,
    b: Mat<'_>,
    c: &mut Buffer<f32>,
    h: &mut Buffer<F16x4>,
) -> Result<()> {
    let (tensor_cores, config) = plan.check_fused("gemm_swiglu")?;
    check_operands(plan, &a, &b)?;
    let (m, n) = (plan.gemm.m, plan.gemm.n);
    if let Some(detail) = swiglu_mismatch(n) {
        return Err(Error::BadArguments { kernel: "gemm_swiglu".into(), detail });
    }
    if c.len() < m * n {
        return Err(len_error("C", m * n, c.len()));
    }
    if h.len() < f16x4_len(m, n / 2) {
        return Err(len_error("H", f16x4_len(m, n / 2), h.len()));
    }
    if m == 0 {
        return Ok(());
    }
    record_f16(rec, plan, tensor_cores, &config, a, b, None, F16Out::SwiGlu { c, h })
}

/// The rotary embedding of [`gemm_rope_qkv`]'s fused attention projection: `batch` sequences of
/// `seq` rows, `heads` query and `kv_heads` key/value heads of `head_dim` columns, positions
/// from `pos_offset`, frequencies from `base` (as `rope::rope_qkv_f16` takes them).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeQkv {
    /// Sequences.
    pub batch: usize,
    /// Rows per sequence.
    pub seq: usize,
    /// Query heads.
    pub heads: usize,
    /// Key and value heads.
    pub kv_heads: usize,
    /// Columns per head (a multiple of 4 here).
    pub head_dim: usize,
    /// The position of each sequence's first row.
    pub pos_offset: usize,
    /// The rotary base (10000 in LLaMA).
    pub base: f32,
}

impl RopeQkv {
    /// Why an [m, n] product is not this rotation's fused projection, if it is not.
    fn mismatch(&self, m: usize, n: usize) -> Option<String> {
        let RopeQkv { batch, seq, heads, kv_heads, head_dim, .. } = *self;
        if head_dim == 0 || !head_dim.is_multiple_of(4) {
            return Some(format!("head_dim = {head_dim}: the fused rotation takes a multiple of 4"));
        }
        let (rows, cols) = (batch * seq, (heads + 2 * kv_heads) * head_dim);
        (rows != m || cols != n)
            .then(|| format!("{self:?} makes rows of {cols} columns and {rows} rows; the product is [{m}, {n}]"))
    }
}

/// Records `C = op(A)·op(B)` over a fused attention projection (C's n = (heads + 2·kv_heads)·
/// head_dim columns: Q's, then K's, then V's; m = batch·seq rows) and, in the same dispatch,
/// Q and K rotated and V as they are, rounded to f16 into `q` (`[m, heads·head_dim]`), `k` and
/// `v` (`[m, kv_heads·head_dim]`, the f16x4 row layout) — the bits `rope::rope_qkv_f16` makes
/// of C (`linear::gemm16_rope_qkv`). C is written too. The plan must
/// [`GemmPlan::fuses_rope`] for `rope`.
#[allow(clippy::too_many_arguments)]
pub fn gemm_rope_qkv(
    rec: impl Record + Copy,
    plan: &GemmPlan,
    a: Mat<'_>,
    b: Mat<'_>,
    c: &mut Buffer<f32>,
    rope: RopeQkv,
    q: &mut Buffer<F16x4>,
    k: &mut Buffer<F16x4>,
    v: &mut Buffer<F16x4>,
) -> Result<()> {
    let (tensor_cores, config) = plan.check_fused("gemm_rope_qkv")?;
    check_operands(plan, &a, &b)?;
    let (m, n) = (plan.gemm.m, plan.gemm.n);
    if let Some(detail) = rope.mismatch(m, n) {
        return Err(Error::BadArguments { kernel: "gemm_rope_qkv".into(), detail });
    }
    let RopeQkv { heads, kv_heads, head_dim, .. } = rope;
    if c.len() < m * n {
        return Err(len_error("C", m * n, c.len()));
    }
    for (buf, cols, what) in
        [(&*q, heads * head_dim, "Q"), (&*k, kv_heads * head_dim, "K"), (&*v, kv_heads * head_dim, "V")]
    {
        if buf.len() < f16x4_len(m, cols) {
            return Err(len_error(what, f16x4_len(m, cols), buf.len()));
        }
    }
    if m == 0 {
        return Ok(());
    }
    record_f16(rec, plan, tensor_cores, &config, a, b, None, F16Out::Rope { c, q, k, v, rope })
}

fn f16_of<'a>(mat: &Mat<'a>) -> Result<&'a Buffer<F16x4>> {
    match mat.data {
        Data::F16(b) => Ok(b),
        Data::F32(_) | Data::Split { .. } => {
            Err(Error::BadArguments { kernel: "gemm".into(), detail: "an f32 operand on the f16 core".into() })
        }
    }
}

fn f32_of<'a>(mat: &Mat<'a>) -> Result<&'a Buffer<f32>> {
    match mat.data {
        Data::F32(b) => Ok(b),
        Data::F16(_) => {
            Err(Error::BadArguments { kernel: "gemm".into(), detail: "an f16 operand on an f32 core".into() })
        }
        Data::Split { .. } => Err(Error::BadArguments {
            kernel: "gemm".into(),
            detail: "prepared halves where this core reads the f32 matrix".into(),
        }),
    }
}

#[allow(clippy::too_many_arguments)]
fn record_f16(
    rec: impl Record + Copy,
    plan: &GemmPlan,
    tensor_cores: bool,
    cfg: &F16Config,
    a: Mat<'_>,
    b: Mat<'_>,
    residual: Option<&Buffer<f32>>,
    out: F16Out<'_>,
) -> Result<()> {
    use crate::linear::{gemm16, gemm16_residual, gemm16_rope_qkv, gemm16_swiglu, matmul_parts_add};
    use crate::linear::{gemm16_rope_qkv_tc, gemm16_tc};
    let g = plan.gemm;
    let (m, n, k) = (u32_of(g.m, "m")?, u32_of(g.n, "n")?, u32_of(g.k, "k")?);
    let blocks = g.m.div_ceil(cfg.bm as usize) * g.n.div_ceil(cfg.bn as usize);
    let tiles = u32_of(blocks * plan.parts, "workgroups")?;
    let (pa, pb) = (f16_of(&a)?, f16_of(&b)?);
    let (parts, chunk) = (u32_of(plan.parts, "parts")?, u32_of(plan.chunk, "chunk")?);
    let p = gemm16::GemmParams::new(m, n, k, parts, chunk, tiles);
    // The shape compiled in where tensor cores run (one pipeline per shape), and with it the
    // split, for a constant trip count (`G_PARTS`); the products with an epilogue run unsplit.
    let shape = |d: u32| (tensor_cores && d != 0).then_some(d);
    let split = plan.parts > 1;
    let exact = |parts: u32, chunk: u32| {
        m.is_multiple_of(cfg.bm)
            && n.is_multiple_of(cfg.bn)
            && k.is_multiple_of(cfg.bk)
            && (parts <= 1 || chunk.is_multiple_of(cfg.bk))
    };
    // The full core's overrides (`overrides!`) and the exact kernels' (`overrides_tc!`: no
    // G_EXACT, which they do not read, and register prefetch always: their loop without it ran
    // at 0.7 of the rate on the H100, whatever the table says for the full core).
    macro_rules! overrides {
        ($module:ident, $split:expr $(, $extra:ident: $value:expr)*) => {{
            let (parts, chunk): (u32, u32) = $split;
            any_overrides!($module, (parts, chunk), G_EXACT: Some(exact(parts, chunk)), G_PF: Some(cfg.prefetch) $(, $extra: $value)*)
        }};
    }
    macro_rules! overrides_tc {
        ($module:ident, $split:expr $(, $extra:ident: $value:expr)*) => {{
            any_overrides!($module, $split, G_PF: Some(true) $(, $extra: $value)*)
        }};
    }
    macro_rules! any_overrides {
        ($module:ident, $split:expr $(, $extra:ident: $value:expr)*) => {{
            let (parts, chunk): (u32, u32) = $split;
            $module::Overrides {
                A_T: Some(g.a_t),
                B_T: Some(g.b_t),
                G_BM: Some(cfg.bm),
                G_BN: Some(cfg.bn),
                G_BK: Some(cfg.bk),
                G_TM: Some(cfg.tm),
                G_TN: Some(cfg.tn),
                G_PAD: Some(cfg.pad),
                G_GROUP: Some(cfg.group),
                G_WG: Some(cfg.wg),
                M_C: shape(m),
                N_C: shape(n),
                K_C: shape(k),
                G_PARTS: shape(parts),
                G_CHUNK: shape(chunk),
                $($extra: $value,)*
                ..Default::default()
            }
        }};
    }
    // The exact tensor-core kernels where the plan found their conditions (the same bindings,
    // overrides and results as the full core's; never for a split product).
    let tc = plan.exact_tc;
    let (c, ws) = match out {
        F16Out::C { c, ws } => (c, ws),
        F16Out::Parts(parts_out) => {
            return gemm16(rec, pa, pb, parts_out, p, overrides!(gemm16, (parts, chunk), G_ACC: Some(false)));
        }
        F16Out::SwiGlu { c, h } => {
            let p = gemm16_swiglu::GemmParams::new(m, n, k, 1, k, tiles);
            return gemm16_swiglu(
                rec,
                pa,
                pb,
                c,
                h,
                p,
                gemm16_swiglu::Overrides { G_NMAP: Some(SWIGLU_TILE), ..overrides!(gemm16_swiglu, (1, k)) },
            );
        }
        F16Out::Rope { c, q, k: k16, v, rope } => {
            let r = |x: usize, what: &str| u32_of(x, what);
            let (batch, seq, heads) = (r(rope.batch, "batch")?, r(rope.seq, "seq")?, r(rope.heads, "heads")?);
            let (kv_heads, head_dim) = (r(rope.kv_heads, "kv_heads")?, r(rope.head_dim, "head_dim")?);
            let pos_offset = r(rope.pos_offset, "pos_offset")?;
            // The two kernels' uniforms are one WGSL struct (`lib/rope_block.wgsl`), two Rust types.
            macro_rules! rope_params {
                ($module:ident) => {
                    $module::GemmRopeParams::new(
                        m, n, k, 1, k, tiles, batch, seq, heads, kv_heads, head_dim, pos_offset, rope.base,
                    )
                };
            }
            if tc {
                let (p, o) = (rope_params!(gemm16_rope_qkv_tc), overrides_tc!(gemm16_rope_qkv_tc, (1, k)));
                return gemm16_rope_qkv_tc(rec, pa, pb, c, q, k16, v, p, o);
            }
            let p = rope_params!(gemm16_rope_qkv);
            return gemm16_rope_qkv(rec, pa, pb, c, q, k16, v, p, overrides!(gemm16_rope_qkv, (1, k)));
        }
    };
    match (g.epilogue, residual) {
        (Epilogue::Residual, Some(r)) => gemm16_residual(
            rec,
            pa,
            pb,
            r,
            c,
            gemm16_residual::GemmParams::new(m, n, k, 1, k, tiles),
            overrides!(gemm16_residual, (1, k)),
        ),
        (e, _) if !split && tc => {
            let p = gemm16_tc::GemmParams::new(m, n, k, parts, chunk, tiles);
            let o = overrides_tc!(gemm16_tc, (parts, chunk), G_ACC: Some(e == Epilogue::Accumulate));
            gemm16_tc(rec, pa, pb, c, p, o)
        }
        (e, _) if !split => {
            gemm16(rec, pa, pb, c, p, overrides!(gemm16, (parts, chunk), G_ACC: Some(e == Epilogue::Accumulate)))
        }
        (e, _) => {
            gemm16(rec, pa, pb, &mut ws.scratch, p, overrides!(gemm16, (parts, chunk), G_ACC: Some(false)))?;
            if e == Epilogue::Store {
                crate::infrastructure::fill_zero(rec, c, u32_of(g.m * g.n, "m·n")?)?;
            }
            let ap = matmul_parts_add::AddParams::new(u32_of(g.m * g.n, "m·n")?, u32_of(plan.parts, "parts")?);
            matmul_parts_add(rec, &ws.scratch, c, ap)
        }
    }
}

/// An operand's prepared halves, scale words and slot, if it comes split.
fn prepared<'m>(mat: &Mat<'m>) -> Option<(&'m Halves, &'m Buffer<u32>, usize)> {
    match mat.data {
        Data::Split { halves, scales, slot } => Some((halves, scales, slot)),
        _ => None,
    }
}

fn record_split(
    rec: impl Record + Copy,
    plan: &GemmPlan,
    a: Mat<'_>,
    b: Mat<'_>,
    residual: Option<&Buffer<f32>>,
    c: &mut Buffer<f32>,
    ws: &mut GemmWorkspace,
) -> Result<()> {
    use crate::linear::{HalvesParams, matmul_at_pres_split, matmul_pres, matmul_t_pres, precise_absmax};
    use crate::linear::{precise_split, precise_take_scales};
    let g = plan.gemm;
    let (m, n, k) = (u32_of(g.m, "m")?, u32_of(g.n, "n")?, u32_of(g.k, "k")?);
    // The product kernels read A's scale word at amax[0] and B's at amax[1]: a prepared
    // operand's word is copied there, the other's is cleared for its max and split, which
    // write the operand's halves into the workspace.
    let (pa, pb) = (prepared(&a), prepared(&b));
    // An operand not prepared binds the other's words (read, not taken).
    match (pa.or(pb), pb.or(pa)) {
        (Some((_, sa, _)), Some((_, sb, _))) => {
            let take = u32::from(pa.is_some()) | (u32::from(pb.is_some()) << 1);
            let slot = |p: Option<(&Halves, &Buffer<u32>, usize)>| u32_of(p.map_or(0, |(.., s)| s), "slot");
            let tp = crate::linear::precise_take_scales::TakeParams::new(slot(pa)?, slot(pb)?, take);
            precise_take_scales(rec, sa, sb, &mut ws.amax, tp)?;
        }
        _ => crate::linear::precise_clear(rec, &mut ws.amax, 2)?,
    }
    let mut own = Vec::with_capacity(2);
    for (mat, slot) in [(&a, 0u32), (&b, 1u32)] {
        if prepared(mat).is_none() {
            let x = f32_of(mat)?;
            let len = u32_of(mat.rows * mat.cols, "operand elements")?;
            precise_absmax(rec, x, &mut ws.amax, crate::linear::precise_absmax::AbsParams::new(len, slot))?;
            own.push((x, mat.rows, mat.cols, slot));
        }
    }
    for (x, rows, cols, slot) in own {
        let hp = HalvesParams::new(u32_of(rows, "rows")?, u32_of(cols, "cols")?, slot);
        let (hi, lo) = if slot == 0 { (&mut ws.a_hi, &mut ws.a_lo) } else { (&mut ws.b_hi, &mut ws.b_lo) };
        precise_split(rec, x, &ws.amax, hi, lo, hp)?;
    }
    if let (Epilogue::Residual, Some(r)) = (g.epilogue, residual) {
        crate::infrastructure::copy(rec, r, c, u32_of(g.m * g.n, "m·n")?)?;
    }
    let acc = g.epilogue != Epilogue::Store;
    let shape = |d: u32| (d != 0).then_some(d);
    let GemmWorkspace { scratch, a_hi: wa_hi, a_lo: wa_lo, b_hi: wb_hi, b_lo: wb_lo, amax, .. } = &mut *ws;
    let (a_hi, a_lo): (&Buffer<F16x4>, &Buffer<F16x4>) = match pa {
        Some((h, ..)) => (&h.hi, &h.lo),
        None => (wa_hi, wa_lo),
    };
    let (b_hi, b_lo): (&Buffer<F16x4>, &Buffer<F16x4>) = match pb {
        Some((h, ..)) => (&h.hi, &h.lo),
        None => (wb_hi, wb_lo),
    };
    match (g.a_t, g.b_t) {
        (false, true) => {
            let o = matmul_t_pres::Overrides { M_C: shape(m), N_C: shape(n), K_C: shape(k), ACC: Some(acc) };
            let p = matmul_t_pres::Params::new(m, n, k);
            matmul_t_pres(rec, a_hi, a_lo, b_hi, b_lo, amax, c, p, o)
        }
        (false, false) => {
            let o = matmul_pres::Overrides { M_C: shape(m), N_C: shape(n), K_C: shape(k), ACC: Some(acc) };
            let p = matmul_pres::Params::new(m, n, k);
            matmul_pres(rec, a_hi, a_lo, b_hi, b_lo, amax, c, p, o)
        }
        (true, false) => {
            // C [m, n] = Aᵀ·B over k rows: the kernel's (tokens, n, k) = (k, n, m).
            let sp = matmul_at_pres_split::SplitParams::new(
                k,
                n,
                m,
                u32_of(plan.parts, "parts")?,
                u32_of(plan.chunk, "chunk")?,
            );
            let o = matmul_at_pres_split::Overrides { M_C: shape(k), N_C: shape(n), K_C: shape(m) };
            matmul_at_pres_split(rec, a_hi, a_lo, b_hi, b_lo, amax, scratch, sp, o)?;
            if g.epilogue == Epilogue::Store {
                crate::infrastructure::fill_zero(rec, c, u32_of(g.m * g.n, "m·n")?)?;
            }
            let ap = crate::linear::matmul_parts_add::AddParams::new(
                u32_of(g.m * g.n, "m·n")?,
                u32_of(plan.parts, "parts")?,
            );
            crate::linear::matmul_parts_add(rec, scratch, c, ap)
        }
        (true, true) => unreachable!("refused by the plan"),
    }
}

fn record_simt(
    rec: impl Record + Copy,
    plan: &GemmPlan,
    a: Mat<'_>,
    b: Mat<'_>,
    residual: Option<&Buffer<f32>>,
    c: &mut Buffer<f32>,
    ws: &mut GemmWorkspace,
) -> Result<()> {
    use crate::linear as l;
    let g = plan.gemm;
    let (m, n, k) = (u32_of(g.m, "m")?, u32_of(g.n, "n")?, u32_of(g.k, "k")?);
    let mn = u32_of(g.m * g.n, "m·n")?;
    let (xa, xb) = (f32_of(&a)?, f32_of(&b)?);
    match (g.a_t, g.b_t, g.epilogue, residual) {
        (false, false, Epilogue::Store, _) => l::matmul(rec, xa, xb, c, l::matmul::Params::new(m, n, k)),
        (false, false, Epilogue::Residual, Some(r)) => {
            l::matmul_residual(rec, xa, xb, r, c, l::matmul_residual::Params::new(m, n, k))
        }
        (false, false, Epilogue::Accumulate, _) => {
            l::matmul(rec, xa, xb, &mut ws.scratch, l::matmul::Params::new(m, n, k))?;
            crate::infrastructure::axpy(rec, &ws.scratch, c, crate::infrastructure::axpy::Params::new(mn, 1.0))
        }
        (false, true, Epilogue::Residual, Some(r)) => {
            l::matmul_t_residual(rec, xa, xb, r, c, l::matmul_t_residual::Params::new(m, n, k))
        }
        (false, true, e, _) => match e {
            Epilogue::Store => l::matmul_t(rec, xa, xb, c, l::matmul_t::Params::new(m, n, k)),
            _ => l::matmul_t_acc(rec, xa, xb, c, l::matmul_t_acc::Params::new(m, n, k)),
        },
        (true, false, e, r) => {
            // C [m, n] = Aᵀ·B, A [k, m], B [k, n]: the kernels' (rows, n, k) = (k, n, m).
            match (e, r) {
                (Epilogue::Residual, Some(r)) => crate::infrastructure::copy(rec, r, c, mn)?,
                (Epilogue::Store, _) if plan.parts > 1 => crate::infrastructure::fill_zero(rec, c, mn)?,
                _ => {}
            }
            if plan.parts <= 1 {
                return match e {
                    Epilogue::Store => l::matmul_at(rec, xa, xb, c, l::matmul_at::Params::new(k, n, m)),
                    _ => l::matmul_at_acc(rec, xa, xb, c, l::matmul_at_acc::Params::new(k, n, m)),
                };
            }
            let sp = l::matmul_at_split::SplitParams::new(
                k,
                n,
                m,
                u32_of(plan.parts, "parts")?,
                u32_of(plan.chunk, "chunk")?,
            );
            l::matmul_at_split(rec, xa, xb, &mut ws.scratch, sp)?;
            l::matmul_parts_add(
                rec,
                &ws.scratch,
                c,
                l::matmul_parts_add::AddParams::new(mn, u32_of(plan.parts, "parts")?),
            )
        }
        _ => unreachable!("refused by the plan or by gemm's checks"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_lines_round_trip() {
        let e = Entry {
            a_t: true,
            b_t: false,
            m: 768,
            n: 3072,
            k: 8192,
            config: F16Config { bm: 256, bn: 128, bk: 32, tm: 4, tn: 4, pad: 16, prefetch: false, group: 8, wg: 256 },
            parts: 4,
        };
        assert_eq!(parse_entry(&entry_line(&e)), Some(e));
        assert_eq!(parse_entry("# a comment"), None);
        assert_eq!(parse_entry("f16 0 1 2 3"), None);
    }

    #[test]
    fn the_stage_limits_are_the_wgsl_ones() {
        let src = include_str!("../shaders/lib/gemm16.wgsl");
        assert!(src.contains(&format!("const G16_STAGE: u32 = {STAGE_COOP}u;")), "STAGE_COOP");
        assert!(src.contains(&format!("const G16_STAGE: u32 = {STAGE_PORTABLE}u;")), "STAGE_PORTABLE");
    }

    #[test]
    fn the_nearest_entry_keeps_the_workgroup_count() {
        let c = F16Config { bm: 128, bn: 128, tn: 2, ..F16Config::default() };
        let e = |m, n, k, parts| Entry { a_t: true, b_t: false, m, n, k, config: c, parts };
        let entries = [e(768, 768, 8192, 8), e(768, 3072, 8192, 2), Entry { a_t: false, ..e(768, 768, 8192, 1) }];
        // 768×768 in 128×128 blocks is 36 blocks; 8 parts → 288 workgroups; 1536×768 has 72.
        assert_eq!(nearest(&entries, &Gemm::new(1536, 768, 8192).a_t(true)), Some((c, 4)));
        assert_eq!(nearest(&entries, &Gemm::new(768, 3072, 8192).a_t(true)), Some((c, 2)));
        assert_eq!(nearest(&entries, &Gemm::new(768, 768, 8192).a_t(true).b_t(true)), None);
    }

    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn a_foreign_or_damaged_cache_is_ignored() {
        let e = Entry { a_t: false, b_t: true, m: 8, n: 8, k: 8, config: F16Config::default(), parts: 1 };
        let head = "# kernels gemm autotune: X | Vulkan | 1 | wgpu 30";
        let good = format!("{head}\n{}\n", entry_line(&e));
        assert_eq!(autotune::parse_cache(&good, head), vec![e]);
        assert!(autotune::parse_cache(&good, "# kernels gemm autotune: Y | Vulkan | 1 | wgpu 30").is_empty());
        assert!(autotune::parse_cache("garbage\n\0\u{fffd}", head).is_empty());
        let damaged = format!("{head}\nf16 0 1 8 8\n{}\n", entry_line(&e));
        assert_eq!(autotune::parse_cache(&damaged, head), vec![e], "a damaged line is skipped");
    }

    #[test]
    fn configs_are_checked() {
        let ok = F16Config::default();
        assert!(ok.validate(false, true, true).is_ok());
        assert!(F16Config::default_for(false).validate(true, false, false).is_ok());
        for bad in [
            F16Config { bm: 64, ..ok },
            F16Config { bk: 48, ..ok },
            F16Config { tm: 5, ..ok },
            F16Config { pad: 4, ..ok },
            F16Config { bm: 256, bn: 256, bk: 64, ..ok },
        ] {
            assert!(bad.validate(false, true, true).is_err(), "{bad:?}");
        }
        // 256×32 slices fit the tensor-core variant, not the portable one.
        let big = F16Config { bm: 256, bn: 128, bk: 32, tm: 4, tn: 4, ..ok };
        assert!(big.validate(false, true, true).is_ok());
        assert!(big.validate(false, true, false).is_err());
        // 512 invocations: whole vec4 loads per invocation (2048 vec4s per slice at most) and
        // every other limit as for 256; 1024 is refused.
        let wide = F16Config { tm: 4, tn: 2, wg: 512, ..ok };
        assert!(wide.validate(false, true, true).is_ok());
        assert!(F16Config { wg: 1024, ..wide }.validate(false, true, true).is_err());
        assert!(F16Config { bm: 128, bn: 64, bk: 16, ..wide }.validate(false, true, true).is_err(), "256 vec4s of B");
    }

    #[test]
    fn wide_blocks_cover_only_whole_outputs() {
        let wide = F16Config { tm: 4, tn: 2, wg: 512, ..F16Config::default() };
        assert!(wide.covers(8192, 2304) && wide.covers(768, 768));
        assert!(!wide.covers(8192, 50304) && !wide.covers(100, 256));
        assert!(F16Config::default().covers(100, 250), "256 invocations store edge blocks through their tiles");
        // A table whose nearest entry is a wide block falls back to another for a partial output.
        let e = |n: usize, config: F16Config| Entry { a_t: false, b_t: true, m: 8192, n, k: 768, config, parts: 1 };
        let table = [e(2304, wide), e(50304, F16Config::default())];
        assert_eq!(nearest(&table, &Gemm::new(8192, 2304, 768).b_t(true)), Some((wide, 1)));
        assert_eq!(nearest(&table, &Gemm::new(8192, 2300, 768).b_t(true)), Some((F16Config::default(), 1)));
    }
}
