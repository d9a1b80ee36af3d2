//! Stage 5: a kernel's interface read from naga's IR: its bindings with Rust types, the host
//! layout of every struct they use, its override constants and its workgroup size.

use naga::proc::Layouter;
use naga::{AddressSpace, Handle, Module, Scalar, ScalarKind, StorageAccess, Type, TypeInner};

/// A host-side scalar.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HostScalar {
    /// `f32`
    F32,
    /// `u32` (also `atomic<u32>`)
    U32,
    /// `i32` (also `atomic<i32>`)
    I32,
    /// `f16`, as `half::f16`
    F16,
    /// `u64` (also `atomic<u64>`; needs `SHADER_INT64`)
    U64,
    /// `i64` (also `atomic<i64>`; needs `SHADER_INT64`)
    I64,
    /// `f64` (needs `SHADER_F64`)
    F64,
}

impl HostScalar {
    /// Size in bytes.
    pub fn size(self) -> u32 {
        match self {
            HostScalar::F16 => 2,
            HostScalar::U64 | HostScalar::I64 | HostScalar::F64 => 8,
            _ => 4,
        }
    }

    /// The WGSL spelling.
    pub fn wgsl(self) -> &'static str {
        match self {
            HostScalar::F32 => "f32",
            HostScalar::U32 => "u32",
            HostScalar::I32 => "i32",
            HostScalar::F16 => "f16",
            HostScalar::U64 => "u64",
            HostScalar::I64 => "i64",
            HostScalar::F64 => "f64",
        }
    }

    /// Whether values of it can be used in shape expressions.
    pub fn is_integer(self) -> bool {
        matches!(self, HostScalar::U32 | HostScalar::I32 | HostScalar::U64 | HostScalar::I64)
    }
}

/// A host-side type with the exact size of its WGSL counterpart.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum HostType {
    /// A scalar.
    Scalar(HostScalar),
    /// `[T; N]`: vectors, matrix columns, fixed arrays.
    Array(Box<HostType>, u32),
    /// A generated `#[repr(C)]` struct.
    Struct(String),
}

impl HostType {
    /// The WGSL-side description used in docs and manifests.
    pub fn describe(&self) -> String {
        match self {
            HostType::Scalar(s) => s.wgsl().to_string(),
            HostType::Array(t, n) => format!("[{}; {n}]", t.describe()),
            HostType::Struct(n) => n.clone(),
        }
    }
}

/// A field of a generated struct; `name == None` is explicit padding.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Field {
    /// WGSL member name, or `None` for padding.
    pub name: Option<String>,
    /// Host type (`[u8; size]` for padding).
    pub ty: Option<HostType>,
    /// Byte offset.
    pub offset: u32,
    /// Byte size.
    pub size: u32,
}

/// A struct with WGSL layout.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StructDef {
    /// WGSL name.
    pub name: String,
    /// Size in bytes (a multiple of its alignment).
    pub size: u32,
    /// Fields and padding in order, covering `0..size` exactly.
    pub fields: Vec<Field>,
}

/// How a binding is accessed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// `var<storage, read>`
    Read,
    /// `var<storage, read_write>`
    ReadWrite,
    /// `var<uniform>`
    Uniform,
}

/// One resource binding of a kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    /// `@group`
    pub group: u32,
    /// `@binding`
    pub binding: u32,
    /// The variable name, used as the Rust parameter name.
    pub name: String,
    /// Access.
    pub access: Access,
    /// Storage: the element type; uniform: the value type.
    pub ty: HostType,
    /// The WGSL type as written by naga (for docs and manifests).
    pub wgsl: String,
    /// Storage: bytes between elements; uniform: size of the value.
    pub stride: u32,
    /// Storage: fewest elements the binding must hold.
    pub min_elems: u64,
    /// Storage: whether the array is runtime-sized.
    pub runtime_sized: bool,
    /// Storage of a struct whose last member is a runtime-sized array and which has other
    /// members: its fixed part (a generated struct named like the WGSL one, padded to where
    /// the array starts). `ty` is then the array's element.
    pub header: Option<HostType>,
    /// Storage: bytes before the elements (the array's offset in such a struct; else 0).
    pub offset: u32,
}

/// The dimension of a texture binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TextureDim {
    /// `1d`
    D1,
    /// `2d`
    D2,
    /// `2d_array`
    D2Array,
    /// `3d`
    D3,
    /// `cube`
    Cube,
    /// `cube_array`
    CubeArray,
}

impl TextureDim {
    /// The name of the runtime's type and enum variant (`D2`, `CubeArray`).
    pub fn rust(self) -> &'static str {
        match self {
            TextureDim::D1 => "D1",
            TextureDim::D2 => "D2",
            TextureDim::D2Array => "D2Array",
            TextureDim::D3 => "D3",
            TextureDim::Cube => "Cube",
            TextureDim::CubeArray => "CubeArray",
        }
    }

    /// WebGPU's `GPUTextureViewDimension`.
    pub fn webgpu(self) -> &'static str {
        match self {
            TextureDim::D1 => "1d",
            TextureDim::D2 => "2d",
            TextureDim::D2Array => "2d-array",
            TextureDim::D3 => "3d",
            TextureDim::Cube => "cube",
            TextureDim::CubeArray => "cube-array",
        }
    }
}

/// What a sampled texture reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SampleKind {
    /// `f32`; `filterable` where the entry point samples it through a sampler.
    Float {
        /// Sampled through a sampler.
        filterable: bool,
    },
    /// `i32`
    Sint,
    /// `u32`
    Uint,
    /// `texture_depth_*`
    Depth,
}

/// How a storage texture is accessed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TextureAccess {
    /// `read`
    Read,
    /// `write`
    Write,
    /// `read_write`
    ReadWrite,
}

/// The storage texture formats `kernels!` binds: naga's (and wgpu's, and the runtime's marker
/// types') names. Their WGSL names are these in lower case.
pub const STORAGE_FORMATS: [&str; 21] = [
    "R8Unorm",
    "Rg8Unorm",
    "Rgba8Unorm",
    "Rgba8Snorm",
    "Bgra8Unorm",
    "Rgba8Uint",
    "Rgba8Sint",
    "R16Float",
    "Rg16Float",
    "Rgba16Float",
    "Rgba16Uint",
    "Rgba16Sint",
    "R32Float",
    "R32Uint",
    "R32Sint",
    "Rg32Float",
    "Rg32Uint",
    "Rg32Sint",
    "Rgba32Float",
    "Rgba32Uint",
    "Rgba32Sint",
];

/// What a texture or sampler binding is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ResourceKind {
    /// A sampled texture.
    Texture {
        /// Its dimension.
        dim: TextureDim,
        /// What it reads.
        sample: SampleKind,
    },
    /// A storage texture.
    StorageTexture {
        /// Its dimension.
        dim: TextureDim,
        /// Its format, by its name in [`STORAGE_FORMATS`].
        format: &'static str,
        /// Its access.
        access: TextureAccess,
    },
    /// A sampler.
    Sampler {
        /// `sampler_comparison`.
        comparison: bool,
        /// Filters: samples no depth texture.
        filtering: bool,
    },
}

/// A texture or sampler binding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resource {
    /// `@group`
    pub group: u32,
    /// `@binding`
    pub binding: u32,
    /// The variable name.
    pub name: String,
    /// What it is.
    pub kind: ResourceKind,
    /// The WGSL type.
    pub wgsl: String,
}

/// The kernel's `var<immediate>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Immediate {
    /// The variable name (the parameter's).
    pub name: String,
    /// Its host type.
    pub ty: HostType,
    /// Its WGSL type.
    pub wgsl: String,
    /// Bytes, a multiple of 4.
    pub size: u32,
}

/// How an entry point uses a binding: naga's analysis of the entry point and every function it
/// calls (an atomic operation both reads and writes; `arrayLength` does neither).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Usage {
    /// Some path reads it.
    pub read: bool,
    /// Some path writes it.
    pub written: bool,
}

/// One pipeline-overridable constant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OverrideDef {
    /// Name (used as the key unless `id` is set).
    pub name: String,
    /// `@id`, if given.
    pub id: Option<u16>,
    /// Type: `bool`, `f32`, `u32` or `i32`.
    pub ty: &'static str,
    /// Whether it has a default.
    pub has_default: bool,
}

impl OverrideDef {
    /// The key wgpu takes for it: the `@id` if given, else the name.
    pub fn key(&self) -> String {
        override_key(&self.name, self.id)
    }
}

/// The key wgpu takes for the override `name` with `@id` `id`: the id if given, else the name.
pub fn override_key(name: &str, id: Option<u16>) -> String {
    id.map_or_else(|| name.to_string(), |i| i.to_string())
}

/// Everything the host needs to call a kernel.
#[derive(Clone, Debug, Default)]
pub struct Interface {
    /// `@workgroup_size`; a dimension an override gives holds the override's default (0 if
    /// it has none).
    pub workgroup_size: [u32; 3],
    /// The override giving each dimension of `@workgroup_size`, by name (`None`: constant).
    pub workgroup_size_overrides: [Option<String>; 3],
    /// Buffer bindings in (group, binding) order; only those the entry point uses.
    pub bindings: Vec<Binding>,
    /// Texture and sampler bindings in (group, binding) order; only those the entry point uses.
    pub resources: Vec<Resource>,
    /// The `var<immediate>` the entry point uses.
    pub immediate: Option<Immediate>,
    /// Structs used by the bindings, dependencies first.
    pub structs: Vec<StructDef>,
    /// Override constants.
    pub overrides: Vec<OverrideDef>,
    /// Module-scope integer constants, for shape expressions.
    pub consts: Vec<(String, i128)>,
    /// Module-scope scalar constants for the host: (name, Rust type, value as a Rust literal).
    pub exported: Vec<(String, &'static str, String)>,
    /// How the entry point uses each binding, by binding name; empty when the module was not
    /// validated (no analysis to read).
    pub usage: Vec<(String, Usage)>,
}

/// Why a kernel's interface cannot be given to the host, and where (a span in the module's
/// text, when the problem is a declaration; else the entry point is meant).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReflectError {
    /// What is wrong.
    pub message: String,
    /// The declaration it is about.
    pub span: Option<std::ops::Range<usize>>,
    /// An attribute of the entry point it is about (`workgroup_size`), when `span` is `None`.
    pub attribute: Option<&'static str>,
}

impl From<String> for ReflectError {
    fn from(message: String) -> Self {
        ReflectError { message, span: None, attribute: None }
    }
}

impl From<&str> for ReflectError {
    fn from(message: &str) -> Self {
        ReflectError { message: message.into(), span: None, attribute: None }
    }
}

/// Reads the interface of entry point `name`.
pub fn reflect(module: &Module, info: Option<&naga::valid::ModuleInfo>, name: &str) -> Result<Interface, ReflectError> {
    let (index, ep) = module
        .entry_points
        .iter()
        .enumerate()
        .find(|(_, ep)| ep.name == name && ep.stage == naga::ShaderStage::Compute)
        .ok_or_else(|| format!("no `@compute fn {name}`"))?;
    let mut workgroup_size = ep.workgroup_size;
    let mut workgroup_size_overrides: [Option<String>; 3] = [None, None, None];
    for (i, e) in ep.workgroup_size_overrides.iter().flatten().enumerate() {
        let Some(e) = e else { continue };
        let dim = ["x", "y", "z"][i];
        let naga::Expression::Override(o) = module.global_expressions[*e] else {
            return Err(ReflectError {
                message: format!(
                    "`@workgroup_size` dimension {dim} is an expression of overrides; kernels! takes a constant or one override per dimension (the runtime builds the pipeline with its value and dispatches with it)"
                ),
                span: None,
                attribute: Some("workgroup_size"),
            });
        };
        let o = &module.overrides[o];
        workgroup_size_overrides[i] = o.name.clone();
        workgroup_size[i] = match o.init.map(|init| &module.global_expressions[init]) {
            Some(naga::Expression::Literal(naga::Literal::U32(v))) => *v,
            Some(naga::Expression::Literal(naga::Literal::I32(v))) => u32::try_from(*v).unwrap_or(0),
            Some(naga::Expression::Literal(naga::Literal::AbstractInt(v))) => u32::try_from(*v).unwrap_or(0),
            None => 0,
            Some(_) => {
                return Err(ReflectError {
                    message: format!(
                        "override `{}` gives `@workgroup_size` dimension {dim}; its default must be an integer literal (or it has none and every call sets it)",
                        o.name.as_deref().unwrap_or("?")
                    ),
                    span: module
                        .overrides
                        .iter()
                        .find(|(_, x)| x.name == o.name)
                        .and_then(|(h, _)| module.overrides.get_span(h).to_range()),
                    attribute: None,
                });
            }
        };
    }
    let mut layouter = Layouter::default();
    layouter.update(module.to_ctx()).map_err(|e| format!("layout: {e}"))?;
    let at = |span: naga::Span, message: String| ReflectError { message, span: span.to_range(), attribute: None };
    // (texture, sampler) pairs the entry point samples with.
    let sampling: Vec<(Handle<naga::GlobalVariable>, Handle<naga::GlobalVariable>)> = info
        .map(|i| i.get_entry_point(index).sampling_set.iter().map(|k| (k.image, k.sampler)).collect())
        .unwrap_or_default();
    let mut resources = Vec::new();
    let mut immediate = None;
    let mut r = Reflector { module, layouter: &layouter, structs: Vec::new() };
    let mut bindings = Vec::new();
    let mut spans: Vec<(String, naga::Span)> = Vec::new();
    let mut usage = Vec::new();
    for (handle, var) in module.global_variables.iter() {
        if var.space == AddressSpace::Immediate
            && info.is_none_or(|info| !info.get_entry_point(index)[handle].is_empty())
        {
            let name = var.name.clone().unwrap_or_else(|| "immediate".into());
            let span = module.global_variables.get_span(handle);
            let ty = r.host(var.ty).map_err(|e| at(span, format!("`var<immediate> {name}`: {e}")))?;
            spans.push((name.clone(), span));
            immediate = Some(Immediate {
                wgsl: wgsl_name(module, var.ty),
                size: layouter[var.ty].size.next_multiple_of(4),
                name,
                ty,
            });
            continue;
        }
        let Some(rb) = &var.binding else { continue };
        if let Some(info) = info
            && info.get_entry_point(index)[handle].is_empty()
        {
            continue;
        }
        let name = var.name.clone().unwrap_or_else(|| format!("binding{}", rb.binding));
        let span = module.global_variables.get_span(handle);
        if let Some(info) = info {
            use naga::valid::GlobalUse;
            let uses = info.get_entry_point(index)[handle];
            let read = uses.intersects(GlobalUse::READ | GlobalUse::ATOMIC);
            let written = uses.intersects(GlobalUse::WRITE | GlobalUse::ATOMIC);
            usage.push((name.clone(), Usage { read, written }));
        }
        let binding = match var.space {
            AddressSpace::Storage { access } => {
                let access = if access.contains(StorageAccess::STORE) { Access::ReadWrite } else { Access::Read };
                let (ty, stride, min_elems, runtime_sized, header, offset) =
                    r.storage(var.ty).map_err(|e| at(span, format!("binding `{name}`: {e}")))?;
                Binding {
                    group: rb.group,
                    binding: rb.binding,
                    wgsl: wgsl_name(module, var.ty),
                    name,
                    access,
                    ty,
                    stride,
                    min_elems,
                    runtime_sized,
                    header,
                    offset,
                }
            }
            AddressSpace::Uniform => {
                let ty = r.host(var.ty).map_err(|e| at(span, format!("binding `{name}`: {e}")))?;
                Binding {
                    group: rb.group,
                    binding: rb.binding,
                    wgsl: wgsl_name(module, var.ty),
                    name,
                    access: Access::Uniform,
                    ty,
                    stride: layouter[var.ty].size,
                    min_elems: 1,
                    runtime_sized: false,
                    header: None,
                    offset: 0,
                }
            }
            AddressSpace::Handle => {
                let kind = resource_kind(module, handle, var.ty, &sampling)
                    .map_err(|e| at(span, format!("binding `{name}` {e}")))?;
                if rb.group != 0 {
                    return Err(at(
                        span,
                        format!(
                            "binding `{name}` is in @group({}); kernels! puts every binding in @group(0)",
                            rb.group
                        ),
                    ));
                }
                spans.push((name.clone(), span));
                resources.push(Resource {
                    group: rb.group,
                    binding: rb.binding,
                    wgsl: wgsl_name(module, var.ty),
                    name,
                    kind,
                });
                continue;
            }
            other => {
                return Err(at(
                    span,
                    format!(
                        "binding `{name}` is in address space {other:?}, which kernels! does not bind (storage buffers, uniforms, textures and samplers)"
                    ),
                ));
            }
        };
        if rb.group != 0 {
            return Err(at(
                span,
                format!(
                    "binding `{}` is in @group({}); kernels! puts every binding in @group(0)",
                    binding.name, rb.group
                ),
            ));
        }
        spans.push((binding.name.clone(), span));
        bindings.push(binding);
    }
    bindings.sort_by_key(|b| (b.group, b.binding));
    resources.sort_by_key(|b| (b.group, b.binding));
    let mut overrides = Vec::new();
    for (h, o) in module.overrides.iter() {
        let ty = match module.types[o.ty].inner {
            TypeInner::Scalar(Scalar::BOOL) => "bool",
            TypeInner::Scalar(Scalar::F32) => "f32",
            TypeInner::Scalar(Scalar::U32) => "u32",
            TypeInner::Scalar(Scalar::I32) => "i32",
            _ => {
                return Err(at(
                    module.overrides.get_span(h),
                    format!(
                        "override `{}` has a type kernels! does not support (bool, f32, u32 or i32)",
                        o.name.as_deref().unwrap_or("?")
                    ),
                ));
            }
        };
        overrides.push(OverrideDef {
            name: o.name.clone().unwrap_or_default(),
            id: o.id,
            ty,
            has_default: o.init.is_some(),
        });
    }
    // Names WGSL keeps apart may be one identifier in Rust, which normalizes them (NFC): the
    // parameters, the companion's types, the fields of `Overrides` and of each struct.
    one_name_each(spans.iter().map(|(n, s)| (n.as_str(), *s)), "binding")?;
    let type_span = |name: &str| {
        module
            .types
            .iter()
            .find(|(_, t)| t.name.as_deref() == Some(name))
            .map_or(naga::Span::UNDEFINED, |(h, _)| module.types.get_span(h))
    };
    one_name_each(r.structs.iter().map(|s| (s.name.as_str(), type_span(&s.name))), "struct")?;
    one_name_each(
        module.overrides.iter().map(|(h, o)| (o.name.as_deref().unwrap_or(""), module.overrides.get_span(h))),
        "override",
    )?;
    for s in &r.structs {
        let span = type_span(&s.name);
        one_name_each(
            s.fields.iter().filter_map(|f| f.name.as_deref()).map(|n| (n, span)),
            &format!("`{}` field", s.name),
        )?;
    }
    let (consts, exported) = constants(module);
    Ok(Interface {
        workgroup_size,
        workgroup_size_overrides,
        bindings,
        resources,
        immediate,
        structs: r.structs,
        overrides,
        consts,
        exported,
        usage,
    })
}

/// What a texture or sampler global is (an error says why it cannot be bound).
fn resource_kind(
    module: &Module,
    handle: Handle<naga::GlobalVariable>,
    ty: Handle<Type>,
    sampling: &[(Handle<naga::GlobalVariable>, Handle<naga::GlobalVariable>)],
) -> Result<ResourceKind, String> {
    use naga::{ImageClass, ImageDimension};
    match module.types[ty].inner {
        TypeInner::Sampler { comparison } => {
            let depth = sampling.iter().filter(|(_, s)| *s == handle).any(|(image, _)| {
                matches!(
                    module.types[module.global_variables[*image].ty].inner,
                    TypeInner::Image { class: ImageClass::Depth { .. }, .. }
                )
            });
            Ok(ResourceKind::Sampler { comparison, filtering: !comparison && !depth })
        }
        TypeInner::Image { dim, arrayed, class } => {
            let dim = match (dim, arrayed) {
                (ImageDimension::D1, false) => TextureDim::D1,
                (ImageDimension::D2, false) => TextureDim::D2,
                (ImageDimension::D2, true) => TextureDim::D2Array,
                (ImageDimension::D3, false) => TextureDim::D3,
                (ImageDimension::Cube, false) => TextureDim::Cube,
                (ImageDimension::Cube, true) => TextureDim::CubeArray,
                (d, a) => {
                    return Err(format!(
                        "is a texture of dimension {d:?}{}, which WGSL has no type for",
                        if a { " arrayed" } else { "" }
                    ));
                }
            };
            match class {
                ImageClass::Sampled { multi: true, .. } | ImageClass::Depth { multi: true } => {
                    Err("is a multisampled texture, which kernels! does not bind (a compute kernel reads single-sampled textures)".into())
                }
                ImageClass::External => Err("is a `texture_external`, which kernels! does not bind (it comes from video frames, not from a kernel's data)".into()),
                ImageClass::Sampled { kind, .. } => {
                    let sample = match kind {
                        ScalarKind::Float => SampleKind::Float { filterable: sampling.iter().any(|(i, _)| *i == handle) },
                        ScalarKind::Sint => SampleKind::Sint,
                        ScalarKind::Uint => SampleKind::Uint,
                        other => return Err(format!("samples {other:?}, which no texture holds")),
                    };
                    Ok(ResourceKind::Texture { dim, sample })
                }
                ImageClass::Depth { .. } => Ok(ResourceKind::Texture { dim, sample: SampleKind::Depth }),
                ImageClass::Storage { format, access } => {
                    let name = format!("{format:?}");
                    let Some(format) = STORAGE_FORMATS.iter().copied().find(|f| *f == name) else {
                        return Err(format!(
                            "has the storage format `{}`, which kernels! does not bind (it binds {})",
                            name.to_lowercase(),
                            STORAGE_FORMATS.map(|f| f.to_lowercase()).join(", ")
                        ));
                    };
                    let read = access.contains(StorageAccess::LOAD);
                    let write = access.contains(StorageAccess::STORE);
                    let access = match (read, write) {
                        (true, true) => TextureAccess::ReadWrite,
                        (true, false) => TextureAccess::Read,
                        _ => TextureAccess::Write,
                    };
                    Ok(ResourceKind::StorageTexture { dim, format, access })
                }
            }
        }
        TypeInner::BindingArray { .. } => Err("is a binding array, which kernels! does not bind".into()),
        ref other => Err(format!("has type {other:?}, which kernels! does not bind")),
    }
}

/// An error at the second of two names that differ in WGSL but not in Rust (see
/// [`rust_name`](crate::split::rust_name)).
fn one_name_each<'a>(names: impl Iterator<Item = (&'a str, naga::Span)>, what: &str) -> Result<(), ReflectError> {
    use crate::split::{rust_name, spelled};
    let mut seen: Vec<(&str, String)> = Vec::new();
    for (name, span) in names {
        let key = rust_name(name);
        if let Some((first, _)) = seen.iter().find(|(n, k)| *k == key && *n != name) {
            return Err(ReflectError {
                message: format!(
                    "{what} `{name}` and {what} `{first}` are one name in the generated Rust: they differ only in \
                     Unicode composition (`{}` and `{}`), and Rust normalizes identifiers (NFC); rename one",
                    spelled(name),
                    spelled(first)
                ),
                span: span.to_range(),
                attribute: None,
            });
        }
        seen.push((name, key));
    }
    Ok(())
}

/// The module-scope constants with a literal value: integers (for shape expressions), and
/// `u32`/`i32`/`f32`/`bool` ones as (name, Rust type, value as a Rust literal) for the host.
#[allow(clippy::type_complexity)]
pub fn constants(module: &Module) -> (Vec<(String, i128)>, Vec<(String, &'static str, String)>) {
    let mut consts = Vec::new();
    let mut exported = Vec::new();
    for (_, c) in module.constants.iter() {
        let Some(cname) = &c.name else { continue };
        if let naga::Expression::Literal(lit) = module.global_expressions[c.init] {
            let v = match lit {
                naga::Literal::U32(v) => Some(v as i128),
                naga::Literal::I32(v) => Some(v as i128),
                naga::Literal::U64(v) => Some(v as i128),
                naga::Literal::I64(v) => Some(v as i128),
                naga::Literal::AbstractInt(v) => Some(v as i128),
                _ => None,
            };
            if let Some(v) = v {
                consts.push((cname.clone(), v));
            }
            let host = match lit {
                naga::Literal::U32(v) => Some(("u32", format!("{v}"))),
                naga::Literal::I32(v) => Some(("i32", format!("{v}"))),
                naga::Literal::F32(v) if v.is_finite() => Some(("f32", format!("{v:?}"))),
                naga::Literal::Bool(v) => Some(("bool", format!("{v}"))),
                _ => None,
            };
            if let Some((ty, value)) = host {
                exported.push((cname.clone(), ty, value));
            }
        }
    }
    (consts, exported)
}

fn wgsl_name(module: &Module, ty: Handle<Type>) -> String {
    module.types[ty].name.clone().unwrap_or_else(|| describe_inner(module, &module.types[ty].inner))
}

fn describe_inner(module: &Module, inner: &TypeInner) -> String {
    match *inner {
        TypeInner::Scalar(s) => scalar_name(s),
        TypeInner::Vector { size, scalar } => format!("vec{}<{}>", size as u8, scalar_name(scalar)),
        TypeInner::Matrix { columns, rows, scalar } => {
            format!("mat{}x{}<{}>", columns as u8, rows as u8, scalar_name(scalar))
        }
        TypeInner::Atomic(s) => format!("atomic<{}>", scalar_name(s)),
        TypeInner::Array { base, size, .. } => match size {
            naga::ArraySize::Constant(n) => format!("array<{}, {n}>", wgsl_name(module, base)),
            _ => format!("array<{}>", wgsl_name(module, base)),
        },
        TypeInner::Struct { .. } => "struct".into(),
        TypeInner::Sampler { comparison } => if comparison { "sampler_comparison" } else { "sampler" }.into(),
        TypeInner::Image { dim, arrayed, class } => {
            use naga::{ImageClass, ImageDimension};
            let d = match dim {
                ImageDimension::D1 => "1d",
                ImageDimension::D2 => "2d",
                ImageDimension::D3 => "3d",
                ImageDimension::Cube => "cube",
            };
            let a = if arrayed { "_array" } else { "" };
            match class {
                ImageClass::Sampled { kind, multi } => {
                    let s = scalar_name(Scalar { kind, width: 4 });
                    if multi { format!("texture_multisampled_{d}{a}<{s}>") } else { format!("texture_{d}{a}<{s}>") }
                }
                ImageClass::Depth { multi } => {
                    if multi {
                        format!("texture_depth_multisampled_{d}{a}")
                    } else {
                        format!("texture_depth_{d}{a}")
                    }
                }
                ImageClass::External => "texture_external".into(),
                ImageClass::Storage { format, access } => {
                    let access = match (access.contains(StorageAccess::LOAD), access.contains(StorageAccess::STORE)) {
                        (true, true) => "read_write",
                        (true, false) => "read",
                        _ => "write",
                    };
                    format!("texture_storage_{d}{a}<{}, {access}>", format!("{format:?}").to_lowercase())
                }
            }
        }
        _ => "?".into(),
    }
}

fn scalar_name(s: Scalar) -> String {
    match (s.kind, s.width) {
        (ScalarKind::Float, 4) => "f32".into(),
        (ScalarKind::Float, 2) => "f16".into(),
        (ScalarKind::Uint, 4) => "u32".into(),
        (ScalarKind::Sint, 4) => "i32".into(),
        (ScalarKind::Uint, 8) => "u64".into(),
        (ScalarKind::Sint, 8) => "i64".into(),
        (ScalarKind::Float, 8) => "f64".into(),
        (ScalarKind::Bool, _) => "bool".into(),
        (k, w) => format!("{k:?}{}", w * 8),
    }
}

struct Reflector<'a> {
    module: &'a Module,
    layouter: &'a Layouter,
    structs: Vec<StructDef>,
}

impl Reflector<'_> {
    fn scalar(&self, s: Scalar) -> Result<HostScalar, String> {
        Ok(match (s.kind, s.width) {
            (ScalarKind::Float, 4) => HostScalar::F32,
            (ScalarKind::Float, 2) => HostScalar::F16,
            (ScalarKind::Uint, 4) => HostScalar::U32,
            (ScalarKind::Sint, 4) => HostScalar::I32,
            (ScalarKind::Uint, 8) => HostScalar::U64,
            (ScalarKind::Sint, 8) => HostScalar::I64,
            (ScalarKind::Float, 8) => HostScalar::F64,
            (ScalarKind::Bool, _) => {
                return Err("`bool` cannot be shared with the host (use u32)".into());
            }
            _ => return Err(format!("scalar type `{}` is not supported", scalar_name(s))),
        })
    }

    fn host_size(&self, t: &HostType) -> u32 {
        match t {
            HostType::Scalar(s) => s.size(),
            HostType::Array(t, n) => self.host_size(t) * n,
            HostType::Struct(name) => self.structs.iter().find(|s| &s.name == name).map_or(0, |s| s.size),
        }
    }

    /// A vector or matrix column padded to `stride` bytes.
    fn padded_vector(&self, scalar: Scalar, stride: u32) -> Result<HostType, String> {
        let s = self.scalar(scalar)?;
        Ok(HostType::Array(Box::new(HostType::Scalar(s)), stride / s.size()))
    }

    fn host(&mut self, ty: Handle<Type>) -> Result<HostType, String> {
        let module = self.module;
        Ok(match module.types[ty].inner {
            TypeInner::Scalar(s) | TypeInner::Atomic(s) => HostType::Scalar(self.scalar(s)?),
            TypeInner::Vector { size, scalar } => {
                HostType::Array(Box::new(HostType::Scalar(self.scalar(scalar)?)), size as u32)
            }
            TypeInner::Matrix { columns, rows, scalar } => {
                // Columns are vectors: vec2 is 2 scalars wide, vec3 and vec4 take 4.
                let stride = if rows as u32 == 2 { 2 } else { 4 } * scalar.width as u32;
                HostType::Array(Box::new(self.padded_vector(scalar, stride)?), columns as u32)
            }
            TypeInner::Array { base, size, stride } => {
                let naga::ArraySize::Constant(n) = size else {
                    return Err("a runtime-sized array can only be the whole storage binding".into());
                };
                let elem = self.element(base, stride)?;
                HostType::Array(Box::new(elem), n.get())
            }
            TypeInner::Struct { ref members, span } => {
                let name = module.types[ty].name.clone().unwrap_or_else(|| format!("Struct{}", ty.index()));
                if !self.structs.iter().any(|s| s.name == name) {
                    let def = self.struct_fields(&name, members, span)?;
                    self.structs.push(def);
                }
                HostType::Struct(name)
            }
            ref other => {
                return Err(format!("type `{}` cannot be shared with the host", describe_inner(module, other)));
            }
        })
    }

    /// A struct of `members` with explicit padding up to `size` bytes.
    fn struct_fields(&mut self, name: &str, members: &[naga::StructMember], size: u32) -> Result<StructDef, String> {
        let mut fields = Vec::new();
        let mut cursor = 0;
        for m in members {
            let mty = self.host(m.ty)?;
            let msize = self.host_size(&mty);
            if m.offset > cursor {
                fields.push(Field { name: None, ty: None, offset: cursor, size: m.offset - cursor });
            }
            fields.push(Field {
                name: Some(m.name.clone().unwrap_or_else(|| format!("field{}", fields.len()))),
                ty: Some(mty),
                offset: m.offset,
                size: msize,
            });
            cursor = m.offset + msize;
        }
        if size > cursor {
            fields.push(Field { name: None, ty: None, offset: cursor, size: size - cursor });
        }
        Ok(StructDef { name: name.to_string(), size, fields })
    }

    /// An array element, padded to the array's stride where WGSL pads it (vec3).
    fn element(&mut self, base: Handle<Type>, stride: u32) -> Result<HostType, String> {
        let elem = self.host(base)?;
        let size = self.host_size(&elem);
        if size == stride {
            return Ok(elem);
        }
        if let TypeInner::Vector { scalar, .. } = self.module.types[base].inner {
            return self.padded_vector(scalar, stride);
        }
        Err(format!(
            "array elements of type `{}` are {size} bytes on the host but {stride} bytes apart in WGSL; \
             pad the element type to its stride",
            wgsl_name(self.module, base)
        ))
    }

    /// Storage binding: (element type, stride, min elements, runtime sized, header, offset).
    #[allow(clippy::type_complexity)]
    fn storage(&mut self, ty: Handle<Type>) -> Result<(HostType, u32, u64, bool, Option<HostType>, u32), String> {
        match self.module.types[ty].inner {
            TypeInner::Array { base, size, stride } => {
                let elem = self.element(base, stride)?;
                match size {
                    naga::ArraySize::Constant(n) => Ok((elem, stride, n.get() as u64, false, None, 0)),
                    naga::ArraySize::Dynamic => Ok((elem, stride, 0, true, None, 0)),
                    naga::ArraySize::Pending(_) => Err("array sizes set by overrides are not supported".into()),
                }
            }
            TypeInner::Struct { ref members, .. }
                if members.last().is_some_and(|m| {
                    matches!(self.module.types[m.ty].inner, TypeInner::Array { size: naga::ArraySize::Dynamic, .. })
                }) =>
            {
                let (last, fixed) = members.split_last().expect("a last member");
                let TypeInner::Array { base, stride, .. } = self.module.types[last.ty].inner else { unreachable!() };
                let elem = self.element(base, stride)?;
                if fixed.is_empty() {
                    // Laid out exactly like the array alone: bound as one.
                    return Ok((elem, stride, 0, true, None, 0));
                }
                let name = self.module.types[ty].name.clone().unwrap_or_else(|| format!("Struct{}", ty.index()));
                if !self.structs.iter().any(|s| s.name == name) {
                    let def = self.struct_fields(&name, fixed, last.offset)?;
                    self.structs.push(def);
                }
                Ok((elem, stride, 0, true, Some(HostType::Struct(name)), last.offset))
            }
            _ => {
                let t = self.host(ty)?;
                let size = self.layouter[ty].size;
                Ok((t, size, 1, false, None, 0))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reflect_src(src: &str) -> Interface {
        let m = naga::front::wgsl::parse_str(src).unwrap();
        let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), crate::validate::CAPABILITIES)
            .validate(&m)
            .unwrap();
        reflect(&m, Some(&info), "k").unwrap()
    }

    #[test]
    fn struct_layout_has_explicit_padding() {
        let i = reflect_src(
            "struct P { a: u32, v: vec3<f32>, b: f32, m: mat3x3<f32> }\n\
             @group(0) @binding(0) var<uniform> p: P;\n\
             @group(0) @binding(1) var<storage, read_write> out: array<vec3<f32>>;\n\
             @group(0) @binding(2) var<storage, read> unused: array<f32>;\n\
             @compute @workgroup_size(8, 2) fn k() { out[0] = p.v * p.b + p.m[0] + f32(p.a); }",
        );
        assert_eq!(i.workgroup_size, [8, 2, 1]);
        assert_eq!(i.bindings.len(), 2, "unused bindings are left out");
        let p = &i.structs[0];
        assert_eq!(p.size, 80);
        let offs: Vec<_> = p.fields.iter().map(|f| (f.name.clone(), f.offset, f.size)).collect();
        assert_eq!(
            offs,
            vec![
                (Some("a".into()), 0, 4),
                (None, 4, 12),
                (Some("v".into()), 16, 12),
                (Some("b".into()), 28, 4),
                (Some("m".into()), 32, 48),
            ]
        );
        let out = &i.bindings[1];
        assert_eq!(out.access, Access::ReadWrite);
        assert_eq!(out.stride, 16);
        assert_eq!(out.ty, HostType::Array(Box::new(HostType::Scalar(HostScalar::F32)), 4));
        assert!(out.runtime_sized);
    }

    #[test]
    fn usage_is_what_the_entry_point_does() {
        let i = reflect_src(
            "@group(0) @binding(0) var<storage, read_write> written: array<f32>;\n\
             @group(0) @binding(1) var<storage, read_write> both: array<f32>;\n\
             @group(0) @binding(2) var<storage, read_write> counter: atomic<u32>;\n\
             @group(0) @binding(3) var<storage, read_write> queried: array<f32>;\n\
             @group(0) @binding(4) var<uniform> n: u32;\n\
             fn helper(i: u32) { both[i] += 1.0; }\n\
             @compute @workgroup_size(1) fn k() {\n\
                 written[0] = f32(arrayLength(&queried) + n);\n\
                 helper(0u);\n\
                 atomicAdd(&counter, 1u);\n\
             }",
        );
        let usage = |name: &str| i.usage.iter().find(|(n, _)| n == name).map(|(_, u)| *u).unwrap();
        assert_eq!(usage("written"), Usage { read: false, written: true });
        assert_eq!(usage("both"), Usage { read: true, written: true }, "through a called function");
        assert_eq!(usage("counter"), Usage { read: true, written: true }, "atomics do both");
        assert_eq!(usage("queried"), Usage { read: false, written: false }, "arrayLength reads no element");
        assert_eq!(usage("n"), Usage { read: true, written: false });
    }

    #[test]
    fn consts_and_overrides() {
        let i = reflect_src(
            "const TILE: u32 = 64u; const NEG: i32 = -3; override SCALE: f32 = 2.0;\n\
             @group(0) @binding(0) var<storage, read_write> x: array<atomic<u32>, 4>;\n\
             @compute @workgroup_size(TILE) fn k() { atomicAdd(&x[0], u32(SCALE) + TILE + u32(NEG)); }",
        );
        assert!(i.consts.contains(&("TILE".into(), 64)));
        assert!(i.consts.contains(&("NEG".into(), -3)));
        assert!(i.exported.contains(&("TILE".into(), "u32", "64".into())));
        assert_eq!(i.overrides[0].name, "SCALE");
        assert_eq!(i.bindings[0].min_elems, 4);
        assert_eq!(i.bindings[0].ty, HostType::Scalar(HostScalar::U32));
    }
}
