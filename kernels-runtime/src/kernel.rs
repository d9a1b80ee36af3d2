//! What the generated code tells the runtime about each kernel: static descriptions built by
//! `kernels!`, one `KernelDef` per kernel.

/// How a binding is accessed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BindingKind {
    /// `var<storage, read>`
    Read,
    /// `var<storage, read_write>`
    ReadWrite,
    /// `var<uniform>`
    Uniform,
}

/// One binding of a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BindingDef {
    /// `@group`
    pub group: u32,
    /// `@binding`
    pub binding: u32,
    /// The WGSL variable name.
    pub name: &'static str,
    /// Access.
    pub kind: BindingKind,
    /// The WGSL type.
    pub wgsl_type: &'static str,
    /// Storage: bytes per element; uniform: bytes of the value.
    pub stride: u32,
    /// Storage: the fewest elements the binding needs (0 for runtime-sized arrays).
    pub min_elems: u64,
}

/// An `override` constant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OverrideDef {
    /// Its WGSL name.
    pub name: &'static str,
    /// The key wgpu takes: the `@id` if given, else the name.
    pub key: &'static str,
    /// `bool`, `f32`, `u32` or `i32`.
    pub ty: &'static str,
    /// Whether WGSL gives it a default.
    pub has_default: bool,
}

/// How a kernel's grid is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GridKind {
    /// The caller passes a [`Grid`](crate::Grid).
    Caller,
    /// `@grid threads(n)`: one invocation per item, 1-D with the 2-D fallback.
    Threads,
    /// `@grid workgroups(n)`: one workgroup per item (row, block), 1-D with the 2-D fallback.
    Workgroups,
    /// `@grid workgroups(x, y, z)`: an explicit grid.
    Explicit,
}

impl GridKind {
    /// A short name for manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            GridKind::Caller => "caller",
            GridKind::Threads => "threads",
            GridKind::Workgroups => "workgroups",
            GridKind::Explicit => "explicit",
        }
    }
}

/// The element type of a cooperative matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CoopScalar {
    /// `f16`
    F16,
    /// `f32`
    F32,
}

/// A cooperative-matrix configuration (tensor cores) a kernel variant uses: an `m`×`k` A
/// times a `k`×`n` B plus an `m`×`n` C, with A/B elements of type `ab` and C/result elements
/// of type `cr` — the terms of `wgpu::Adapter::cooperative_matrix_properties()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CoopConfig {
    /// Rows of A and C.
    pub m: u32,
    /// Columns of B and C.
    pub n: u32,
    /// Columns of A, rows of B.
    pub k: u32,
    /// Element type of A and B.
    pub ab: CoopScalar,
    /// Element type of C and the result.
    pub cr: CoopScalar,
}

impl CoopScalar {
    /// The WGSL type name.
    pub fn wgsl(self) -> &'static str {
        match self {
            CoopScalar::F16 => "f16",
            CoopScalar::F32 => "f32",
        }
    }
}

impl CoopConfig {
    /// Whether naga 30 can express it in WGSL: square 8×8×8 or 16×16×16 (`coop_mat8x8`,
    /// `coop_mat16x16`), elements `f16` or `f32`. Adapters also list shapes such as 16×8×16,
    /// which no WGSL type names.
    pub fn expressible_in_wgsl(&self) -> bool {
        self.m == self.n && self.n == self.k && matches!(self.m, 8 | 16)
    }
}

impl std::fmt::Display for CoopConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}×{}×{} (A/B {}, C {})", self.m, self.n, self.k, self.ab.wgsl(), self.cr.wgsl())
    }
}

/// One compiled form of a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VariantDef {
    /// Needs `SUBGROUP`.
    pub subgroups: bool,
    /// Needs `SHADER_F16`.
    pub f16: bool,
    /// The cooperative-matrix configurations it uses (empty: none). A variant that uses any
    /// needs `EXPERIMENTAL_COOPERATIVE_MATRIX` and each configuration offered by the adapter;
    /// it has no browser form.
    pub coop: &'static [CoopConfig],
    /// Source for wgpu, with the `enable` directives it needs (`f16`,
    /// `wgpu_cooperative_matrix`).
    pub wgsl: &'static str,
    /// Source for a browser (`enable subgroups;` included where used). Empty for a variant
    /// that uses cooperative matrices (`coop` not empty): WebGPU has none, so such a variant is
    /// native only and a browser runs the kernel's next variant.
    pub browser_wgsl: &'static str,
}

/// Everything about one kernel.
#[derive(Debug)]
pub struct KernelDef {
    /// Kernel (entry point) name.
    pub name: &'static str,
    /// Generated module name.
    pub module: &'static str,
    /// Kernel file, as shown in messages.
    pub file: &'static str,
    /// Line of the kernel's marker.
    pub line: u32,
    /// Doc text from the WGSL comments.
    pub doc: &'static str,
    /// `@workgroup_size`
    pub workgroup_size: [u32; 3],
    /// Bindings in order.
    pub bindings: &'static [BindingDef],
    /// `override` constants.
    pub overrides: &'static [OverrideDef],
    /// How the grid is chosen.
    pub grid: GridKind,
    /// The `@grid` expression, if any.
    pub grid_expr: &'static str,
    /// The `@requires` checks.
    pub requires: &'static [&'static str],
    /// Variants, preferred first.
    pub variants: &'static [VariantDef],
}

impl KernelDef {
    /// `module::kernel`
    pub fn qualified_name(&self) -> String {
        format!("{}::{}", self.module, self.name)
    }

    /// Invocations per workgroup.
    pub fn threads_per_workgroup(&self) -> u64 {
        self.workgroup_size.iter().map(|&d| d as u64).product()
    }

    /// Whether every variant needs f16, so that the kernel cannot run without `SHADER_F16`
    /// (a kernel whose tensor-core variant uses f16 but whose fallback does not is `false`).
    pub fn needs_f16(&self) -> bool {
        self.variants.iter().all(|v| v.f16)
    }
}
