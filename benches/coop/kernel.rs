//! WGSL generator for cooperative-matrix (tensor-core) GEMM kernels, shared by the H200 sweep
//! (`benches/coop_sweep.rs`) and its build-time check (`tests/coop_sweep_wgsl.rs`).
//!
//! C[M,N] (f32) = A·B, f16 operands, f32 accumulation, through `coop_mat16x16` (the only square
//! configuration the H200 offers: 16×16×16, f16 A/B, f32 C).
//!
//! # Layouts (what the trainer needs)
//! - `xwt`: A [M,K] row-major, B stored [N,K] (X·Wᵀ: B is loaded column-major);
//! - `dyw`: A [M,K], B [K,N] row-major (dY·W);
//! - `xtb`: A stored [K,M], B [K,N] (Xᵀ·B, the weight gradient, long K; A loaded column-major).
//!
//! Every operand row has a leading dimension padded to a multiple of 8 elements (16 bytes), so
//! vector loads and coop pointers stay aligned; the kernel masks the logical M, N, K.
//!
//! # The design space, and why
//! WGSL has no asynchronous copies and at most 48 KiB of workgroup memory on the H200, and the
//! earlier probe's best kernel drew 350–430 W against cuBLAS's ~700 W: the tensor cores were
//! waiting. What can raise their occupancy under those constraints:
//! - **Reuse per fragment load.** A subgroup holding TM×TN accumulators loads TM A-fragments and
//!   TN B-fragments per 16-deep k-slice for TM·TN products: 64×64 per subgroup (4×4, 128
//!   accumulator registers a lane) halves the shared-memory traffic per product against 64×32.
//! - **Fewer barriers per FLOP.** A deeper k-step (BK 32/64) and double-buffered staging with one
//!   barrier per stage (`Double`); single buffer + register prefetch (`Prefetch`) costs two
//!   barriers per stage but half the memory; plain `Single` for reference.
//! - **Several workgroups per SM instead of one big one.** The SM has 228 KiB of shared memory and
//!   64 K registers, but a workgroup gets at most 48 KiB: blocks of 128 threads (2×2 subgroups
//!   of 64×64) with ≤ 40 KiB let two or more workgroups share an SM, so one workgroup's barrier
//!   stall is another's compute. 512-thread blocks (the probe's) are one per SM.
//! - **No staging at all** (`Direct`): fragments straight from global memory through L1, no
//!   barriers, no workgroup memory; reuse comes from the subgroup tile and L1/L2 only.
//! - **Coalesced 16-byte loads**: `array<mat2x4<f16>>` (16 B) or `array<vec4<f16>>` (8 B);
//!   f32 inputs as `vec4<f32>` (naga 30 cannot bitcast u32 ↔ vec2<f16>).
//! - **Bank conflicts**: staged rows padded by 8 f16 (16 bytes) so the 8 rows of a fragment's
//!   8×8 quarter fall in different banks (pad 0 for comparison; coop loads need linear strides,
//!   so an XOR swizzle is impossible).
//! - **Shapes compiled in** (`override` or `const`; the probe measured +29–48%) vs a uniform.
//! - **Runtime checks**: wgpu's bounds checks, loop bounding and workgroup zero-fill (`checked`)
//!   vs none (`unchecked`, `create_shader_module_trusted`; the index arithmetic is proven by the
//!   CPU emulator in `emu.rs`).
//! - **Block order**: row-major grid vs grouped ("swizzled") order for L2 reuse.
//! - **Split-K** for the weight gradients (768×768 outputs are only 36 blocks of 128×128 on 132
//!   SMs): partial sums per K-slice, then a fixed-order reduction.
//! - **Edges**: masked staging with zeros; full output tiles stored by `coopStoreT` straight to
//!   global memory, edge tiles through a global scratch tile and a masked copy, chosen per
//!   workgroup (uniform control flow).
//! - **f32-accurate products** (hi/lo split): hi = quantizeToF16(x), lo = quantizeToF16(x − hi),
//!   hi·hi + hi·lo + lo·hi. Either split while staging (`split`), or by a separate pass into
//!   f16 hi/lo arrays (`pre`: no conversion in the GEMM loop, same bytes as f32 inputs). The
//!   `…s` forms scale lo by 2¹¹ and keep the cross products in their own accumulators, so lo stays
//!   a normal f16 for small inputs.
//!
//! Every index expression is built once as an [`E`] tree, printed into the WGSL and evaluated by
//! the CPU emulator, so what the tests check is what the GPU runs.
//!
//! naga 30.0.2 pitfalls obeyed: `enable f16; enable wgpu_cooperative_matrix;`; only
//! `coop_mat16x16<f16|f32, A|B|C>`; no module-scope `A`/`B`/`C`; load element types come from
//! the pointer (f16 arrays for A/B, f32 for C); pointers into storage/workgroup arrays only;
//! offsets and strides multiples of 8 f16 (16 bytes); coop ops only in uniform control flow with
//! uniform trip counts; every `coopStore`/`coopLoad` index and stride bound to a `let`;
//! `quantizeToF16`, never an `f32(f16(x))` round trip.
#![allow(dead_code)]

use std::collections::HashMap;
use std::fmt::Write as _;

// ------------------------------------------------------------------------------------------
// Index expressions
// ------------------------------------------------------------------------------------------

/// Values of the variables an expression may name.
pub type Env = HashMap<&'static str, u32>;

/// A u32 (or boolean) index expression: printed into WGSL and evaluated on the CPU.
#[derive(Clone, Debug, PartialEq)]
pub enum E {
    C(u32),
    V(&'static str),
    Bin(Op, Box<E>, Box<E>),
    /// `select(f, t, cond)`: t where cond holds.
    Sel(Box<E>, Box<E>, Box<E>),
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Op {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Min,
    Max,
    Lt,
    Le,
    And,
}

pub fn v(name: &'static str) -> E {
    E::V(name)
}
pub fn c(x: u32) -> E {
    E::C(x)
}
pub fn min(a: E, b: E) -> E {
    E::bin(Op::Min, a, b)
}
pub fn max(a: E, b: E) -> E {
    E::bin(Op::Max, a, b)
}
pub fn lt(a: E, b: E) -> E {
    E::bin(Op::Lt, a, b)
}
pub fn le(a: E, b: E) -> E {
    E::bin(Op::Le, a, b)
}
pub fn and(a: E, b: E) -> E {
    E::bin(Op::And, a, b)
}
pub fn sel(cond: E, t: E, f: E) -> E {
    E::Sel(Box::new(cond), Box::new(t), Box::new(f))
}

impl E {
    fn bin(op: Op, a: E, b: E) -> E {
        use E::C;
        match (op, &a, &b) {
            (Op::Add, C(0), _) => return b,
            (Op::Add | Op::Sub, _, C(0)) => return a,
            (Op::Mul, C(0), _) | (Op::Mul, _, C(0)) => return C(0),
            (Op::Mul, C(1), _) => return b,
            (Op::Mul | Op::Div, _, C(1)) => return a,
            (Op::Rem, _, C(1)) => return C(0),
            (Op::And, C(1), _) => return b,
            (Op::And, _, C(1)) => return a,
            _ => {}
        }
        if let (C(x), C(y)) = (&a, &b) {
            let (x, y) = (*x, *y);
            let folded = match op {
                Op::Add => x.checked_add(y),
                Op::Sub => x.checked_sub(y),
                Op::Mul => x.checked_mul(y),
                Op::Div => x.checked_div(y),
                Op::Rem => x.checked_rem(y),
                Op::Min => Some(x.min(y)),
                Op::Max => Some(x.max(y)),
                Op::Lt => Some((x < y) as u32),
                Op::Le => Some((x <= y) as u32),
                Op::And => Some((x != 0 && y != 0) as u32),
            };
            if let Some(r) = folded {
                return C(r);
            }
        }
        E::Bin(op, Box::new(a), Box::new(b))
    }

    /// Evaluates with u32 arithmetic; overflow, underflow and division by zero are errors (an
    /// index that wraps is a bug in the generator).
    pub fn eval(&self, env: &Env) -> Result<u32, String> {
        Ok(match self {
            E::C(x) => *x,
            E::V(n) => *env.get(n).ok_or_else(|| format!("unbound variable {n}"))?,
            E::Sel(cond, t, f) => {
                if cond.eval(env)? != 0 {
                    t.eval(env)?
                } else {
                    f.eval(env)?
                }
            }
            E::Bin(op, a, b) => {
                let (x, y) = (a.eval(env)?, b.eval(env)?);
                let r = match op {
                    Op::Add => x.checked_add(y),
                    Op::Sub => x.checked_sub(y),
                    Op::Mul => x.checked_mul(y),
                    Op::Div => x.checked_div(y),
                    Op::Rem => x.checked_rem(y),
                    Op::Min => Some(x.min(y)),
                    Op::Max => Some(x.max(y)),
                    Op::Lt => Some((x < y) as u32),
                    Op::Le => Some((x <= y) as u32),
                    Op::And => Some((x != 0 && y != 0) as u32),
                };
                r.ok_or_else(|| format!("u32 overflow/underflow/division by zero in {}", self.wgsl()))?
            }
        })
    }

    /// The WGSL text (fully parenthesised; u32 literals).
    pub fn wgsl(&self) -> String {
        match self {
            E::C(x) => format!("{x}u"),
            E::V(n) => (*n).to_string(),
            E::Sel(cond, t, f) => format!("select({}, {}, {})", f.wgsl(), t.wgsl(), cond.wgsl()),
            E::Bin(op, a, b) => {
                let (a, b) = (a.wgsl(), b.wgsl());
                match op {
                    Op::Add => format!("({a} + {b})"),
                    Op::Sub => format!("({a} - {b})"),
                    Op::Mul => format!("({a} * {b})"),
                    Op::Div => format!("({a} / {b})"),
                    Op::Rem => format!("({a} % {b})"),
                    Op::Min => format!("min({a}, {b})"),
                    Op::Max => format!("max({a}, {b})"),
                    Op::Lt => format!("({a} < {b})"),
                    Op::Le => format!("({a} <= {b})"),
                    // `&`, not `&&`: naga lowers `&&` to a branch and a local variable, which its
                    // uniformity analysis then treats as non-uniform.
                    Op::And => format!("({a} & {b})"),
                }
            }
        }
    }
}

macro_rules! arith {
    ($tr:ident, $f:ident, $op:expr) => {
        impl std::ops::$tr<E> for E {
            type Output = E;
            fn $f(self, rhs: E) -> E {
                E::bin($op, self, rhs)
            }
        }
        impl std::ops::$tr<u32> for E {
            type Output = E;
            fn $f(self, rhs: u32) -> E {
                E::bin($op, self, E::C(rhs))
            }
        }
        impl std::ops::$tr<&E> for &E {
            type Output = E;
            fn $f(self, rhs: &E) -> E {
                E::bin($op, self.clone(), rhs.clone())
            }
        }
        impl std::ops::$tr<u32> for &E {
            type Output = E;
            fn $f(self, rhs: u32) -> E {
                E::bin($op, self.clone(), E::C(rhs))
            }
        }
        impl std::ops::$tr<&E> for E {
            type Output = E;
            fn $f(self, rhs: &E) -> E {
                E::bin($op, self, rhs.clone())
            }
        }
        impl std::ops::$tr<E> for &E {
            type Output = E;
            fn $f(self, rhs: E) -> E {
                E::bin($op, self.clone(), rhs)
            }
        }
    };
}
arith!(Add, add, Op::Add);
arith!(Sub, sub, Op::Sub);
arith!(Mul, mul, Op::Mul);
arith!(Div, div, Op::Div);
arith!(Rem, rem, Op::Rem);

// ------------------------------------------------------------------------------------------
// Design parameters
// ------------------------------------------------------------------------------------------

/// Which product: see the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    XWt,
    DyW,
    XtB,
}

impl Layout {
    pub const ALL: [Layout; 3] = [Layout::XWt, Layout::DyW, Layout::XtB];
    pub fn name(self) -> &'static str {
        match self {
            Layout::XWt => "xwt",
            Layout::DyW => "dyw",
            Layout::XtB => "xtb",
        }
    }
    /// A is stored [K,M] (rows along K).
    pub fn a_k_major(self) -> bool {
        self == Layout::XtB
    }
    /// B is stored [K,N] (rows along K); otherwise [N,K].
    pub fn b_k_major(self) -> bool {
        self != Layout::XWt
    }
}

/// Operand precision and where the f16 values come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Prec {
    /// f16 inputs.
    F16,
    /// f32 inputs rounded to f16 while staging (a fused cast).
    Cast,
    /// f32 inputs split into hi/lo f16 while staging, 3 products, one accumulator.
    Split,
    /// As `Split`, lo scaled by 2¹¹ and the cross products in their own accumulators.
    SplitScaled,
    /// hi/lo f16 arrays made by a separate split pass (timed with the product).
    Pre,
    /// As `Pre`, lo scaled by 2¹¹, cross products in their own accumulators.
    PreScaled,
}

impl Prec {
    pub fn name(self) -> &'static str {
        match self {
            Prec::F16 => "f16",
            Prec::Cast => "cast",
            Prec::Split => "split",
            Prec::SplitScaled => "splits",
            Prec::Pre => "pre",
            Prec::PreScaled => "pres",
        }
    }
    /// The kernel reads f32 inputs.
    pub fn f32_inputs(self) -> bool {
        matches!(self, Prec::Cast | Prec::Split | Prec::SplitScaled)
    }
    /// Three products on hi/lo parts (f32-level accuracy).
    pub fn split(self) -> bool {
        matches!(self, Prec::Split | Prec::SplitScaled | Prec::Pre | Prec::PreScaled)
    }
    pub fn scaled(self) -> bool {
        matches!(self, Prec::SplitScaled | Prec::PreScaled)
    }
    /// Inputs are hi/lo f16 arrays from the split pass.
    pub fn presplit(self) -> bool {
        matches!(self, Prec::Pre | Prec::PreScaled)
    }
    /// The f32 scale of lo.
    pub fn lo_scale(self) -> f32 {
        if self.scaled() { 2048.0 } else { 1.0 }
    }
    /// The error bound the sweep holds it to (max |c − Σab| / Σ|a||b|) on a contraction of
    /// length `k`: 1e-6 for the split forms; 1e-4 for f16 operands where K ≥ 512 (the error of
    /// rounding the inputs shrinks like 1/√K: ~5e-5 at K = 770), else the bound that holds for
    /// any K (2·2⁻¹¹ for the two roundings, plus f32 accumulation).
    pub fn tolerance(self, k: u32) -> f64 {
        if self.split() {
            1e-6
        } else if k >= 512 {
            1e-4
        } else {
            1.1e-3
        }
    }
}

/// How operand tiles reach the tensor cores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Staging {
    /// Fragments straight from global memory: no workgroup memory, no barriers.
    Direct,
    /// One buffer: load, store, barrier, compute, barrier.
    Single,
    /// One buffer, the next tile loaded into registers while computing: two barriers a stage.
    Prefetch,
    /// Two buffers and register prefetch: one barrier a stage.
    Double,
}

impl Staging {
    pub fn name(self) -> &'static str {
        match self {
            Staging::Direct => "direct",
            Staging::Single => "single",
            Staging::Prefetch => "prefetch",
            Staging::Double => "double",
        }
    }
    fn buffers(self) -> u32 {
        match self {
            Staging::Direct => 0,
            Staging::Single | Staging::Prefetch => 1,
            Staging::Double => 2,
        }
    }
}

/// Global load type of f16 operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Load {
    /// `array<vec4<f16>>`: 8 bytes a load.
    V4,
    /// `array<mat2x4<f16>>`: 16 bytes a load.
    M2x4,
}

/// Where M, N, K and the leading dimensions come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dims {
    /// `override` constants, set at pipeline creation (one pipeline per shape).
    Override,
    /// A uniform buffer (one pipeline for all shapes).
    Uniform,
    /// `const` declarations printed into the source (one module per shape).
    Const,
}

impl Dims {
    pub fn name(self) -> &'static str {
        match self {
            Dims::Override => "ovr",
            Dims::Uniform => "uni",
            Dims::Const => "const",
        }
    }
}

/// What happens to C.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Epilogue {
    /// C = A·B.
    Store,
    /// C += A·B, C loaded as the initial accumulator (full tiles).
    AccInit,
    /// C += A·B, C loaded and added after the main loop.
    AccEnd,
}

impl Epilogue {
    pub fn name(self) -> &'static str {
        match self {
            Epilogue::Store => "store",
            Epilogue::AccInit => "accinit",
            Epilogue::AccEnd => "accend",
        }
    }
    pub fn accumulates(self) -> bool {
        self != Epilogue::Store
    }
}

/// A kernel design: everything but the layout, epilogue, masking, split-K and subgroup size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Design {
    pub prec: Prec,
    /// Block (workgroup) tile: BM × BN outputs, BK deep per stage.
    pub bm: u32,
    pub bn: u32,
    pub bk: u32,
    /// Subgroup grid: sgm × sgn subgroups; each holds (bm/sgm) × (bn/sgn) outputs.
    pub sgm: u32,
    pub sgn: u32,
    pub staging: Staging,
    /// f16 elements added to every staged row (0 or a multiple of 8).
    pub pad: u32,
    pub load: Load,
    pub dims: Dims,
    /// wgpu's runtime checks (bounds checks, loop bounding, workgroup zero-fill) kept.
    pub checked: bool,
    /// Grouped block order: 0 = row-major 2-D grid, G = G block rows per group.
    pub swizzle: u32,
    /// Fragments of the next 16-deep slice loaded before the products of this one.
    pub fragpf: bool,
}

impl Design {
    /// The base design for a block shape: double-buffered if it fits, 16-byte loads, pad 8,
    /// shapes as overrides, no runtime checks.
    pub const fn new(bm: u32, bn: u32, bk: u32, sgm: u32, sgn: u32, staging: Staging) -> Design {
        Design {
            prec: Prec::F16,
            bm,
            bn,
            bk,
            sgm,
            sgn,
            staging,
            pad: 8,
            load: Load::M2x4,
            dims: Dims::Override,
            checked: false,
            swizzle: 0,
            fragpf: false,
        }
    }
    pub const fn with_prec(mut self, p: Prec) -> Design {
        self.prec = p;
        self
    }
    pub fn tm(&self) -> u32 {
        self.bm / self.sgm / 16
    }
    pub fn tn(&self) -> u32 {
        self.bn / self.sgn / 16
    }
    pub fn subgroups(&self) -> u32 {
        self.sgm * self.sgn
    }
    /// A short unique name: `f16-128x128x32-w2x2-double-p8-m24-ovr-u` (+ `-chk`, `-g8`, `-fp`).
    pub fn name(&self) -> String {
        let mut s = format!(
            "{}-{}x{}x{}-w{}x{}-{}-p{}-{}-{}",
            self.prec.name(),
            self.bm,
            self.bn,
            self.bk,
            self.sgm,
            self.sgn,
            self.staging.name(),
            self.pad,
            match self.load {
                Load::V4 => "v4",
                Load::M2x4 => "m24",
            },
            self.dims.name()
        );
        if self.checked {
            s += "-chk";
        }
        if self.swizzle > 0 {
            let _ = write!(s, "-g{}", self.swizzle);
        }
        if self.fragpf {
            s += "-fp";
        }
        s
    }
}

/// A problem: logical M×K×N, leading dimensions of the stored operands (multiples of 8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    pub m: u32,
    pub n: u32,
    pub k: u32,
    pub lda: u32,
    pub ldb: u32,
    pub ldc: u32,
}

pub fn round_up(x: u32, to: u32) -> u32 {
    x.div_ceil(to) * to
}

impl Shape {
    /// M×K×N in a layout, leading dimensions rounded up to multiples of 8.
    pub fn new(m: u32, k: u32, n: u32, layout: Layout) -> Shape {
        Shape {
            m,
            n,
            k,
            lda: round_up(if layout.a_k_major() { m } else { k }, 8),
            ldb: round_up(if layout.b_k_major() { n } else { k }, 8),
            ldc: round_up(n, 8),
        }
    }
    /// Stored A: rows × lda elements.
    pub fn a_rows(&self, layout: Layout) -> u32 {
        if layout.a_k_major() { self.k } else { self.m }
    }
    pub fn b_rows(&self, layout: Layout) -> u32 {
        if layout.b_k_major() { self.k } else { self.n }
    }
    pub fn a_len(&self, layout: Layout) -> usize {
        self.a_rows(layout) as usize * self.lda as usize
    }
    pub fn b_len(&self, layout: Layout) -> usize {
        self.b_rows(layout) as usize * self.ldb as usize
    }
    pub fn c_len(&self) -> usize {
        self.m as usize * self.ldc as usize
    }
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64
    }
    /// "M×K×N".
    pub fn label(&self) -> String {
        format!("{}x{}x{}", self.m, self.k, self.n)
    }
}

/// An operand of the product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operand {
    A,
    B,
}

/// A staged tile in the orientation of its global storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tile {
    pub rows: u32,
    pub cols: u32,
    /// Rows run along K (stored [K, M|N]); otherwise along M|N (stored [M|N, K]).
    pub k_major: bool,
}

/// What a kernel binds, in binding order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binding {
    A,
    B,
    AHi,
    ALo,
    BHi,
    BLo,
    /// C, or the split-K partial sums.
    Out,
    Scratch,
    Dims,
}

/// A piece of the kernel's schedule: printed as WGSL and interpreted by the emulator.
#[derive(Clone, Debug)]
pub enum Step {
    /// Every thread loads its share of both operand tiles of k-tile `kt` into registers.
    Load {
        kt: E,
    },
    /// Registers into staging buffer `buf`.
    Store {
        buf: E,
    },
    Barrier,
    /// Every subgroup: fragments from buffer `buf`, products into its accumulators.
    Compute {
        buf: E,
    },
    /// Every subgroup: fragments of k-tile `kt` straight from global memory.
    ComputeDirect {
        kt: E,
    },
    /// `if (a < b) { … }` (a uniform condition).
    IfLt {
        a: E,
        b: E,
        body: Vec<Step>,
    },
}

/// One kernel: a design in a layout, with an epilogue, masking, split-K and subgroup size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Kernel {
    pub d: Design,
    pub layout: Layout,
    pub epi: Epilogue,
    /// Handles M, N, K that are not multiples of the block (masked staging, edge tiles).
    pub masked: bool,
    /// K split into this many slices (partial sums reduced by a second kernel).
    pub ksplit: u32,
    /// Subgroup size of the adapter (32 on NVIDIA).
    pub sg: u32,
}

/// The names of the shape values (override / const / uniform-derived lets).
pub const DIM_NAMES: [&str; 7] = ["DIM_M", "DIM_N", "DIM_K", "LD_A", "LD_B", "LD_C", "KCHUNK"];

impl Kernel {
    pub fn new(d: Design, layout: Layout) -> Kernel {
        Kernel { d, layout, epi: Epilogue::Store, masked: false, ksplit: 1, sg: 32 }
    }

    /// Design name + layout + run options: unique per kernel.
    pub fn label(&self) -> String {
        let mut s = format!("{}/{}", self.d.name(), self.layout.name());
        if self.epi != Epilogue::Store {
            let _ = write!(s, "/{}", self.epi.name());
        }
        if self.masked {
            s += "/masked";
        }
        if self.ksplit > 1 {
            let _ = write!(s, "/ks{}", self.ksplit);
        }
        s
    }

    pub fn threads(&self) -> u32 {
        self.d.subgroups() * self.sg
    }

    /// Elements per global load vector.
    pub fn gw(&self) -> u32 {
        if self.d.prec.f32_inputs() {
            4
        } else {
            match self.d.load {
                Load::V4 => 4,
                Load::M2x4 => 8,
            }
        }
    }

    /// The WGSL type of a global operand element.
    fn gtype(&self) -> &'static str {
        if self.d.prec.f32_inputs() {
            "vec4<f32>"
        } else {
            match self.d.load {
                Load::V4 => "vec4<f16>",
                Load::M2x4 => "mat2x4<f16>",
            }
        }
    }

    pub fn tile(&self, op: Operand) -> Tile {
        let d = &self.d;
        match op {
            Operand::A => {
                if self.layout.a_k_major() {
                    Tile { rows: d.bk, cols: d.bm, k_major: true }
                } else {
                    Tile { rows: d.bm, cols: d.bk, k_major: false }
                }
            }
            Operand::B => {
                if self.layout.b_k_major() {
                    Tile { rows: d.bk, cols: d.bn, k_major: true }
                } else {
                    Tile { rows: d.bn, cols: d.bk, k_major: false }
                }
            }
        }
    }

    /// Staged row stride, f16 elements.
    pub fn sstride(&self, op: Operand) -> u32 {
        self.tile(op).cols + self.d.pad
    }

    /// One staging buffer of an operand, in vec4<f16> units.
    pub fn buf_vec4s(&self, op: Operand) -> u32 {
        self.tile(op).rows * self.sstride(op) / 4
    }

    /// Loads each thread makes per operand tile.
    pub fn slots(&self, op: Operand) -> u32 {
        let t = self.tile(op);
        t.rows * t.cols / self.gw() / self.threads()
    }

    /// Workgroup memory, bytes.
    pub fn wg_mem_bytes(&self) -> u32 {
        let parts = if self.d.prec.split() { 2 } else { 1 };
        self.d.staging.buffers() * parts * 8 * (self.buf_vec4s(Operand::A) + self.buf_vec4s(Operand::B))
    }

    /// A rough register count per lane (accumulators, fragments, prefetch, addressing).
    pub fn est_regs(&self) -> u32 {
        let d = &self.d;
        let accs = d.tm() * d.tn() * if d.prec.scaled() { 2 } else { 1 };
        let parts = if d.prec.split() { 2 } else { 1 };
        let frags = (d.tm() + d.tn()) * parts * if d.fragpf { 2 } else { 1 };
        let prefetch = if d.staging == Staging::Direct {
            0
        } else {
            let bytes_per_vec = if d.prec.f32_inputs() { 16 } else { self.gw() * 2 };
            let per = if d.prec.presplit() { 2 } else { 1 };
            (self.slots(Operand::A) + self.slots(Operand::B)) * bytes_per_vec * per / 4
        };
        // Without prefetch the loaded registers are dead before the fragments are loaded.
        if d.staging == Staging::Single {
            accs * 8 + (frags * 4).max(prefetch) + 24
        } else {
            accs * 8 + frags * 4 + prefetch + 24
        }
    }

    /// Whether the kernel can be built at all on an adapter with `max_wg_mem` bytes of
    /// workgroup memory and `max_threads` invocations per workgroup.
    pub fn check(&self, max_wg_mem: u32, max_threads: u32) -> Result<(), String> {
        let d = &self.d;
        if !d.bm.is_multiple_of(16 * d.sgm) || !d.bn.is_multiple_of(16 * d.sgn) || !d.bk.is_multiple_of(16) || d.bk == 0
        {
            return Err("block not divisible into 16×16 subgroup tiles".into());
        }
        if !d.pad.is_multiple_of(8) {
            return Err("pad must be a multiple of 8 f16".into());
        }
        if self.ksplit == 0 {
            return Err("ksplit 0".into());
        }
        if self.threads() > max_threads {
            return Err(format!("{} invocations > {max_threads}", self.threads()));
        }
        if d.staging == Staging::Direct {
            if self.masked {
                return Err("direct loads cannot mask edges".into());
            }
            if d.prec.f32_inputs() {
                return Err("direct loads need f16 operands".into());
            }
            if d.load != Load::V4 {
                return Err("direct loads use vec4<f16> arrays".into());
            }
        } else {
            for op in [Operand::A, Operand::B] {
                let t = self.tile(op);
                if !t.cols.is_multiple_of(self.gw()) || !(t.rows * t.cols / self.gw()).is_multiple_of(self.threads()) {
                    return Err(format!(
                        "{op:?} tile {}×{} does not split into {}-element loads over {} invocations",
                        t.rows,
                        t.cols,
                        self.gw(),
                        self.threads()
                    ));
                }
            }
            if self.wg_mem_bytes() > max_wg_mem {
                return Err(format!("{} bytes of workgroup memory > {max_wg_mem}", self.wg_mem_bytes()));
            }
        }
        if d.fragpf && d.bk == 16 {
            return Err("fragment prefetch needs BK ≥ 32".into());
        }
        Ok(())
    }

    /// K per split-K slice (a multiple of BK).
    pub fn kchunk(&self, s: &Shape) -> u32 {
        round_up(s.k.div_ceil(self.ksplit), self.d.bk).max(self.d.bk)
    }

    /// Whether this kernel computes `s` correctly (alignment and masking rules).
    pub fn supports(&self, s: &Shape) -> Result<(), String> {
        if !s.lda.is_multiple_of(8) || !s.ldb.is_multiple_of(8) || !s.ldc.is_multiple_of(8) {
            return Err("leading dimensions must be multiples of 8".into());
        }
        let d = &self.d;
        let chunk = self.kchunk(s);
        if chunk * (self.ksplit - 1) >= s.k {
            return Err(format!("K = {} too short for {} slices of {chunk}", s.k, self.ksplit));
        }
        if !self.masked
            && (!s.m.is_multiple_of(d.bm) || !s.n.is_multiple_of(d.bn) || !s.k.is_multiple_of(d.bk * self.ksplit))
        {
            return Err(format!("unmasked kernel needs M % {}, N % {}, K % {} = 0", d.bm, d.bn, d.bk * self.ksplit));
        }
        let [x, y, z] = self.grid(s);
        if x > 65535 || y > 65535 || z > 65535 {
            return Err("grid over 65535 workgroups in a dimension".into());
        }
        Ok(())
    }

    /// Workgroups to dispatch.
    pub fn grid(&self, s: &Shape) -> [u32; 3] {
        let gx = s.n.div_ceil(self.d.bn);
        let gy = s.m.div_ceil(self.d.bm);
        if self.d.swizzle > 0 { [gx * gy, 1, self.ksplit] } else { [gx, gy, self.ksplit] }
    }

    /// Scratch tiles for edge workgroups (f32 elements; 0 when unmasked).
    pub fn scratch_len(&self, s: &Shape) -> usize {
        if !self.masked {
            return 0;
        }
        let gx = s.n.div_ceil(self.d.bn) as usize;
        let gy = s.m.div_ceil(self.d.bm) as usize;
        self.ksplit as usize * gx * gy * (self.d.bm * self.d.bn) as usize
    }

    /// Partial sums of split-K (f32 elements; 0 without split-K).
    pub fn part_len(&self, s: &Shape) -> usize {
        if self.ksplit > 1 { self.ksplit as usize * s.c_len() } else { 0 }
    }

    /// The shape values in [`DIM_NAMES`] order.
    pub fn dim_values(&self, s: &Shape) -> [u32; 7] {
        [s.m, s.n, s.k, s.lda, s.ldb, s.ldc, self.kchunk(s)]
    }

    /// Pipeline-overridable constants (override mode; empty otherwise).
    pub fn overrides(&self, s: &Shape) -> Vec<(&'static str, f64)> {
        if self.d.dims != Dims::Override {
            return Vec::new();
        }
        DIM_NAMES.iter().zip(self.dim_values(s)).map(|(n, v)| (*n, v as f64)).collect()
    }

    /// The uniform buffer's contents (uniform mode): the shape values, padded to 32 bytes.
    pub fn uniform_words(&self, s: &Shape) -> [u32; 8] {
        let v = self.dim_values(s);
        [v[0], v[1], v[2], v[3], v[4], v[5], v[6], 0]
    }

    pub fn bindings(&self) -> Vec<Binding> {
        let mut b = if self.d.prec.presplit() {
            vec![Binding::AHi, Binding::ALo, Binding::BHi, Binding::BLo]
        } else {
            vec![Binding::A, Binding::B]
        };
        b.push(Binding::Out);
        if self.masked {
            b.push(Binding::Scratch);
        }
        if self.d.dims == Dims::Uniform {
            b.push(Binding::Dims);
        }
        b
    }

    // ---- the expressions -----------------------------------------------------------------

    /// Workgroup-uniform lets, in order (names are WGSL identifiers; `wg.x` etc. are inputs).
    pub fn wg_lets(&self) -> Vec<(&'static str, E)> {
        let d = &self.d;
        let mut l: Vec<(&'static str, E)> = Vec::new();
        l.push(("gx", (v("DIM_N") + (d.bn - 1)) / d.bn));
        l.push(("gy", (v("DIM_M") + (d.bm - 1)) / d.bm));
        if d.swizzle > 0 {
            let g = d.swizzle;
            l.push(("width", v("gx") * g));
            l.push(("first", v("wg.x") / v("width") * g));
            l.push(("grows", min(v("gy") - v("first"), c(g))));
            l.push(("inr", v("wg.x") % v("width")));
            l.push(("by", v("first") + v("inr") % v("grows")));
            l.push(("bx", v("inr") / v("grows")));
        } else {
            l.push(("bx", v("wg.x")));
            l.push(("by", v("wg.y")));
        }
        l.push(("m0", v("by") * d.bm));
        l.push(("n0", v("bx") * d.bn));
        l.push(("k_begin", v("wg.z") * v("KCHUNK")));
        l.push(("k_end", max(min(v("DIM_K"), v("k_begin") + v("KCHUNK")), v("k_begin"))));
        l.push(("nk", (v("k_end") - v("k_begin") + (d.bk - 1)) / d.bk));
        l.push(("dst_base", if self.ksplit > 1 { v("wg.z") * v("DIM_M") * v("LD_C") } else { c(0) }));
        if self.masked {
            l.push(("full", and(le(v("m0") + d.bm, v("DIM_M")), le(v("n0") + d.bn, v("DIM_N")))));
            l.push(("slot_base", ((v("wg.z") * v("gy") + v("by")) * v("gx") + v("bx")) * (d.bm * d.bn)));
        }
        l
    }

    /// Per-subgroup lets (input `sg_id`).
    pub fn sg_lets(&self) -> Vec<(&'static str, E)> {
        vec![("wm", v("sg_id") / self.d.sgn), ("wn", v("sg_id") % self.d.sgn)]
    }

    /// `kb`: the first K index of k-tile `kt`.
    pub fn kb(&self, kt: &E) -> E {
        v("k_begin") + kt * self.d.bk
    }

    /// A thread's load `slot` of an operand's tile at K offset `kb` (input `tid`): the global
    /// vector index, the in-bounds condition of the vector's first element, each element's
    /// in-bounds condition, and the staged vec4 index (within one buffer).
    pub fn slot(&self, op: Operand, slot: u32, kb: &E) -> SlotExprs {
        let t = self.tile(op);
        let gw = self.gw();
        let per_row = t.cols / gw;
        let threads = self.threads();
        // When the invocations cover whole rows, slot `s` is `s·T/per_row` rows further down.
        let (r, cv) = if threads.is_multiple_of(per_row) {
            (v("tid") / per_row + slot * (threads / per_row), v("tid") % per_row)
        } else {
            let vi = v("tid") + slot * threads;
            (&vi / per_row, &vi % per_row)
        };
        let (mn0, mn, ld) = match op {
            Operand::A => (v("m0"), v("DIM_M"), v("LD_A")),
            Operand::B => (v("n0"), v("DIM_N"), v("LD_B")),
        };
        let (grow, gcol, row_lim, col_lim, col_base) = if t.k_major {
            (kb + &r, &mn0 + &(&cv * gw), v("k_end"), mn, mn0.clone())
        } else {
            (&mn0 + &r, kb + &(&cv * gw), mn, v("k_end"), kb.clone())
        };
        let gidx = &grow * &(ld / gw) + &(&col_base / gw) + cv.clone();
        let ok = and(lt(grow.clone(), row_lim), lt(gcol.clone(), col_lim.clone()));
        let elems = (0..gw)
            .map(|e| if e == 0 { ok.clone() } else { and(ok.clone(), lt(&gcol + e, col_lim.clone())) })
            .collect();
        let sidx = &r * (self.sstride(op) / 4) + &(&cv * (gw / 4));
        SlotExprs { gidx, ok, elems, sidx }
    }

    /// The staged (or, for `Direct`, global) vec4 offset and stride of fragment `i` of an
    /// operand at slice `kk`, and whether it is loaded row-major (`coopLoadT`).
    pub fn frag(&self, op: Operand, i: u32, kk: u32) -> (E, E, bool) {
        let d = &self.d;
        let t = self.tile(op);
        let (w, tiles) = match op {
            Operand::A => (v("wm"), d.tm()),
            Operand::B => (v("wn"), d.tn()),
        };
        let k_l = kk * 16;
        // A is row-major in the product when its rows run along M; B when its rows run along K.
        let row_major = match op {
            Operand::A => !t.k_major,
            Operand::B => t.k_major,
        };
        // Offsets in vec4<f16> units, constants divided first (every term is a multiple of 4).
        if d.staging == Staging::Direct {
            let (mn0, ld) = match op {
                Operand::A => (v("m0"), v("LD_A")),
                Operand::B => (v("n0"), v("LD_B")),
            };
            let ld4 = ld / 4;
            let mn_l = w * (tiles * 16) + i * 16;
            let off = if t.k_major {
                (v("kb") + k_l) * &ld4 + &(mn0 + mn_l) / 4
            } else {
                (mn0 + mn_l) * &ld4 + &(v("kb") + k_l) / 4
            };
            (off, ld4, row_major)
        } else {
            let s = self.sstride(op);
            let off = if t.k_major {
                w * (tiles * 4) + (i * 4 + k_l * s / 4)
            } else {
                w * (tiles * 16 * s / 4) + (i * 16 * s / 4 + k_l / 4)
            };
            (off, c(s / 4), row_major)
        }
    }

    /// Output offset (f32 elements) and stride of accumulator (i, j), full tiles.
    pub fn out_frag(&self, i: u32, j: u32) -> (E, E) {
        let d = &self.d;
        let row = v("m0") + &(v("wm") * (d.tm() * 16)) + i * 16;
        let col = v("n0") + &(v("wn") * (d.tn() * 16)) + j * 16;
        (v("dst_base") + &(row * v("LD_C")) + col, v("LD_C"))
    }

    /// Scratch offset and stride of accumulator (i, j), edge tiles.
    pub fn scratch_frag(&self, i: u32, j: u32) -> (E, E) {
        let d = &self.d;
        let row = v("wm") * (d.tm() * 16) + i * 16;
        let col = v("wn") * (d.tn() * 16) + j * 16;
        (v("slot_base") + &(row * d.bn) + col, c(d.bn))
    }

    /// Edge copy, iteration `e` (input `tid`): scratch index, output index, in-bounds condition.
    pub fn edge_copy(&self) -> (E, E, E, E) {
        let d = &self.d;
        let idx = v("e") * self.threads() + v("tid");
        let gr = v("m0") + &(&idx / d.bn);
        let gc = v("n0") + &(&idx % d.bn);
        let ok = and(lt(gr.clone(), v("DIM_M")), lt(gc.clone(), v("DIM_N")));
        (v("slot_base") + idx.clone(), v("dst_base") + &(gr * v("LD_C")) + gc, ok, c(d.bm * d.bn / self.threads()))
    }

    /// Prologue and loop body (loop variable `t` over `0..nk`).
    pub fn schedule(&self) -> (Vec<Step>, Vec<Step>) {
        let t = v("t");
        let next = &t + 1;
        match self.d.staging {
            Staging::Direct => (vec![], vec![Step::ComputeDirect { kt: t }]),
            Staging::Single => (
                vec![],
                vec![
                    Step::Load { kt: t },
                    Step::Store { buf: c(0) },
                    Step::Barrier,
                    Step::Compute { buf: c(0) },
                    Step::Barrier,
                ],
            ),
            Staging::Prefetch => (
                vec![Step::Load { kt: c(0) }],
                vec![
                    Step::Store { buf: c(0) },
                    Step::Barrier,
                    Step::IfLt { a: next.clone(), b: v("nk"), body: vec![Step::Load { kt: next }] },
                    Step::Compute { buf: c(0) },
                    Step::Barrier,
                ],
            ),
            Staging::Double => (
                vec![Step::Load { kt: c(0) }, Step::Store { buf: c(0) }, Step::Barrier],
                vec![
                    Step::IfLt { a: next.clone(), b: v("nk"), body: vec![Step::Load { kt: next.clone() }] },
                    Step::Compute { buf: &t % 2 },
                    Step::IfLt { a: next.clone(), b: v("nk"), body: vec![Step::Store { buf: &next % 2 }] },
                    Step::Barrier,
                ],
            ),
        }
    }

    // ---- WGSL ------------------------------------------------------------------------------

    /// The kernel's WGSL source (entry point `gemm`). `shape` is needed in `Const` mode.
    pub fn wgsl(&self, shape: Option<&Shape>) -> Result<String, String> {
        let d = &self.d;
        let p = d.prec;
        let mut w = String::new();
        let o = &mut w;
        let _ = writeln!(o, "enable f16;\nenable wgpu_cooperative_matrix;\n");
        let _ = writeln!(
            o,
            "// {} — {} invocations ({} subgroups of {}×{} outputs), {} bytes of workgroup memory",
            self.label(),
            self.threads(),
            d.subgroups(),
            d.tm() * 16,
            d.tn() * 16,
            self.wg_mem_bytes()
        );
        let mut binding = 0u32;
        let mut bind = |o: &mut String, decl: String| {
            let _ = writeln!(o, "@group(0) @binding({binding}) {decl};");
            binding += 1;
        };
        match d.dims {
            Dims::Override => {
                for n in DIM_NAMES {
                    let _ = writeln!(o, "override {n}: u32;");
                }
            }
            Dims::Const => {
                let s = shape.ok_or("const shapes need a shape")?;
                for (n, val) in DIM_NAMES.iter().zip(self.dim_values(s)) {
                    let _ = writeln!(o, "const {n}: u32 = {val}u;");
                }
            }
            Dims::Uniform => {
                let _ = writeln!(
                    o,
                    "struct Dims {{ dim_m: u32, dim_n: u32, dim_k: u32, ld_a: u32, ld_b: u32, ld_c: u32, kchunk: u32, pad0: u32 }}"
                );
            }
        }
        let gt = self.gtype();
        for b in self.bindings() {
            match b {
                Binding::A => bind(o, format!("var<storage, read> in_a: array<{gt}>")),
                Binding::B => bind(o, format!("var<storage, read> in_b: array<{gt}>")),
                Binding::AHi => bind(o, format!("var<storage, read> in_ah: array<{gt}>")),
                Binding::ALo => bind(o, format!("var<storage, read> in_al: array<{gt}>")),
                Binding::BHi => bind(o, format!("var<storage, read> in_bh: array<{gt}>")),
                Binding::BLo => bind(o, format!("var<storage, read> in_bl: array<{gt}>")),
                Binding::Out => bind(o, "var<storage, read_write> out_c: array<f32>".into()),
                Binding::Scratch => bind(o, "var<storage, read_write> scratch: array<f32>".into()),
                Binding::Dims => bind(o, "var<uniform> dims: Dims".into()),
            }
        }
        let nb = d.staging.buffers();
        if nb > 0 {
            let la = nb * self.buf_vec4s(Operand::A);
            let lb = nb * self.buf_vec4s(Operand::B);
            if p.split() {
                let _ = writeln!(o, "var<workgroup> sm_ah: array<vec4<f16>, {la}>;");
                let _ = writeln!(o, "var<workgroup> sm_al: array<vec4<f16>, {la}>;");
                let _ = writeln!(o, "var<workgroup> sm_bh: array<vec4<f16>, {lb}>;");
                let _ = writeln!(o, "var<workgroup> sm_bl: array<vec4<f16>, {lb}>;");
            } else {
                let _ = writeln!(o, "var<workgroup> sm_a: array<vec4<f16>, {la}>;");
                let _ = writeln!(o, "var<workgroup> sm_b: array<vec4<f16>, {lb}>;");
            }
        }
        let _ = writeln!(
            o,
            "\n@compute @workgroup_size({})\nfn gemm(@builtin(local_invocation_index) tid: u32, @builtin(workgroup_id) wg: vec3<u32>, @builtin(subgroup_id) sg_id: u32) {{",
            self.threads()
        );
        if d.dims == Dims::Uniform {
            for (n, f) in DIM_NAMES.iter().zip(["dim_m", "dim_n", "dim_k", "ld_a", "ld_b", "ld_c", "kchunk"]) {
                let _ = writeln!(o, "    let {n} = dims.{f};");
            }
        }
        for (n, e) in self.wg_lets().iter().chain(self.sg_lets().iter()) {
            let _ = writeln!(o, "    let {n} = {};", e.wgsl());
        }
        let (tm, tn) = (d.tm(), d.tn());
        for i in 0..tm {
            for j in 0..tn {
                let _ = writeln!(o, "    var acc_{i}_{j} = coop_mat16x16<f32, C>();");
                if p.scaled() {
                    let _ = writeln!(o, "    var accx_{i}_{j} = coop_mat16x16<f32, C>();");
                }
            }
        }
        if self.epi == Epilogue::AccInit && self.ksplit == 1 {
            let mut body = String::new();
            for i in 0..tm {
                for j in 0..tn {
                    let (off, st) = self.out_frag(i, j);
                    let _ = writeln!(
                        body,
                        "        {{ let o = {}; let s = {}; acc_{i}_{j} = coopLoadT<coop_mat16x16<f32, C>>(&out_c[o], s); }}",
                        off.wgsl(),
                        st.wgsl()
                    );
                }
            }
            if self.masked {
                let _ = writeln!(o, "    if (full) {{\n{body}    }}");
            } else {
                let _ = write!(o, "{body}");
            }
        }
        if d.staging != Staging::Direct {
            for (op, name) in [(Operand::A, "a"), (Operand::B, "b")] {
                for s in 0..self.slots(op) {
                    if p.presplit() {
                        let _ = writeln!(o, "    var p{name}h_{s}: {gt};\n    var p{name}l_{s}: {gt};");
                    } else {
                        let _ = writeln!(o, "    var p{name}_{s}: {gt};");
                    }
                }
            }
        }
        let (pro, body) = self.schedule();
        for st in &pro {
            self.emit_step(o, st, 1);
        }
        let _ = writeln!(o, "    for (var t = 0u; t < nk; t = t + 1u) {{");
        for st in &body {
            self.emit_step(o, st, 2);
        }
        let _ = writeln!(o, "    }}");
        if p.scaled() {
            let inv = 1.0 / p.lo_scale();
            for i in 0..tm {
                for j in 0..tn {
                    let _ = writeln!(o, "    acc_{i}_{j} = acc_{i}_{j} + {inv:?}f * accx_{i}_{j};");
                }
            }
        }
        self.emit_epilogue(o);
        let _ = writeln!(o, "}}");
        Ok(w)
    }

    fn emit_step(&self, o: &mut String, st: &Step, depth: usize) {
        let ind = "    ".repeat(depth);
        let d = &self.d;
        let p = d.prec;
        match st {
            Step::Barrier => {
                let _ = writeln!(o, "{ind}workgroupBarrier();");
            }
            Step::IfLt { a, b, body } => {
                let _ = writeln!(o, "{ind}if ({} < {}) {{", a.wgsl(), b.wgsl());
                for s in body {
                    self.emit_step(o, s, depth + 1);
                }
                let _ = writeln!(o, "{ind}}}");
            }
            Step::Load { kt } => {
                let _ = writeln!(o, "{ind}{{");
                let kb = self.kb(kt);
                let _ = writeln!(o, "{ind}    let kb = {};", kb.wgsl());
                let kbv = v("kb");
                for (op, name) in [(Operand::A, "a"), (Operand::B, "b")] {
                    for s in 0..self.slots(op) {
                        let x = self.slot(op, s, &kbv);
                        let _ = writeln!(o, "{ind}    let g{name}_{s} = {};", x.gidx.wgsl());
                        let srcs: Vec<(String, String)> = if p.presplit() {
                            vec![
                                (format!("in_{name}h"), format!("p{name}h_{s}")),
                                (format!("in_{name}l"), format!("p{name}l_{s}")),
                            ]
                        } else {
                            vec![(format!("in_{name}"), format!("p{name}_{s}"))]
                        };
                        if self.masked {
                            let _ = writeln!(o, "{ind}    let ok{name}_{s} = {};", x.ok.wgsl());
                            for (arr, reg) in &srcs {
                                let _ = writeln!(o, "{ind}    {reg} = {arr}[select(0u, g{name}_{s}, ok{name}_{s})];");
                                let z = if p.f32_inputs() { "vec4<f32>()" } else { "vec4<f16>()" };
                                let mask = |from: usize| {
                                    let m: Vec<String> = x.elems[from..from + 4].iter().map(|e| e.wgsl()).collect();
                                    format!("vec4<bool>({})", m.join(", "))
                                };
                                if self.gw() == 8 {
                                    let _ = writeln!(
                                        o,
                                        "{ind}    {reg} = mat2x4<f16>(select({z}, {reg}[0], {}), select({z}, {reg}[1], {}));",
                                        mask(0),
                                        mask(4)
                                    );
                                } else {
                                    let _ = writeln!(o, "{ind}    {reg} = select({z}, {reg}, {});", mask(0));
                                }
                            }
                        } else {
                            for (arr, reg) in &srcs {
                                let _ = writeln!(o, "{ind}    {reg} = {arr}[g{name}_{s}];");
                            }
                        }
                    }
                }
                let _ = writeln!(o, "{ind}}}");
            }
            Step::Store { buf } => {
                let _ = writeln!(o, "{ind}{{");
                for (op, name) in [(Operand::A, "a"), (Operand::B, "b")] {
                    let base = buf * self.buf_vec4s(op);
                    for s in 0..self.slots(op) {
                        let x = self.slot(op, s, &c(0));
                        let idx = (&base + &x.sidx).wgsl();
                        let _ = writeln!(o, "{ind}    let s{name}_{s} = {idx};");
                        let si = format!("s{name}_{s}");
                        match p {
                            Prec::F16 => {
                                if self.gw() == 8 {
                                    let _ = writeln!(o, "{ind}    sm_{name}[{si}] = p{name}_{s}[0];");
                                    let _ = writeln!(o, "{ind}    sm_{name}[{si} + 1u] = p{name}_{s}[1];");
                                } else {
                                    let _ = writeln!(o, "{ind}    sm_{name}[{si}] = p{name}_{s};");
                                }
                            }
                            Prec::Cast => {
                                let _ = writeln!(o, "{ind}    sm_{name}[{si}] = vec4<f16>(p{name}_{s});");
                            }
                            Prec::Split | Prec::SplitScaled => {
                                let _ = writeln!(o, "{ind}    let q{name}_{s} = quantizeToF16(p{name}_{s});");
                                let _ = writeln!(o, "{ind}    sm_{name}h[{si}] = vec4<f16>(q{name}_{s});");
                                let lo = if p.scaled() {
                                    format!("(p{name}_{s} - q{name}_{s}) * {:?}f", p.lo_scale())
                                } else {
                                    format!("p{name}_{s} - q{name}_{s}")
                                };
                                let _ = writeln!(o, "{ind}    sm_{name}l[{si}] = vec4<f16>({lo});");
                            }
                            Prec::Pre | Prec::PreScaled => {
                                for part in ["h", "l"] {
                                    if self.gw() == 8 {
                                        let _ = writeln!(o, "{ind}    sm_{name}{part}[{si}] = p{name}{part}_{s}[0];");
                                        let _ =
                                            writeln!(o, "{ind}    sm_{name}{part}[{si} + 1u] = p{name}{part}_{s}[1];");
                                    } else {
                                        let _ = writeln!(o, "{ind}    sm_{name}{part}[{si}] = p{name}{part}_{s};");
                                    }
                                }
                            }
                        }
                    }
                }
                let _ = writeln!(o, "{ind}}}");
            }
            Step::Compute { buf } => self.emit_compute(o, Some(buf), None, depth),
            Step::ComputeDirect { kt } => self.emit_compute(o, None, Some(kt), depth),
        }
    }

    fn emit_compute(&self, o: &mut String, buf: Option<&E>, kt: Option<&E>, depth: usize) {
        let ind = "    ".repeat(depth);
        let d = &self.d;
        let p = d.prec;
        let (tm, tn) = (d.tm(), d.tn());
        let _ = writeln!(o, "{ind}{{");
        if let Some(kt) = kt {
            let _ = writeln!(o, "{ind}    let kb = {};", self.kb(kt).wgsl());
        }
        let parts: &[&str] = if p.split() { &["h", "l"] } else { &[""] };
        let nkk = d.bk / 16;
        let load = |o: &mut String, kk: u32| {
            for (op, name, count, role) in [(Operand::A, "a", tm, "A"), (Operand::B, "b", tn, "B")] {
                for i in 0..count {
                    let (off, st, row_major) = self.frag(op, i, kk);
                    let f = if row_major { "coopLoadT" } else { "coopLoad" };
                    for part in parts {
                        let (arr, off) = match buf {
                            Some(b) => (format!("sm_{name}{part}"), b * self.buf_vec4s(op) + off.clone()),
                            None => {
                                let arr = if p.presplit() { format!("in_{name}{part}") } else { format!("in_{name}") };
                                (arr, off.clone())
                            }
                        };
                        let _ = writeln!(
                            o,
                            "{ind}    let o{name}{part}_{kk}_{i} = {}; let s{name}{part}_{kk}_{i} = {};",
                            off.wgsl(),
                            st.wgsl()
                        );
                        let (fo, fs) = (format!("o{name}{part}_{kk}_{i}"), format!("s{name}{part}_{kk}_{i}"));
                        let _ = writeln!(
                            o,
                            "{ind}    let f{name}{part}_{kk}_{i} = {f}<coop_mat16x16<f16, {role}>>(&{arr}[{fo}], {fs});"
                        );
                    }
                }
            }
        };
        // acc = a·b + acc for fragments (part, slice, index) of A and B.
        let mad = |o: &mut String, a: (&str, u32, u32), b: (&str, u32, u32), c: String| {
            let _ = writeln!(
                o,
                "{ind}    {c} = coopMultiplyAdd(fa{}_{}_{}, fb{}_{}_{}, {c});",
                a.0, a.1, a.2, b.0, b.1, b.2
            );
        };
        let mma = |o: &mut String, kk: u32| {
            for i in 0..tm {
                for j in 0..tn {
                    let acc = format!("acc_{i}_{j}");
                    if p.split() {
                        let x = if p.scaled() { format!("accx_{i}_{j}") } else { acc.clone() };
                        mad(o, ("h", kk, i), ("l", kk, j), x.clone());
                        mad(o, ("l", kk, i), ("h", kk, j), x);
                        mad(o, ("h", kk, i), ("h", kk, j), acc);
                    } else {
                        mad(o, ("", kk, i), ("", kk, j), acc);
                    }
                }
            }
        };
        if d.fragpf {
            load(o, 0);
            for kk in 0..nkk {
                if kk + 1 < nkk {
                    load(o, kk + 1);
                }
                mma(o, kk);
            }
        } else {
            for kk in 0..nkk {
                load(o, kk);
                mma(o, kk);
            }
        }
        let _ = writeln!(o, "{ind}}}");
    }

    fn emit_epilogue(&self, o: &mut String) {
        let d = &self.d;
        let (tm, tn) = (d.tm(), d.tn());
        let acc_end = self.epi == Epilogue::AccEnd && self.ksplit == 1;
        let acc = self.epi.accumulates() && self.ksplit == 1;
        let mut full = String::new();
        for i in 0..tm {
            for j in 0..tn {
                let (off, st) = self.out_frag(i, j);
                let _ = write!(full, "        {{ let o = {}; let s = {};", off.wgsl(), st.wgsl());
                if acc_end {
                    let _ =
                        write!(full, " acc_{i}_{j} = acc_{i}_{j} + coopLoadT<coop_mat16x16<f32, C>>(&out_c[o], s);");
                }
                let _ = writeln!(full, " coopStoreT(acc_{i}_{j}, &out_c[o], s); }}");
            }
        }
        if !self.masked {
            for line in full.lines() {
                let _ = writeln!(o, "    {}", line.trim_start());
            }
            return;
        }
        let _ = writeln!(o, "    if (full) {{\n{full}    }} else {{");
        for i in 0..tm {
            for j in 0..tn {
                let (off, st) = self.scratch_frag(i, j);
                let _ = writeln!(
                    o,
                    "        {{ let o = {}; let s = {}; coopStoreT(acc_{i}_{j}, &scratch[o], s); }}",
                    off.wgsl(),
                    st.wgsl()
                );
            }
        }
        let _ = writeln!(o, "        storageBarrier();");
        let (src, dst, ok, count) = self.edge_copy();
        let _ = writeln!(o, "        for (var e = 0u; e < {}; e = e + 1u) {{", count.wgsl());
        let _ = writeln!(o, "            if ({}) {{", ok.wgsl());
        let _ = writeln!(o, "                let dst = {};", dst.wgsl());
        if acc {
            let _ = writeln!(o, "                out_c[dst] = out_c[dst] + scratch[{}];", src.wgsl());
        } else {
            let _ = writeln!(o, "                out_c[dst] = scratch[{}];", src.wgsl());
        }
        let _ = writeln!(o, "            }}\n        }}\n    }}");
    }
}

/// The expressions of one load slot.
#[derive(Clone, Debug)]
pub struct SlotExprs {
    pub gidx: E,
    pub ok: E,
    pub elems: Vec<E>,
    pub sidx: E,
}

// ------------------------------------------------------------------------------------------
// Helper kernels (no tensor cores)
// ------------------------------------------------------------------------------------------

/// Split-K reduction: out_c = (acc ? out_c : 0) + Σ_z part[z], valid columns only.
/// Overrides: `RED_N4` (M·LDC/4), `RED_LDC`, `RED_NCOL` (N). Entry point `reduce`; 2-D grid.
pub fn reduce_wgsl(ksplit: u32, accumulate: bool) -> String {
    let mut s = String::from(
        "override RED_N4: u32;\noverride RED_LDC: u32;\noverride RED_NCOL: u32;\n\
         @group(0) @binding(0) var<storage, read> part: array<vec4<f32>>;\n\
         @group(0) @binding(1) var<storage, read_write> out_c: array<vec4<f32>>;\n\n\
         @compute @workgroup_size(256)\n\
         fn reduce(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {\n\
         \x20   let i = gid.x + gid.y * nwg.x * 256u;\n\
         \x20   if (i >= RED_N4) { return; }\n\
         \x20   var sum = part[i];\n",
    );
    for z in 1..ksplit {
        let _ = writeln!(s, "    sum = sum + part[{z}u * RED_N4 + i];");
    }
    if accumulate {
        s += "    sum = sum + out_c[i];\n";
    }
    s += "    let col = (i * 4u) % RED_LDC;\n\
          \x20   let keep = vec4<bool>(col < RED_NCOL, col + 1u < RED_NCOL, col + 2u < RED_NCOL, col + 3u < RED_NCOL);\n\
          \x20   out_c[i] = select(out_c[i], sum, keep);\n}\n";
    s
}

/// hi/lo split of f32 data: hi = f16(quantizeToF16(x)), lo = f16((x − hi)·scale). Override
/// `SPLIT_N4` (elements / 4). Entry point `split`; 2-D grid.
pub fn split_wgsl(scale: f32) -> String {
    format!(
        "enable f16;\noverride SPLIT_N4: u32;\n\
         @group(0) @binding(0) var<storage, read> src: array<vec4<f32>>;\n\
         @group(0) @binding(1) var<storage, read_write> hi: array<vec4<f16>>;\n\
         @group(0) @binding(2) var<storage, read_write> lo: array<vec4<f16>>;\n\n\
         @compute @workgroup_size(256)\n\
         fn split(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{\n\
         \x20   let i = gid.x + gid.y * nwg.x * 256u;\n\
         \x20   if (i >= SPLIT_N4) {{ return; }}\n\
         \x20   let x = src[i];\n\
         \x20   let q = quantizeToF16(x);\n\
         \x20   hi[i] = vec4<f16>(q);\n\
         \x20   lo[i] = vec4<f16>((x - q) * {scale:?}f);\n}}\n"
    )
}

/// Fills a buffer with a 32-bit pattern. Override `FILL_N4` (words / 4), `FILL_BITS`.
/// Entry point `fill`; 2-D grid.
pub fn fill_wgsl() -> String {
    "override FILL_N4: u32;\noverride FILL_BITS: u32;\n\
     @group(0) @binding(0) var<storage, read_write> dst: array<vec4<u32>>;\n\n\
     @compute @workgroup_size(256)\n\
     fn fill(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {\n\
     \x20   let i = gid.x + gid.y * nwg.x * 256u;\n\
     \x20   if (i < FILL_N4) { dst[i] = vec4<u32>(FILL_BITS); }\n}\n"
        .to_string()
}

/// A 2-D grid of 256-invocation workgroups covering `n` invocations.
pub fn grid_1d(n: u32) -> [u32; 3] {
    let wgs = n.div_ceil(256).max(1);
    if wgs <= 65535 { [wgs, 1, 1] } else { [65535, wgs.div_ceil(65535), 1] }
}
