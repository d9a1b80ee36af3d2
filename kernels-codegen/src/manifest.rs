//! The web export's manifest: everything a WebGPU host without Rust needs to run the kernels of
//! compiled files, as data. It is made from the same [`File`]s the macro expands, so every fact
//! — grid, checks, layouts, constants — is the one the generated Rust functions use.
//!
//! [`export`] gives the browser WGSL of every kernel variant (one file each) and the manifest
//! (JSON). The manifest's fields are documented one by one in the JSON Schema that the export
//! writes beside it (`web/export/manifest.schema.json` in the repository); in short, per kernel
//! file its header comment and module constants, and per kernel: the constants its annotations
//! name, its bindings (WebGPU binding type, access —
//! `read`, `written`, `read_write` in place or `accumulated` —, element or uniform layout with
//! every field's offset, size and WGSL type, and the fewest elements it may hold), its grid and
//! `@requires` checks as expression trees ([`expr_json`], with the integer semantics of
//! [`shape`](crate::shape)), its browser variants with the WebGPU features and device limits each
//! needs, and the native-only variants left out (those with cooperative matrices).

use crate::compile::{File, Kernel, Variant};
use crate::reflect::{self, Access, Interface, Usage};
use crate::shape::{Cmp, Expr, Grid, GridSource, Op, Step};
use crate::validate::{CAPABILITIES, CoopScalar};
use naga::proc::Layouter;
use naga::valid::{ValidationFlags, Validator};
use naga::{AddressSpace, Handle, Module, Scalar, ScalarKind, Type, TypeInner};
use std::fmt::Write as _;

/// The manifest's `format`.
pub const FORMAT: &str = "kernels-web-export";

/// The manifest's `format_version`: raised whenever a field changes meaning or goes away.
pub const FORMAT_VERSION: u32 = 2;

/// Why variants with cooperative matrices are not exported.
pub const NATIVE_ONLY_REASON: &str =
    "uses cooperative matrices (tensor cores), which WebGPU does not have: native (wgpu) only";

/// A JSON value, with object keys in insertion order.
#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    /// `null`
    Null,
    /// `true` / `false`
    Bool(bool),
    /// A number, as valid JSON number text.
    Number(String),
    /// A string.
    Str(String),
    /// An array.
    Array(Vec<Json>),
    /// An object.
    Object(Vec<(String, Json)>),
}

impl Json {
    /// An integer.
    pub fn int(v: impl Into<i128>) -> Json {
        Json::Number(v.into().to_string())
    }

    /// A string.
    pub fn str(s: impl Into<String>) -> Json {
        Json::Str(s.into())
    }

    /// An object from (key, value) pairs.
    pub fn object<K: Into<String>>(pairs: impl IntoIterator<Item = (K, Json)>) -> Json {
        Json::Object(pairs.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }

    /// The value under `key`, for objects.
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(pairs) => pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Compact JSON text (`{"a": 1, "b": [2, 3]}`).
    pub fn compact(&self) -> String {
        let mut out = String::new();
        self.write_compact(&mut out);
        out
    }

    fn write_compact(&self, out: &mut String) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Number(n) => out.push_str(n),
            Json::Str(s) => string(s, out),
            Json::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    item.write_compact(out);
                }
                out.push(']');
            }
            Json::Object(pairs) => {
                out.push('{');
                for (i, (k, v)) in pairs.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    string(k, out);
                    out.push_str(": ");
                    v.write_compact(out);
                }
                out.push('}');
            }
        }
    }

    /// Indented JSON text: a value that fits in 100 columns stays on one line.
    pub fn pretty(&self) -> String {
        let mut out = String::new();
        self.write_pretty(0, &mut out);
        out.push('\n');
        out
    }

    fn write_pretty(&self, indent: usize, out: &mut String) {
        let compact = self.compact();
        let (open, close, items): (char, char, Vec<(Option<&str>, &Json)>) = match self {
            Json::Array(items) if indent + compact.len() > 100 => ('[', ']', items.iter().map(|v| (None, v)).collect()),
            Json::Object(pairs) if indent + compact.len() > 100 => {
                ('{', '}', pairs.iter().map(|(k, v)| (Some(k.as_str()), v)).collect())
            }
            _ => {
                out.push_str(&compact);
                return;
            }
        };
        out.push(open);
        out.push('\n');
        for (i, (key, value)) in items.iter().enumerate() {
            out.push_str(&" ".repeat(indent + 2));
            if let Some(k) = key {
                string(k, out);
                out.push_str(": ");
            }
            value.write_pretty(indent + 2, out);
            if i + 1 < items.len() {
                out.push(',');
            }
            out.push('\n');
        }
        out.push_str(&" ".repeat(indent));
        out.push(close);
    }
}

/// Appends `s` as a JSON string literal.
fn string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// An expression tree as JSON: `{"int": "64"}` (a literal or a folded module constant; the
/// value as a decimal string, exact in every JSON parser), `{"len": "x"}` (elements of storage
/// binding `x`), `{"uniform": "p", "path": ["dims", 1]}` (an integer in uniform `p`: field
/// names, and vector components as numbers; `[]` for a uniform that is an integer itself) and
/// `{"op": "ceil_div", "args": [a, b]}` (`add`, `sub`, `mul`, `div`, `rem`, `ceil_div`, `min`,
/// `max`, with the semantics of [`Op::apply`]).
pub fn expr_json(e: &Expr) -> Json {
    match e {
        Expr::Int(v) => Json::object([("int", Json::str(v.to_string()))]),
        Expr::Len { binding } => Json::object([("len", Json::str(binding))]),
        Expr::Uniform { binding, path } => Json::object([
            ("uniform", Json::str(binding)),
            (
                "path",
                Json::Array(
                    path.iter()
                        .map(|s| match s {
                            Step::Field(f) => Json::str(f),
                            Step::Component(i) => Json::int(*i),
                        })
                        .collect(),
                ),
            ),
        ]),
        Expr::Binary { op, left, right } => Json::object([
            ("op", Json::str(op_name(*op))),
            ("args", Json::Array(vec![expr_json(left), expr_json(right)])),
        ]),
    }
}

/// The manifest's name of an operation.
pub fn op_name(op: Op) -> &'static str {
    op.runtime_name()
}

/// The manifest's spelling of a comparison.
pub fn cmp_name(cmp: Cmp) -> &'static str {
    match cmp {
        Cmp::Ge => ">=",
        Cmp::Gt => ">",
        Cmp::Le => "<=",
        Cmp::Lt => "<",
        Cmp::Eq => "==",
        Cmp::Ne => "!=",
    }
}

/// The browser variants of a kernel, preferred first: those with a browser form (without
/// cooperative matrices, 64-bit types or immediates).
pub fn web_variants(k: &Kernel) -> Vec<&Variant> {
    k.variants.iter().filter(|v| !v.browser_wgsl.is_empty()).collect()
}

/// Why variants that need wgpu features WebGPU lacks are not exported.
pub const NATIVE_FEATURES_REASON: &str =
    "needs wgpu features WebGPU does not have (`native_features`): native (wgpu) only";

/// The file of browser variant `index` (into [`web_variants`]) of kernel `k` of module
/// `module`, relative to the export directory: `module/kernel.wgsl` for the preferred one,
/// `module/kernel.no-subgroups.wgsl` for the same without subgroups, `…variantN.wgsl` otherwise.
pub fn variant_file(module: &str, k: &Kernel, index: usize) -> String {
    let web = web_variants(k);
    let suffix = match (web.first(), web.get(index)) {
        _ if index == 0 => String::new(),
        (Some(first), Some(v)) if first.subgroups && !v.subgroups && first.f16 == v.f16 => ".no-subgroups".into(),
        _ => format!(".variant{index}"),
    };
    format!("{module}/{}{suffix}.wgsl", k.name)
}

/// WebGPU feature names a variant needs.
fn features(v: &Variant) -> Vec<&'static str> {
    let mut out = Vec::new();
    if v.subgroups {
        out.push("subgroups");
    }
    if v.f16 {
        out.push("shader-f16");
    }
    out
}

fn strings<'a>(items: impl IntoIterator<Item = &'a str>) -> Json {
    Json::Array(items.into_iter().map(Json::str).collect())
}

/// What naga says about one variant's own source.
struct Analysis {
    module: Module,
    layouter: Layouter,
    iface: Interface,
    /// Bytes of workgroup memory the entry point uses, as WebGPU counts them against
    /// `maxComputeWorkgroupStorageSize`: each variable's size rounded up to 16.
    workgroup_bytes: u64,
}

fn analyse(v: &Variant, name: &str) -> Result<Analysis, String> {
    let module = naga::front::wgsl::parse_str(&v.wgsl).map_err(|e| format!("naga cannot parse it: {}", e.message()))?;
    let info = Validator::new(ValidationFlags::all(), CAPABILITIES)
        .validate(&module)
        .map_err(|e| format!("naga rejects it: {}", e.as_inner()))?;
    let iface = reflect::reflect(&module, Some(&info), name).map_err(|e| e.message)?;
    let index = module
        .entry_points
        .iter()
        .position(|ep| ep.name == name && ep.stage == naga::ShaderStage::Compute)
        .ok_or_else(|| format!("no `@compute fn {name}`"))?;
    let mut layouter = Layouter::default();
    layouter.update(module.to_ctx()).map_err(|e| format!("layout: {e}"))?;
    let uses = info.get_entry_point(index);
    let workgroup_bytes = module
        .global_variables
        .iter()
        .filter(|(h, var)| var.space == AddressSpace::WorkGroup && !uses[*h].is_empty())
        .map(|(_, var)| u64::from(layouter[var.ty].size).div_ceil(16) * 16)
        .sum();
    Ok(Analysis { module, layouter, iface, workgroup_bytes })
}

fn scalar_name(s: Scalar) -> Result<&'static str, String> {
    Ok(match (s.kind, s.width) {
        (ScalarKind::Float, 4) => "f32",
        (ScalarKind::Float, 2) => "f16",
        (ScalarKind::Uint, 4) => "u32",
        (ScalarKind::Sint, 4) => "i32",
        (ScalarKind::Uint, 8) => "u64",
        (ScalarKind::Sint, 8) => "i64",
        (ScalarKind::Float, 8) => "f64",
        (k, w) => return Err(format!("a {k:?} of {w} bytes cannot be shared with a host")),
    })
}

/// The WGSL spelling of a type.
fn type_name(m: &Module, ty: Handle<Type>) -> String {
    let t = &m.types[ty];
    let scalar = |s: Scalar| scalar_name(s).unwrap_or("?");
    match t.inner {
        TypeInner::Struct { .. } => t.name.clone().unwrap_or_else(|| "struct".into()),
        TypeInner::Scalar(s) => scalar(s).into(),
        TypeInner::Atomic(s) => format!("atomic<{}>", scalar(s)),
        TypeInner::Vector { size, scalar: s } => format!("vec{}<{}>", size as u8, scalar(s)),
        TypeInner::Matrix { columns, rows, scalar: s } => format!("mat{}x{}<{}>", columns as u8, rows as u8, scalar(s)),
        TypeInner::Array { base, size: naga::ArraySize::Constant(n), .. } => {
            format!("array<{}, {n}>", type_name(m, base))
        }
        TypeInner::Array { base, .. } => format!("array<{}>", type_name(m, base)),
        _ => "?".into(),
    }
}

/// The host layout of a value of type `ty`: `kind` (`scalar`, `vector`, `matrix`, `array`,
/// `struct`), `size` in bytes, and what the kind needs to place every scalar.
fn layout(m: &Module, layouter: &Layouter, ty: Handle<Type>) -> Result<Json, String> {
    let size = Json::int(layouter[ty].size);
    Ok(match m.types[ty].inner {
        TypeInner::Scalar(s) | TypeInner::Atomic(s) => {
            Json::object([("kind", Json::str("scalar")), ("scalar", Json::str(scalar_name(s)?)), ("size", size)])
        }
        TypeInner::Vector { size: n, scalar } => Json::object([
            ("kind", Json::str("vector")),
            ("scalar", Json::str(scalar_name(scalar)?)),
            ("count", Json::int(n as u8)),
            ("size", size),
        ]),
        TypeInner::Matrix { columns, rows, scalar } => Json::object([
            ("kind", Json::str("matrix")),
            ("scalar", Json::str(scalar_name(scalar)?)),
            ("columns", Json::int(columns as u8)),
            ("rows", Json::int(rows as u8)),
            ("column_stride", Json::int(layouter[ty].size / columns as u32)),
            ("size", size),
        ]),
        TypeInner::Array { base, size: naga::ArraySize::Constant(n), stride } => Json::object([
            ("kind", Json::str("array")),
            ("element", layout(m, layouter, base)?),
            ("count", Json::int(n.get())),
            ("stride", Json::int(stride)),
            ("size", size),
        ]),
        TypeInner::Struct { ref members, span } => {
            let mut fields = Vec::new();
            let mut cursor = 0;
            for member in members {
                if member.offset > cursor {
                    fields.push(padding(cursor, member.offset - cursor));
                }
                let msize = layouter[member.ty].size;
                fields.push(Json::object([
                    ("name", Json::str(member.name.clone().unwrap_or_default())),
                    ("offset", Json::int(member.offset)),
                    ("size", Json::int(msize)),
                    ("type", Json::str(type_name(m, member.ty))),
                    ("layout", layout(m, layouter, member.ty)?),
                ]));
                cursor = member.offset + msize;
            }
            if span > cursor {
                fields.push(padding(cursor, span - cursor));
            }
            Json::object([
                ("kind", Json::str("struct")),
                ("name", Json::str(type_name(m, ty))),
                ("size", Json::int(span)),
                ("fields", Json::Array(fields)),
            ])
        }
        ref other => return Err(format!("type {other:?} cannot be shared with a host")),
    })
}

fn padding(offset: u32, size: u32) -> Json {
    Json::object([("padding", Json::Bool(true)), ("offset", Json::int(offset)), ("size", Json::int(size))])
}

/// The fewest elements binding `name` may hold whatever the uniform says: one value for a
/// uniform or a runtime-sized array (WebGPU binds no empty array), `N` for `array<T, N>`, and
/// at least what every `@requires` comparing `len(name)` with a constant demands.
pub fn min_length(k: &Kernel, b: &reflect::Binding) -> u64 {
    let mut min = if b.access == Access::Uniform { 1 } else { b.min_elems.max(1) };
    let constant = |e: &Expr| e.eval(&|_| None, &|_, _| None);
    let is_len = |e: &Expr| matches!(e, Expr::Len { binding } if *binding == b.name);
    for r in &k.shape.requires {
        let r = &r.value;
        // Normalised to `len(name) cmp c`.
        let (cmp, c) = if is_len(&r.left) {
            (r.cmp, constant(&r.right))
        } else if is_len(&r.right) {
            let flipped = match r.cmp {
                Cmp::Ge => Cmp::Le,
                Cmp::Gt => Cmp::Lt,
                Cmp::Le => Cmp::Ge,
                Cmp::Lt => Cmp::Gt,
                other => other,
            };
            (flipped, constant(&r.left))
        } else {
            continue;
        };
        let need = match (cmp, c) {
            (Cmp::Ge | Cmp::Eq, Some(c)) => c,
            (Cmp::Gt, Some(c)) => c.saturating_add(1),
            _ => continue,
        };
        min = min.max(u64::try_from(need).unwrap_or(0));
    }
    min
}

/// The access of a binding: `read`, `written` (never read: whatever it held is overwritten
/// where the kernel writes), `read_write` (read and written in place) or `accumulated` (added
/// into, per `@accumulates`).
fn access(k: &Kernel, b: &reflect::Binding, usage: Usage) -> &'static str {
    if k.shape.accumulates.iter().any(|a| a.value == b.name) {
        "accumulated"
    } else if b.access == Access::Uniform || !usage.written {
        "read"
    } else if usage.read {
        "read_write"
    } else {
        "written"
    }
}

/// The device limits (WebGPU's names) a variant needs, beyond those its data set.
fn limits(iface: &Interface, a: &Analysis) -> Json {
    let [x, y, z] = iface.workgroup_size;
    use reflect::ResourceKind;
    let storage = iface.bindings.iter().filter(|b| b.access != Access::Uniform).count();
    let uniform: Vec<&reflect::Binding> = iface.bindings.iter().filter(|b| b.access == Access::Uniform).collect();
    let max_binding = iface
        .bindings
        .iter()
        .map(|b| b.binding + 1)
        .chain(iface.resources.iter().map(|r| r.binding + 1))
        .max()
        .unwrap_or(0);
    let count = |f: fn(&ResourceKind) -> bool| iface.resources.iter().filter(|r| f(&r.kind)).count() as u32;
    Json::object([
        ("maxComputeWorkgroupStorageSize", Json::int(a.workgroup_bytes)),
        ("maxComputeInvocationsPerWorkgroup", Json::int(u64::from(x) * u64::from(y) * u64::from(z))),
        ("maxComputeWorkgroupSizeX", Json::int(x)),
        ("maxComputeWorkgroupSizeY", Json::int(y)),
        ("maxComputeWorkgroupSizeZ", Json::int(z)),
        ("maxStorageBuffersPerShaderStage", Json::int(storage as u32)),
        ("maxUniformBuffersPerShaderStage", Json::int(uniform.len() as u32)),
        ("maxUniformBufferBindingSize", Json::int(uniform.iter().map(|b| b.stride).max().unwrap_or(0))),
        ("maxSampledTexturesPerShaderStage", Json::int(count(|k| matches!(k, ResourceKind::Texture { .. })))),
        ("maxStorageTexturesPerShaderStage", Json::int(count(|k| matches!(k, ResourceKind::StorageTexture { .. })))),
        ("maxSamplersPerShaderStage", Json::int(count(|k| matches!(k, ResourceKind::Sampler { .. })))),
        ("maxBindingsPerBindGroup", Json::int(max_binding)),
        ("maxBindGroups", Json::int(u32::from(!iface.bindings.is_empty() || !iface.resources.is_empty()))),
    ])
}

fn grid_json(k: &Kernel) -> Json {
    match &k.shape.grid {
        GridSource::Annotation(g) => {
            let text = ("text", Json::str(&g.text));
            match &g.value {
                Grid::Threads(n) => Json::object([("kind", Json::str("threads")), text, ("count", expr_json(n))]),
                Grid::Workgroups(n) => Json::object([("kind", Json::str("workgroups")), text, ("count", expr_json(n))]),
                Grid::Explicit(dims) => Json::object([
                    ("kind", Json::str("explicit")),
                    text,
                    ("dims", Json::Array(dims.iter().map(expr_json).collect())),
                ]),
            }
        }
        _ => Json::object([("kind", Json::str("caller")), ("text", Json::Null)]),
    }
}

fn kernel_json(file: &File, k: &Kernel, files: &mut Vec<(String, String)>) -> Result<Json, String> {
    let iface = k.interface.as_ref().ok_or("no interface")?;
    let web = web_variants(k);
    // Every browser variant's own analysis (the native ones' when there is none): the access
    // of a binding is what any of them does with it.
    let analysed: Vec<(&Variant, Analysis)> = (if web.is_empty() { k.variants.iter().collect() } else { web.clone() })
        .into_iter()
        .map(|v| analyse(v, &k.name).map(|a| (v, a)))
        .collect::<Result<_, _>>()?;
    let (_, first) = analysed.first().ok_or("no variants")?;
    let usage = |name: &str| {
        analysed.iter().fold(Usage::default(), |u, (_, a)| {
            let this = a.iface.usage.iter().find(|(n, _)| n == name).map(|(_, u)| *u).unwrap_or_default();
            Usage { read: u.read || this.read, written: u.written || this.written }
        })
    };
    let mut bindings: Vec<(u32, Json)> = Vec::new();
    for b in &iface.bindings {
        let (kind, buffer_type) = match b.access {
            Access::Read => ("read", "read-only-storage"),
            Access::ReadWrite => ("read_write", "storage"),
            Access::Uniform => ("uniform", "uniform"),
        };
        let (_, var) = first
            .module
            .global_variables
            .iter()
            .find(|(_, v)| v.name.as_deref() == Some(b.name.as_str()) && v.binding.is_some())
            .ok_or_else(|| format!("binding `{}` is not in the variant's source", b.name))?;
        // A storage binding's layout is its element's; a uniform's, its value's.
        let ty = match first.module.types[var.ty].inner {
            TypeInner::Array { base, .. } if b.access != Access::Uniform => base,
            _ => var.ty,
        };
        let access = access(k, b, usage(&b.name));
        // A struct ending in a runtime-sized array: its element's layout, and its fixed part's.
        let (ty, header) = match &first.module.types[ty].inner {
            TypeInner::Struct { members, .. } if b.runtime_sized && b.access != Access::Uniform => {
                let (last, fixed) = members.split_last().ok_or("an empty struct")?;
                let TypeInner::Array { base, .. } = first.module.types[last.ty].inner else {
                    return Err(format!("binding `{}`: the struct does not end in an array", b.name));
                };
                let header = if fixed.is_empty() {
                    Json::Null
                } else {
                    struct_layout(&first.module, &first.layouter, ty, fixed, last.offset)
                        .map_err(|e| format!("binding `{}`: {e}", b.name))?
                };
                (base, header)
            }
            _ => (ty, Json::Null),
        };
        bindings.push((
            b.binding,
            Json::object([
                ("group", Json::int(b.group)),
                ("binding", Json::int(b.binding)),
                ("name", Json::str(&b.name)),
                ("kind", Json::str(kind)),
                ("buffer_type", Json::str(buffer_type)),
                ("access", Json::str(access)),
                ("wgsl_type", Json::str(&b.wgsl)),
                ("stride", Json::int(b.stride)),
                ("offset", Json::int(b.offset)),
                ("header", header),
                ("runtime_sized", Json::Bool(b.runtime_sized)),
                ("min_length", Json::int(min_length(k, b))),
                (
                    "layout",
                    layout(&first.module, &first.layouter, ty).map_err(|e| format!("binding `{}`: {e}", b.name))?,
                ),
            ]),
        ));
    }
    for r in &iface.resources {
        bindings.push((r.binding, resource_json(r)));
    }
    bindings.sort_by_key(|(b, _)| *b);
    let bindings: Vec<Json> = bindings.into_iter().map(|(_, j)| j).collect();
    let immediate = match &iface.immediate {
        Some(i) => {
            let (_, var) = first
                .module
                .global_variables
                .iter()
                .find(|(_, v)| v.name.as_deref() == Some(i.name.as_str()) && v.space == AddressSpace::Immediate)
                .ok_or_else(|| format!("`var<immediate> {}` is not in the variant's source", i.name))?;
            Json::object([
                ("name", Json::str(&i.name)),
                ("wgsl_type", Json::str(&i.wgsl)),
                ("size", Json::int(i.size)),
                ("layout", layout(&first.module, &first.layouter, var.ty)?),
            ])
        }
        None => Json::Null,
    };
    let mut variants = Vec::new();
    for (i, (v, a)) in analysed.iter().enumerate().filter(|_| !web.is_empty()) {
        let path = variant_file(&file.module, k, i);
        files.push((path.clone(), v.browser_wgsl.clone()));
        variants.push(Json::object([
            ("file", Json::str(path)),
            ("features", strings(features(v))),
            ("limits", limits(&a.iface, a)),
        ]));
    }
    let native_only: Vec<Json> = k
        .variants
        .iter()
        .filter(|v| v.browser_wgsl.is_empty())
        .map(|v| {
            let scalar = |s: CoopScalar| Json::str(if s == CoopScalar::F16 { "f16" } else { "f32" });
            let configs = v
                .coop
                .iter()
                .map(|c| {
                    Json::object([
                        ("m", Json::int(c.m)),
                        ("n", Json::int(c.n)),
                        ("k", Json::int(c.k)),
                        ("ab", scalar(c.ab)),
                        ("cr", scalar(c.cr)),
                    ])
                })
                .collect();
            Json::object([
                ("cooperative_matrix", Json::Array(configs)),
                ("features", strings(features(v))),
                ("native_features", strings(v.features.iter().copied())),
                ("reason", Json::str(if v.coop.is_empty() { NATIVE_FEATURES_REASON } else { NATIVE_ONLY_REASON })),
            ])
        })
        .collect();
    // Features every browser variant needs: what a device must have to run the kernel at all.
    let required: Vec<&str> = ["subgroups", "shader-f16"]
        .into_iter()
        .filter(|f| !web.is_empty() && web.iter().all(|v| features(v).contains(f)))
        .collect();
    let requires = k
        .shape
        .requires
        .iter()
        .map(|r| {
            Json::object([
                ("text", Json::str(&r.text)),
                ("left", expr_json(&r.value.left)),
                ("cmp", Json::str(cmp_name(r.value.cmp))),
                ("right", expr_json(&r.value.right)),
                ("left_text", Json::str(&r.value.left_text)),
                ("right_text", Json::str(&r.value.right_text)),
            ])
        })
        .collect();
    let overrides = iface
        .overrides
        .iter()
        .map(|o| {
            Json::object([
                ("name", Json::str(&o.name)),
                ("key", Json::str(o.id.map(|i| i.to_string()).unwrap_or_else(|| o.name.clone()))),
                ("type", Json::str(o.ty)),
                ("has_default", Json::Bool(o.has_default)),
            ])
        })
        .collect();
    let [x, y, z] = iface.workgroup_size;
    Ok(Json::object([
        ("module", Json::str(&file.module)),
        ("name", Json::str(&k.name)),
        ("qualified_name", Json::str(format!("{}::{}", file.module, k.name))),
        ("source", Json::object([("file", Json::str(&k.marker.file)), ("line", Json::int(k.marker.line as u64))])),
        ("doc", Json::str(k.doc.join("\n"))),
        ("workgroup_size", Json::Array(vec![Json::int(x), Json::int(y), Json::int(z)])),
        (
            "workgroup_size_overrides",
            Json::Array(
                iface
                    .workgroup_size_overrides
                    .iter()
                    .map(|o| match o {
                        Some(name) => Json::str(
                            iface
                                .overrides
                                .iter()
                                .find(|d| &d.name == name)
                                .and_then(|d| d.id.map(|i| i.to_string()))
                                .unwrap_or_else(|| name.clone()),
                        ),
                        None => Json::Null,
                    })
                    .collect(),
            ),
        ),
        ("grid", grid_json(k)),
        ("requires", Json::Array(requires)),
        ("constants", constants_json(&k.constants)?),
        ("features", strings(required)),
        ("variants", Json::Array(variants)),
        ("native_only_variants", Json::Array(native_only)),
        ("bindings", Json::Array(bindings)),
        ("immediate", immediate),
        ("overrides", Json::Array(overrides)),
    ]))
}

/// A texture or sampler binding: what WebGPU's bind group layout entry needs.
fn resource_json(r: &reflect::Resource) -> Json {
    use reflect::{ResourceKind, SampleKind, TextureAccess};
    let common = |kind: &str| {
        vec![
            ("group".to_string(), Json::int(r.group)),
            ("binding".to_string(), Json::int(r.binding)),
            ("name".to_string(), Json::str(&r.name)),
            ("kind".to_string(), Json::str(kind)),
            ("wgsl_type".to_string(), Json::str(&r.wgsl)),
        ]
    };
    let (mut out, extra) = match &r.kind {
        ResourceKind::Texture { dim, sample } => {
            let sample_type = match sample {
                SampleKind::Float { filterable: true } => "float",
                SampleKind::Float { filterable: false } => "unfilterable-float",
                SampleKind::Sint => "sint",
                SampleKind::Uint => "uint",
                SampleKind::Depth => "depth",
            };
            (
                common("texture"),
                (
                    "texture",
                    Json::object([
                        ("sampleType", Json::str(sample_type)),
                        ("viewDimension", Json::str(dim.webgpu())),
                        ("multisampled", Json::Bool(false)),
                    ]),
                ),
            )
        }
        ResourceKind::StorageTexture { dim, format, access } => {
            let access = match access {
                TextureAccess::Read => "read-only",
                TextureAccess::Write => "write-only",
                TextureAccess::ReadWrite => "read-write",
            };
            (
                common("storage_texture"),
                (
                    "storage_texture",
                    Json::object([
                        ("access", Json::str(access)),
                        ("format", Json::str(format.to_lowercase())),
                        ("viewDimension", Json::str(dim.webgpu())),
                    ]),
                ),
            )
        }
        ResourceKind::Sampler { comparison, filtering } => {
            let ty = match (comparison, filtering) {
                (true, _) => "comparison",
                (false, true) => "filtering",
                (false, false) => "non-filtering",
            };
            (common("sampler"), ("sampler", Json::object([("type", Json::str(ty))])))
        }
    };
    out.push((extra.0.to_string(), extra.1));
    Json::Object(out)
}

/// The layout of a struct's first members (`fixed`), padded to `size` bytes: the fixed part of
/// a struct ending in a runtime-sized array.
fn struct_layout(
    m: &Module,
    layouter: &Layouter,
    ty: Handle<Type>,
    fixed: &[naga::StructMember],
    size: u32,
) -> Result<Json, String> {
    let mut fields = Vec::new();
    let mut cursor = 0;
    for member in fixed {
        if member.offset > cursor {
            fields.push(padding(cursor, member.offset - cursor));
        }
        let msize = layouter[member.ty].size;
        fields.push(Json::object([
            ("name", Json::str(member.name.clone().unwrap_or_default())),
            ("offset", Json::int(member.offset)),
            ("size", Json::int(msize)),
            ("type", Json::str(type_name(m, member.ty))),
            ("layout", layout(m, layouter, member.ty)?),
        ]));
        cursor = member.offset + msize;
    }
    if size > cursor {
        fields.push(padding(cursor, size - cursor));
    }
    Ok(Json::object([
        ("kind", Json::str("struct")),
        ("name", Json::str(type_name(m, ty))),
        ("size", Json::int(size)),
        ("fields", Json::Array(fields)),
    ]))
}

/// Constants by name: `{"type": "u32", "value": 64}`.
fn constants_json(consts: &[(String, &'static str, String)]) -> Result<Json, String> {
    let mut out = Vec::new();
    for (name, ty, value) in consts {
        let v = match *ty {
            "bool" => Json::Bool(value == "true"),
            "u32" | "i32" => Json::int(value.parse::<i128>().map_err(|e| format!("constant `{name}`: {e}"))?),
            "f32" => {
                let v: f32 = value.parse().map_err(|e| format!("constant `{name}`: {e}"))?;
                if !v.is_finite() {
                    return Err(format!("constant `{name}` is not finite"));
                }
                // Rust's shortest round-trip form (`1e-6`, `0.5`) is valid JSON.
                Json::Number(format!("{v:?}"))
            }
            other => return Err(format!("constant `{name}` has type {other}")),
        };
        out.push((name.clone(), Json::object([("type", Json::str(*ty)), ("value", v)])));
    }
    Ok(Json::Object(out))
}

/// What [`export`] makes.
#[derive(Clone, Debug)]
pub struct Export {
    /// The manifest.
    pub manifest: Json,
    /// Every browser variant's WGSL: (path relative to the export directory, source).
    pub sources: Vec<(String, String)>,
}

/// The manifest and browser sources of compiled kernel files. Fails, naming the kernel, when
/// a file has errors or a variant cannot be analysed.
pub fn export(files: &[File]) -> Result<Export, String> {
    let mut sources = Vec::new();
    let mut file_entries = Vec::new();
    let mut kernels = Vec::new();
    for file in files {
        if let Some(e) = file.all_errors().next() {
            return Err(format!("{}: {}", file.display, e.message));
        }
        file_entries.push(Json::object([
            ("module", Json::str(&file.module)),
            ("file", Json::str(&file.display)),
            ("doc", Json::str(file.doc.join("\n"))),
            ("constants", constants_json(&file.consts).map_err(|e| format!("{}: {e}", file.display))?),
        ]));
        for k in &file.kernels {
            kernels.push(
                kernel_json(file, k, &mut sources).map_err(|e| format!("kernel `{}::{}`: {e}", file.module, k.name))?,
            );
        }
    }
    let manifest = Json::object([
        ("format", Json::str(FORMAT)),
        ("format_version", Json::int(FORMAT_VERSION)),
        ("schema", Json::str("manifest.schema.json")),
        ("files", Json::Array(file_entries)),
        ("kernels", Json::Array(kernels)),
    ]);
    Ok(Export { manifest, sources })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::Shared;
    use crate::source::CallSite;

    fn compile(text: &str) -> File {
        // One directory per call: tests run in parallel threads, and two sources of the same
        // length (`@accumulates x` for `@accumulates y`) once shared one and raced.
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("kernels-manifest-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("01_test.wgsl");
        std::fs::write(&path, text).unwrap();
        let site = CallSite { manifest_dir: Some(dir.clone()), calling_file: None };
        let f = crate::compile::compile(&site, &path.to_string_lossy(), &Shared::None, None);
        let _ = std::fs::remove_dir_all(&dir);
        f
    }

    const SOURCE: &str = "\
const CHUNK: u32 = 64u;
const HALF: f32 = 0.5;
// --- KERNEL: acc ---
// y += a·x; out[0] = a.
// @grid workgroups(ceil_div(p.n, CHUNK))
// @requires len(x) >= p.n
// @requires len(y) >= p.n
// @requires 3 < len(out)
// @accumulates y
struct Inner { k: u32, v: vec3<f32> }
struct P { n: u32, a: f32, inner: Inner, m: mat2x2<f32> }
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> p: P;
var<workgroup> tile: array<f32, 10>;
@compute @workgroup_size(64)
fn acc(@builtin(global_invocation_id) g: vec3<u32>) {
    tile[g.x % 10u] = HALF;
    if (g.x < p.n) { y[g.x] += p.a * x[g.x] + p.m[0].x + p.inner.v.y + f32(p.inner.k) + tile[0]; }
    out[0] = p.a;
}
";

    #[test]
    fn everything_a_host_needs_is_data() {
        let f = compile(SOURCE);
        assert!(f.all_errors().next().is_none(), "{:?}", f.all_errors().collect::<Vec<_>>());
        let e = export(&[f]).unwrap();
        let m = &e.manifest;
        assert_eq!(m.get("format_version"), Some(&Json::int(FORMAT_VERSION)));
        let consts = m.get("files").and_then(|f| if let Json::Array(a) = f { a.first() } else { None }).unwrap();
        assert_eq!(
            consts.get("constants").unwrap().compact(),
            r#"{"CHUNK": {"type": "u32", "value": 64}, "HALF": {"type": "f32", "value": 0.5}}"#
        );
        let Some(Json::Array(kernels)) = m.get("kernels") else { panic!() };
        let k = &kernels[0];
        assert_eq!(
            k.get("grid").unwrap().compact(),
            r#"{"kind": "workgroups", "text": "workgroups(ceil_div(p.n, CHUNK))", "count": {"op": "ceil_div", "args": [{"uniform": "p", "path": ["n"]}, {"int": "64"}]}}"#
        );
        let Some(Json::Array(b)) = k.get("bindings") else { panic!() };
        let field = |i: usize, key: &str| b[i].get(key).unwrap().compact();
        assert_eq!(
            (0..4).map(|i| field(i, "access")).collect::<Vec<_>>(),
            [r#""read""#, r#""accumulated""#, r#""written""#, r#""read""#]
        );
        assert_eq!(field(2, "min_length"), "4", "`3 < len(out)`");
        assert_eq!(field(0, "min_length"), "1");
        let p = b[3].get("layout").unwrap().compact();
        assert!(p.starts_with(r#"{"kind": "struct", "name": "P", "size": 64, "fields": [{"name": "n", "offset": 0, "size": 4, "type": "u32""#), "{p}");
        assert!(p.contains(r#"{"name": "inner", "offset": 16, "size": 32, "type": "Inner", "layout": {"kind": "struct", "name": "Inner", "size": 32, "fields": [{"name": "k", "offset": 0, "size": 4, "type": "u32", "layout": {"kind": "scalar", "scalar": "u32", "size": 4}}, {"padding": true, "offset": 4, "size": 12}, {"name": "v", "offset": 16, "size": 12, "type": "vec3<f32>", "layout": {"kind": "vector", "scalar": "f32", "count": 3, "size": 12}}, {"padding": true, "offset": 28, "size": 4}]}}"#), "{p}");
        assert!(p.contains(r#""type": "mat2x2<f32>", "layout": {"kind": "matrix", "scalar": "f32", "columns": 2, "rows": 2, "column_stride": 8, "size": 16}"#), "{p}");
        let Some(Json::Array(v)) = k.get("variants") else { panic!() };
        let limits = v[0].get("limits").unwrap();
        assert_eq!(limits.get("maxComputeWorkgroupStorageSize"), Some(&Json::int(48)), "40 bytes rounded up to 16");
        assert_eq!(limits.get("maxStorageBuffersPerShaderStage"), Some(&Json::int(3)));
        assert_eq!(limits.get("maxBindingsPerBindGroup"), Some(&Json::int(4)));
        assert_eq!(v[0].get("file"), Some(&Json::str("test/acc.wgsl")));
        assert_eq!(e.sources.len(), 1);
        assert_eq!(e.sources[0].0, "test/acc.wgsl");
        assert!(e.sources[0].1.contains("fn acc("));
    }

    #[test]
    fn the_file_header_and_the_constants_annotations_name_are_exported() {
        let source = format!("// What every kernel here shares.\n//\n// The state layout.\n\n{SOURCE}")
            .replace("// @requires 3 < len(out)", "// @requires SECTION_MIN < len(out)")
            .replace("struct Inner", "const SECTION_MIN: u32 = 3u;\nstruct Inner");
        let f = compile(&source);
        assert!(f.all_errors().next().is_none(), "{:?}", f.all_errors().collect::<Vec<_>>());
        let m = export(&[f]).unwrap().manifest;
        let Some(Json::Array(files)) = m.get("files") else { panic!() };
        assert_eq!(files[0].get("doc"), Some(&Json::str("What every kernel here shares.\n\nThe state layout.")));
        let Some(Json::Array(kernels)) = m.get("kernels") else { panic!() };
        assert_eq!(
            kernels[0].get("constants").unwrap().compact(),
            r#"{"CHUNK": {"type": "u32", "value": 64}, "SECTION_MIN": {"type": "u32", "value": 3}}"#,
            "the file's constant and the section's, both named by annotations"
        );
    }

    #[test]
    fn textures_samplers_structs_with_arrays_and_immediates_are_described() {
        let f = compile(
            "struct Item { v: vec2<f32> }\nstruct List { count: u32, items: array<Item> }\n\
             // --- KERNEL: img ---\n\
             override W: u32 = 8u;\n\
             @group(0) @binding(0) var src: texture_2d<f32>;\n\
             @group(0) @binding(1) var samp: sampler;\n\
             @group(0) @binding(2) var dst: texture_storage_2d<r32float, write>;\n\
             @group(0) @binding(3) var<storage, read_write> list: List;\n\
             @compute @workgroup_size(W, 1)\n\
             fn img(@builtin(global_invocation_id) g: vec3<u32>) {\n\
                 let v = textureSampleLevel(src, samp, vec2<f32>(0.5), 0.0).x;\n\
                 textureStore(dst, vec2<i32>(g.xy), vec4<f32>(v));\n\
                 list.items[g.x].v = vec2<f32>(v) + f32(list.count);\n\
             }\n\
             // --- KERNEL: push ---\n\
             struct P { a: f32 }\n\
             var<immediate> p: P;\n\
             @group(0) @binding(0) var<storage, read_write> y: array<f32>;\n\
             @compute @workgroup_size(1) fn push() { y[0] = p.a; }\n",
        );
        assert!(f.all_errors().next().is_none(), "{:?}", f.all_errors().collect::<Vec<_>>());
        let e = export(&[f]).unwrap();
        let Some(Json::Array(kernels)) = e.manifest.get("kernels") else { panic!() };
        let Some(Json::Array(b)) = kernels[0].get("bindings") else { panic!() };
        assert_eq!(
            b[0].compact(),
            r#"{"group": 0, "binding": 0, "name": "src", "kind": "texture", "wgsl_type": "texture_2d<f32>", "texture": {"sampleType": "float", "viewDimension": "2d", "multisampled": false}}"#
        );
        assert_eq!(b[1].get("sampler").unwrap().compact(), r#"{"type": "filtering"}"#);
        assert_eq!(
            b[2].get("storage_texture").unwrap().compact(),
            r#"{"access": "write-only", "format": "r32float", "viewDimension": "2d"}"#
        );
        assert_eq!((b[3].get("offset"), b[3].get("stride")), (Some(&Json::int(8)), Some(&Json::int(8))));
        assert!(b[3].get("header").unwrap().compact().starts_with(r#"{"kind": "struct", "name": "List", "size": 8"#));
        assert!(b[3].get("layout").unwrap().compact().contains(r#""name": "Item""#), "the element's layout");
        assert_eq!(kernels[0].get("workgroup_size").unwrap().compact(), "[8, 1, 1]");
        assert_eq!(kernels[0].get("workgroup_size_overrides").unwrap().compact(), r#"["W", null, null]"#);
        let Some(Json::Array(v)) = kernels[0].get("variants") else { panic!() };
        let limits = v[0].get("limits").unwrap();
        assert_eq!(limits.get("maxSampledTexturesPerShaderStage"), Some(&Json::int(1)));
        assert_eq!(limits.get("maxStorageTexturesPerShaderStage"), Some(&Json::int(1)));
        assert_eq!(limits.get("maxSamplersPerShaderStage"), Some(&Json::int(1)));
        // Immediates: described, and the kernel is native only.
        assert_eq!(kernels[1].get("immediate").unwrap().get("size"), Some(&Json::int(4)));
        assert_eq!(kernels[1].get("variants"), Some(&Json::Array(Vec::new())));
        let Some(Json::Array(native)) = kernels[1].get("native_only_variants") else { panic!() };
        assert_eq!(native[0].get("native_features").unwrap().compact(), r#"["IMMEDIATES"]"#);
    }

    #[test]
    fn accumulates_is_checked() {
        for (annotation, why) in [
            ("@accumulates x", "not a `read_write` storage binding"),
            ("@accumulates out", "never reads `out`"),
            ("@accumulates q", "not a binding"),
            ("@accumulates y, y", "named twice"),
            ("@accumulates y z", "like `@accumulates y`"),
        ] {
            let f = compile(&SOURCE.replace("@accumulates y", annotation));
            let errors: Vec<String> = f.all_errors().map(|e| e.message.clone()).collect();
            assert!(
                errors.iter().any(|e| e.contains("in `@accumulates`") && e.contains(why)),
                "{annotation}: {errors:?}"
            );
        }
    }

    #[test]
    fn pretty_text_is_json_that_folds_short_values() {
        let v = Json::object([
            ("short", Json::Array(vec![Json::int(1), Json::int(2)])),
            ("long", Json::str("x".repeat(120))),
            ("quote", Json::str("a\"b\\c\n\u{1}")),
        ]);
        assert_eq!(
            v.pretty(),
            format!(
                "{{\n  \"short\": [1, 2],\n  \"long\": \"{}\",\n  \"quote\": \"a\\\"b\\\\c\\n\\u0001\"\n}}\n",
                "x".repeat(120)
            )
        );
    }
}
