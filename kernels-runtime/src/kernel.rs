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
    /// Storage: bytes before the elements. 0 for an array; for a struct whose last member is
    /// a runtime-sized array, the size of its fixed part (the array's offset), bound as a
    /// [`StructBuffer`](crate::StructBuffer).
    pub offset: u32,
}

/// The dimension of a texture binding (`texture_2d`, `texture_storage_3d`, …).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TextureDim {
    /// `texture_1d`
    D1,
    /// `texture_2d`
    D2,
    /// `texture_2d_array`
    D2Array,
    /// `texture_3d`
    D3,
    /// `texture_cube`
    Cube,
    /// `texture_cube_array`
    CubeArray,
}

impl TextureDim {
    /// The view dimension wgpu binds.
    pub fn view_dimension(self) -> wgpu::TextureViewDimension {
        match self {
            TextureDim::D1 => wgpu::TextureViewDimension::D1,
            TextureDim::D2 => wgpu::TextureViewDimension::D2,
            TextureDim::D2Array => wgpu::TextureViewDimension::D2Array,
            TextureDim::D3 => wgpu::TextureViewDimension::D3,
            TextureDim::Cube => wgpu::TextureViewDimension::Cube,
            TextureDim::CubeArray => wgpu::TextureViewDimension::CubeArray,
        }
    }

    /// The WGSL spelling after `texture_` (`2d`, `cube_array`, …).
    pub fn wgsl(self) -> &'static str {
        match self {
            TextureDim::D1 => "1d",
            TextureDim::D2 => "2d",
            TextureDim::D2Array => "2d_array",
            TextureDim::D3 => "3d",
            TextureDim::Cube => "cube",
            TextureDim::CubeArray => "cube_array",
        }
    }
}

/// What a sampled texture binding reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SampleKind {
    /// `texture_*<f32>`; `filterable` where the kernel samples it with a sampler (then the
    /// bound texture's format must be filterable).
    Float {
        /// Sampled through a sampler.
        filterable: bool,
    },
    /// `texture_*<i32>`
    Sint,
    /// `texture_*<u32>`
    Uint,
    /// `texture_depth_*`
    Depth,
}

/// How a kernel may access a storage texture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TextureAccess {
    /// `read`
    Read,
    /// `write`
    Write,
    /// `read_write`
    ReadWrite,
}

/// What a resource binding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResourceKind {
    /// A sampled texture (`texture_2d<f32>`, `texture_depth_2d`, …).
    Texture {
        /// Its dimension.
        dim: TextureDim,
        /// What it reads.
        sample: SampleKind,
        /// `texture_multisampled_2d`
        multisampled: bool,
    },
    /// A storage texture (`texture_storage_2d<rgba8unorm, write>`).
    StorageTexture {
        /// Its dimension.
        dim: TextureDim,
        /// Its texel format.
        format: wgpu::TextureFormat,
        /// How the kernel accesses it.
        access: TextureAccess,
    },
    /// A sampler: `sampler` or `sampler_comparison`.
    Sampler {
        /// `sampler_comparison`.
        comparison: bool,
        /// A `sampler` that may filter: the kernel samples only filterable float textures with
        /// it. One that samples a depth texture binds as non-filtering (nearest filters only).
        filtering: bool,
    },
}

/// A texture or sampler binding. In a [`Call`](crate::Call) their arguments follow the
/// buffers' (one per [`KernelDef::bindings`] entry), in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ResourceDef {
    /// `@group`
    pub group: u32,
    /// `@binding`
    pub binding: u32,
    /// The WGSL variable name.
    pub name: &'static str,
    /// What it is.
    pub kind: ResourceKind,
    /// The WGSL type.
    pub wgsl_type: &'static str,
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
    /// that uses cooperative matrices (`coop` not empty) or needs one of `features`: WebGPU has
    /// none of them, so such a variant is native only and a browser runs the kernel's next
    /// variant.
    pub browser_wgsl: &'static str,
    /// The other wgpu features it needs, by their names in [`wgpu::Features`]
    /// (`SHADER_INT64`, `SHADER_F64`, `SHADER_INT64_ATOMIC_MIN_MAX`,
    /// `SHADER_INT64_ATOMIC_ALL_OPS`, `IMMEDIATES`).
    pub features: &'static [&'static str],
    /// The keys ([`OverrideDef::key`]: the `@id` if given, else the name) of the `override`
    /// declarations its sources have. A kernel's [`KernelDef::overrides`] are its preferred
    /// variant's; another variant may lack some (a shape compiled into a tensor-core loop that
    /// the portable loop reads from a uniform), and a pipeline of it gets only the values of
    /// these.
    pub overrides: &'static [&'static str],
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
    /// `@workgroup_size`: for a dimension given by an override, the override's default (0
    /// where it has none); see `workgroup_size_overrides`.
    pub workgroup_size: [u32; 3],
    /// For each dimension of `@workgroup_size` given by an `override`, the override's key (as
    /// in [`OverrideDef::key`]): the pipeline is built with the value of the call, and grids and
    /// checks use it.
    pub workgroup_size_overrides: [Option<&'static str>; 3],
    /// Bytes of the kernel's `var<immediate>` (0: it has none). Its value is the last
    /// argument of a [`Call`](crate::Call), after the buffers and the resources.
    pub immediate_size: u32,
    /// Buffer bindings (storage and uniform) in order.
    pub bindings: &'static [BindingDef],
    /// Texture and sampler bindings in order.
    pub resources: &'static [ResourceDef],
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
    /// Marked `// @unchecked`: its author states that the kernel keeps every array index,
    /// texel coordinate, loop and integer division in range once its `@requires` hold, so
    /// natively its shader module is created with `wgpu::ShaderRuntimeChecks::unchecked()`:
    /// without naga's clamping of indices into workgroup, private and fixed-size arrays (and
    /// into buffers where naga adds it), its loop bounding and its integer-division guards.
    /// Storage and uniform buffers stay bounded by the driver's robust buffer access where wgpu
    /// enables it (Vulkan), and workgroup memory is zero-initialised as for every kernel. A
    /// browser checks regardless; [`GpuOptions::runtime_checks`](crate::GpuOptions::runtime_checks)
    /// (`KERNELS_RUNTIME_CHECKS=all`) turns the checks back on everywhere.
    pub unchecked: bool,
    /// Where its source lives and the interface its Rust function was generated against, for
    /// hot reload (`None`: a kernel made by hand, which is never reloaded).
    pub source: Option<&'static KernelSource>,
}

/// The files a `kernels!` module was assembled from, as the macro resolved them, and what host
/// code reads from the module beside its kernels (its constants). Hot reload watches the files
/// and compiles them again as the macro did.
#[derive(Debug)]
pub struct FileSource {
    /// The calling crate's manifest directory, which paths in messages are relative to.
    pub manifest_dir: Option<&'static str>,
    /// The kernel file (absolute).
    pub kernel_file: &'static str,
    /// The kernel file as shown in messages.
    pub display: &'static str,
    /// The shared preamble (absolute), if any.
    pub shared: Option<&'static str>,
    /// The generated module's name.
    pub module: &'static str,
    /// Every file read (absolute): the kernel file, the shared preamble, every included file.
    pub files: &'static [&'static str],
    /// The module's constants as the program was compiled with them, one per line.
    pub interface: &'static str,
    /// The module's kernels (those that compiled).
    pub kernels: &'static [&'static KernelDef],
}

/// A kernel's place in its [`FileSource`], with the interface its Rust function was generated
/// against (bindings, layouts, workgroup size, overrides, annotations; one item per line).
#[derive(Debug)]
pub struct KernelSource {
    /// The module's files.
    pub file: &'static FileSource,
    /// The compiled interface.
    pub interface: &'static str,
}

impl KernelDef {
    /// `module::kernel`
    pub fn qualified_name(&self) -> String {
        format!("{}::{}", self.module, self.name)
    }

    /// Invocations per workgroup, with the workgroup size's defaults.
    pub fn threads_per_workgroup(&self) -> u64 {
        self.workgroup_size.iter().map(|&d| d as u64).product()
    }

    /// The workgroup size a pipeline built with `overrides` (by key, as a [`Call`](crate::Call)
    /// passes them) has: each dimension an override gives takes its value, else its default.
    /// An override without a value or default, or a value that is not a positive integer, is
    /// [`Error::BadArguments`](crate::Error::BadArguments) naming `@workgroup_size`.
    pub fn workgroup_size_with(&self, overrides: &[(&'static str, f64)]) -> crate::Result<[u32; 3]> {
        let mut size = self.workgroup_size;
        for (i, key) in self.workgroup_size_overrides.iter().enumerate() {
            let Some(key) = key else { continue };
            let name = self.overrides.iter().find(|o| o.key == *key).map_or(*key, |o| o.name);
            let value = match overrides.iter().find(|(k, _)| k == key) {
                Some(&(_, v)) => v,
                None if size[i] > 0 => continue,
                None => {
                    return Err(crate::Error::BadArguments {
                        kernel: self.qualified_name(),
                        detail: format!(
                            "`@workgroup_size` takes dimension {} from override `{name}`, which has no default: set it in the overrides argument",
                            ["x", "y", "z"][i]
                        ),
                    });
                }
            };
            if !(value >= 1.0 && value <= f64::from(u32::MAX) && value.fract() == 0.0) {
                return Err(crate::Error::BadArguments {
                    kernel: self.qualified_name(),
                    detail: format!(
                        "override `{name}` = {value} gives `@workgroup_size` dimension {}, which must be a positive integer",
                        ["x", "y", "z"][i]
                    ),
                });
            }
            size[i] = value as u32;
        }
        Ok(size)
    }

    /// Whether every variant needs f16, so that the kernel cannot run without `SHADER_F16`
    /// (a kernel whose tensor-core variant uses f16 but whose fallback does not is `false`).
    pub fn needs_f16(&self) -> bool {
        self.variants.iter().all(|v| v.f16)
    }

    /// Whether every variant needs tensor cores (cooperative matrices), so that the kernel runs
    /// only natively on an adapter that has them and has no browser form: its callers record
    /// another kernel elsewhere.
    pub fn needs_tensor_cores(&self) -> bool {
        self.variants.iter().all(|v| !v.coop.is_empty())
    }
}
