//! Stage 4: naga parses and validates each assembled kernel; errors come back as offsets into
//! the text naga saw (the kernel's `enable` directives + its body), to be mapped to the
//! original files by the caller. The same stage learns what the kernel needs (f16, subgroups,
//! cooperative matrices) and runs naga's SPIR-V backend on it ([`spirv`]), so that a backend
//! failure is a compile error rather than a panic at pipeline creation.

use crate::uniformity;
use naga::valid::{Capabilities, ModuleInfo, ValidationFlags, Validator};
use naga::{Block, Expression, Handle, Module, Statement, TypeInner};
use std::ops::Range;

/// The capabilities kernels may use: those the runtime may ask the device for.
pub const CAPABILITIES: Capabilities = Capabilities::SUBGROUP
    .union(Capabilities::SUBGROUP_BARRIER)
    .union(Capabilities::SHADER_FLOAT16)
    .union(Capabilities::COOPERATIVE_MATRIX)
    .union(Capabilities::SHADER_INT64)
    .union(Capabilities::FLOAT64)
    .union(Capabilities::SHADER_INT64_ATOMIC_MIN_MAX)
    .union(Capabilities::SHADER_INT64_ATOMIC_ALL_OPS)
    .union(Capabilities::IMMEDIATES);

/// The optional capabilities besides subgroups, f16 and cooperative matrices, with the wgpu
/// feature that gives each (the features are named by [`Checked::features`]). 64-bit atomics
/// with every operation come before those with min and max only: `SHADER_INT64_ATOMIC_ALL_OPS`
/// gives both.
pub const FEATURES: [(Capabilities, &str); 6] = [
    (Capabilities::SUBGROUP_BARRIER, "SUBGROUP_BARRIER"),
    (Capabilities::SHADER_INT64, "SHADER_INT64"),
    (Capabilities::FLOAT64, "SHADER_F64"),
    (Capabilities::SHADER_INT64_ATOMIC_ALL_OPS, "SHADER_INT64_ATOMIC_ALL_OPS"),
    (Capabilities::SHADER_INT64_ATOMIC_MIN_MAX, "SHADER_INT64_ATOMIC_MIN_MAX"),
    (Capabilities::IMMEDIATES, "IMMEDIATES"),
];

/// The directive a kernel that uses f16 gets at the top of its source (it makes the kernel
/// need `SHADER_F16`, so only kernels that need it get it).
pub const ENABLE_F16: &str = "enable f16;\n";

/// The directive a kernel that uses cooperative-matrix types or builtins gets (native only:
/// naga rejects coop types without it, and WebGPU has no such extension).
pub const ENABLE_COOP: &str = "enable wgpu_cooperative_matrix;\n";

/// The element type of a cooperative matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CoopScalar {
    /// `f16`
    F16,
    /// `f32`
    F32,
}

/// A cooperative-matrix configuration: an `m`×`k` A times a `k`×`n` B plus an `m`×`n` C, A/B
/// elements of type `ab`, C and result elements of type `cr` (the terms of wgpu's
/// `CooperativeMatrixProperties`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
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

/// A kernel that parsed and validated.
#[derive(Debug)]
pub struct Checked {
    /// The IR (of `prefix` + body).
    pub module: naga::Module,
    /// naga's analysis of it.
    pub info: ModuleInfo,
    /// The `enable` directives the body needed to parse ([`ENABLE_F16`], [`ENABLE_COOP`]), in
    /// that order; spans in `module` are offsets into `prefix` + body.
    pub prefix: String,
    /// Whether it uses f16 (needs `SHADER_F16` and `enable f16;`).
    pub f16: bool,
    /// Whether its text uses subgroup operations or built-ins (needs `SUBGROUP`).
    pub subgroups: bool,
    /// Whether the entry point actually reaches them (a kernel may include subgroup helpers
    /// from the shared preamble without calling them).
    pub reaches_subgroups: bool,
    /// Whether its text uses cooperative matrices (needs `enable wgpu_cooperative_matrix;` and
    /// `EXPERIMENTAL_COOPERATIVE_MATRIX`).
    pub coop: bool,
    /// Whether the entry point reaches a value of a cooperative-matrix type.
    pub reaches_coop: bool,
    /// The configurations the entry point uses, sorted: one per distinct `coopMultiplyAdd`
    /// (m×n×k from its operands, A/B and C element types); a kernel that reaches coop types
    /// without multiplying gets one `size³` configuration per element type it uses.
    pub coop_configs: Vec<CoopConfig>,
    /// The other wgpu features the entry point needs, by name, in the order of [`FEATURES`]
    /// (`SHADER_INT64`, `SHADER_F64`, 64-bit atomics, `IMMEDIATES`). WebGPU has none of them:
    /// a variant that needs one has no browser form.
    pub features: Vec<&'static str>,
}

/// Why a kernel did not check: the errors, and the module when it parsed.
#[derive(Debug)]
pub struct Failure {
    /// The parsed module (absent on a parse error).
    pub module: Option<Box<naga::Module>>,
    /// The directives in front of the body when the errors were found (their spans are
    /// offsets into `prefix` + body).
    pub prefix: String,
    /// What is wrong.
    pub errors: Vec<RawError>,
}

impl Failure {
    fn new(module: Option<naga::Module>, prefix: String, errors: Vec<RawError>) -> Failure {
        Failure { module: module.map(Box::new), prefix, errors }
    }
}

/// An error with spans in the text naga saw.
#[derive(Clone, Debug, PartialEq)]
pub struct RawError {
    /// The primary span and its label.
    pub primary: Option<(Range<usize>, String)>,
    /// Headline.
    pub message: String,
    /// Notes, possibly with spans of their own.
    pub notes: Vec<(Option<Range<usize>>, String)>,
}

/// The text of a caught panic.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Parses and validates a kernel's source (without any `enable` line) and reads what its entry
/// point `entry` needs. A body that only parses with `enable f16;` or
/// `enable wgpu_cooperative_matrix;` in front uses f16 or cooperative matrices, and the
/// directive becomes part of its source ([`Checked::prefix`]). On a parse error no module
/// exists; on a validation error the parsed module is returned too (so the kernel's interface
/// can still be emitted).
pub fn check(body: &str, entry: &str) -> Result<Checked, Failure> {
    // A panic inside naga must not become "proc macro panicked" without a location.
    match std::panic::catch_unwind(|| check_inner(body, entry)) {
        Ok(r) => r,
        Err(panic) => Err(Failure::new(
            None,
            String::new(),
            vec![RawError {
                primary: None,
                message: format!(
                    "naga panicked on this kernel ({}); please report it with the kernel's source",
                    panic_text(&*panic)
                ),
                notes: Vec::new(),
            }],
        )),
    }
}

/// The directives, in their fixed order.
fn prefix(f16: bool, coop: bool) -> String {
    format!("{}{}", if f16 { ENABLE_F16 } else { "" }, if coop { ENABLE_COOP } else { "" })
}

/// Bytes of WGSL given to naga's parser so far in this process: what tests count to show that
/// shared code is parsed once per file, not once per kernel.
static PARSED_BYTES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Bytes of WGSL this process has given naga's parser (see `tests/scale.rs`).
pub fn parsed_bytes() -> usize {
    PARSED_BYTES.load(std::sync::atomic::Ordering::Relaxed)
}

/// Parses `body`, adding each directive naga says is missing (at most two retries).
fn parse(body: &str) -> Result<(naga::Module, bool, bool), Failure> {
    let (mut f16, mut coop) = (false, false);
    loop {
        let p = prefix(f16, coop);
        let text = format!("{p}{body}");
        PARSED_BYTES.fetch_add(text.len(), std::sync::atomic::Ordering::Relaxed);
        match naga::front::wgsl::parse_str(&text) {
            Ok(m) => return Ok((m, f16, coop)),
            Err(e) => {
                let message = e.message();
                if !f16 && message.contains("`f16` enable extension is not enabled") {
                    f16 = true;
                } else if !coop && message.contains("`wgpu_cooperative_matrix` enable extension is not enabled") {
                    coop = true;
                } else {
                    return Err(Failure::new(None, p, vec![parse_error(&e)]));
                }
            }
        }
    }
}

/// The most bytes of immediates naga 30 validates: it tracks them in a 64-bit mask of 4-byte
/// slots, and overflows (a panic) past it.
pub const MAX_IMMEDIATE_BYTES: u32 = 256;

fn check_inner(body: &str, entry: &str) -> Result<Checked, Failure> {
    let (module, f16, coop) = parse(body)?;
    let prefix = prefix(f16, coop);
    let mut layouter = naga::proc::Layouter::default();
    if layouter.update(module.to_ctx()).is_ok() {
        let too_large = module
            .global_variables
            .iter()
            .filter(|(_, v)| v.space == naga::AddressSpace::Immediate)
            .map(|(h, v)| (module.global_variables.get_span(h), layouter[v.ty].size))
            .find(|(_, size)| *size > MAX_IMMEDIATE_BYTES);
        if let Some((span, size)) = too_large {
            let error = RawError {
                primary: span.to_range().map(|r| (r, format!("{size} bytes"))),
                message: format!(
                    "`var<immediate>` of {size} bytes: naga 30 takes at most {MAX_IMMEDIATE_BYTES} bytes of immediates"
                ),
                notes: vec![(None, "pass larger data in a uniform buffer".into())],
            };
            return Err(Failure::new(Some(module), prefix, vec![error]));
        }
    }
    let info = match validator(CAPABILITIES).validate(&module) {
        Ok(info) => info,
        Err(e) => {
            let mut raw = validation_error(&e);
            if raw.primary.is_none() {
                let text = format!("{prefix}{body}");
                raw.primary = declaration_span(e.as_inner(), &module, &text).map(|r| (r, String::new()));
            }
            return Err(Failure::new(Some(module), prefix, vec![raw]));
        }
    };
    let mismatched = coop_mismatches(&module, &info);
    if !mismatched.is_empty() {
        return Err(Failure::new(Some(module), prefix, mismatched));
    }
    let uniformity = uniformity::check(&module);
    if !uniformity.is_empty() {
        let errors = uniformity
            .into_iter()
            .map(|u| RawError {
                primary: u.span.to_range().map(|r| (r, "needs every invocation of the workgroup here".to_string())),
                message: u.message,
                notes: vec![(
                    u.cause.and_then(|c| c.to_range()),
                    "control flow depends on this non-uniform value (WGSL's uniformity rules; \
                     Chrome rejects such shaders and GPUs give wrong results)"
                        .to_string(),
                )],
            })
            .collect();
        return Err(Failure::new(Some(module), prefix, errors));
    }
    let subgroups = validator(CAPABILITIES - Capabilities::SUBGROUP).validate(&module).is_err();
    let reaches_subgroups = subgroups && {
        let mut used = module.clone();
        naga::compact::compact(&mut used, naga::compact::KeepUnused::No);
        validator(CAPABILITIES - Capabilities::SUBGROUP).validate(&used).is_err()
    };
    let (reaches_coop, coop_configs) = if coop { coop_use(&module, &info, entry) } else { (false, Vec::new()) };
    let features = other_features(&module);
    Ok(Checked { module, info, prefix, f16, subgroups, reaches_subgroups, coop, reaches_coop, coop_configs, features })
}

/// Whether a block holds `subgroupBarrier()`, at any depth.
fn has_subgroup_barrier(block: &Block) -> bool {
    block.iter().any(|stmt| match stmt {
        Statement::ControlBarrier(b) => b.contains(naga::Barrier::SUB_GROUP),
        Statement::Block(b) => has_subgroup_barrier(b),
        Statement::If { accept, reject, .. } => has_subgroup_barrier(accept) || has_subgroup_barrier(reject),
        Statement::Loop { body, continuing, .. } => has_subgroup_barrier(body) || has_subgroup_barrier(continuing),
        Statement::Switch { cases, .. } => cases.iter().any(|c| has_subgroup_barrier(&c.body)),
        _ => false,
    })
}

/// The features of [`FEATURES`] the module's entry point needs: for each capability that the
/// module's code, types or globals could need (`subgroupBarrier()`, 64-bit scalars, 64-bit
/// atomics, immediates), whether the code the entry point reaches validates without it.
fn other_features(module: &Module) -> Vec<&'static str> {
    let barrier = module.functions.iter().any(|(_, f)| has_subgroup_barrier(&f.body))
        || module.entry_points.iter().any(|e| has_subgroup_barrier(&e.function.body));
    let wide = |s: naga::Scalar| s.width == 8;
    let types = || module.types.iter().map(|(_, t)| &t.inner);
    let int64 = types().any(|t| match *t {
        TypeInner::Scalar(s) | TypeInner::Vector { scalar: s, .. } | TypeInner::Atomic(s) => {
            wide(s) && s.kind != naga::ScalarKind::Float
        }
        _ => false,
    });
    let f64 = types().any(|t| match *t {
        TypeInner::Scalar(s) | TypeInner::Vector { scalar: s, .. } | TypeInner::Matrix { scalar: s, .. } => {
            wide(s) && s.kind == naga::ScalarKind::Float
        }
        _ => false,
    });
    let atomics = types().any(|t| matches!(*t, TypeInner::Atomic(s) if wide(s)));
    let immediates = module.global_variables.iter().any(|(_, v)| v.space == naga::AddressSpace::Immediate);
    if !(barrier || int64 || f64 || atomics || immediates) {
        return Vec::new();
    }
    let mut used = module.clone();
    naga::compact::compact(&mut used, naga::compact::KeepUnused::No);
    let needs = |without: Capabilities| validator(CAPABILITIES - without).validate(&used).is_err();
    let mut out = Vec::new();
    if barrier && needs(Capabilities::SUBGROUP_BARRIER) {
        out.push("SUBGROUP_BARRIER");
    }
    if int64 && needs(Capabilities::SHADER_INT64) {
        out.push("SHADER_INT64");
    }
    if f64 && needs(Capabilities::FLOAT64) {
        out.push("SHADER_F64");
    }
    if atomics {
        if needs(Capabilities::SHADER_INT64_ATOMIC_ALL_OPS) {
            out.push("SHADER_INT64_ATOMIC_ALL_OPS");
        } else if needs(Capabilities::SHADER_INT64_ATOMIC_ALL_OPS | Capabilities::SHADER_INT64_ATOMIC_MIN_MAX) {
            out.push("SHADER_INT64_ATOMIC_MIN_MAX");
        }
    }
    if immediates && needs(Capabilities::IMMEDIATES) {
        out.push("IMMEDIATES");
    }
    out
}

/// The functions the entry point `entry` calls, directly or not (not the entry point itself).
fn reachable_functions(module: &Module, entry: &str) -> Option<(usize, Vec<Handle<naga::Function>>)> {
    fn calls(block: &Block, out: &mut Vec<Handle<naga::Function>>) {
        for stmt in block.iter() {
            match stmt {
                Statement::Call { function, .. } if !out.contains(function) => out.push(*function),
                Statement::Block(b) => calls(b, out),
                Statement::If { accept, reject, .. } => {
                    calls(accept, out);
                    calls(reject, out);
                }
                Statement::Switch { cases, .. } => cases.iter().for_each(|c| calls(&c.body, out)),
                Statement::Loop { body, continuing, .. } => {
                    calls(body, out);
                    calls(continuing, out);
                }
                _ => {}
            }
        }
    }
    let index = module.entry_points.iter().position(|ep| ep.name == entry && ep.stage == naga::ShaderStage::Compute)?;
    let mut found = Vec::new();
    calls(&module.entry_points[index].function.body, &mut found);
    let mut i = 0;
    while i < found.len() {
        let f = found[i];
        calls(&module.functions[f].body, &mut found);
        i += 1;
    }
    Some((index, found))
}

/// Whether the entry point reaches cooperative-matrix values, and the configurations the
/// kernel uses (see [`Checked::coop_configs`]).
fn coop_use(module: &Module, info: &ModuleInfo, entry: &str) -> (bool, Vec<CoopConfig>) {
    let Some((index, functions)) = reachable_functions(module, entry) else { return (false, Vec::new()) };
    let reached = std::iter::once((&module.entry_points[index].function, info.get_entry_point(index)))
        .chain(functions.iter().map(|&f| (&module.functions[f], &info[f])));
    let (reaches, configs) = coop_configs(module, reached);
    if !configs.is_empty() {
        return (reaches, configs);
    }
    // The text needs the directive, so the variant needs the feature even where the entry
    // point reaches no coop value: name the configurations of the whole module.
    let all = module
        .entry_points
        .iter()
        .enumerate()
        .map(|(i, ep)| (&ep.function, info.get_entry_point(i)))
        .chain(module.functions.iter().map(|(h, f)| (f, &info[h])));
    let (_, mut configs) = coop_configs(module, all);
    if configs.is_empty() {
        configs = module.types.iter().filter_map(|(_, t)| plain_config(&t.inner)).collect();
        configs.sort();
        configs.dedup();
    }
    (reaches, configs)
}

fn coop_scalar(s: naga::Scalar) -> CoopScalar {
    if s.width == 2 { CoopScalar::F16 } else { CoopScalar::F32 }
}

/// The `size³` configuration of a coop type, for kernels that never multiply.
fn plain_config(t: &TypeInner) -> Option<CoopConfig> {
    match *t {
        TypeInner::CooperativeMatrix { columns, scalar, .. } => {
            let n = columns as u32;
            Some(CoopConfig { m: n, n, k: n, ab: coop_scalar(scalar), cr: coop_scalar(scalar) })
        }
        _ => None,
    }
}

/// Whether `functions` hold a value of a coop type, and their configurations: one per distinct
/// `coopMultiplyAdd`, or, without any, the `size³` configuration of each coop type used.
fn coop_configs<'a>(
    module: &Module,
    functions: impl Iterator<Item = (&'a naga::Function, &'a naga::valid::FunctionInfo)>,
) -> (bool, Vec<CoopConfig>) {
    let mut reached = false;
    let mut configs = Vec::new();
    let mut plain = Vec::new();
    for (function, finfo) in functions {
        let ty = |e: Handle<Expression>| finfo[e].ty.inner_with(&module.types).clone();
        for (handle, expr) in function.expressions.iter() {
            if let Some(c) = plain_config(&ty(handle)) {
                reached = true;
                plain.push(c);
            }
            if let Expression::CooperativeMultiplyAdd { a, b, c } = *expr
                && let (
                    TypeInner::CooperativeMatrix { rows: m, columns: k, scalar: ab, .. },
                    TypeInner::CooperativeMatrix { columns: n, .. },
                    TypeInner::CooperativeMatrix { scalar: cr, .. },
                ) = (ty(a), ty(b), ty(c))
            {
                configs.push(CoopConfig {
                    m: m as u32,
                    n: n as u32,
                    k: k as u32,
                    ab: coop_scalar(ab),
                    cr: coop_scalar(cr),
                });
            }
        }
    }
    if configs.is_empty() {
        configs = plain;
    }
    configs.sort();
    configs.dedup();
    (reached, configs)
}

/// Every `coopMultiplyAdd(a, b, c)` whose operands do not make one configuration: A is m×k, B
/// k×n and C m×n, and A and B hold the same element type (naga checks only their roles, and an
/// adapter offers no such product).
fn coop_mismatches(module: &Module, info: &ModuleInfo) -> Vec<RawError> {
    let functions = module
        .entry_points
        .iter()
        .enumerate()
        .map(|(i, ep)| (&ep.function, info.get_entry_point(i)))
        .chain(module.functions.iter().map(|(h, f)| (f, &info[h])));
    let mut out = Vec::new();
    for (function, finfo) in functions {
        let ty = |e: Handle<Expression>| finfo[e].ty.inner_with(&module.types).clone();
        for (handle, expr) in function.expressions.iter() {
            let Expression::CooperativeMultiplyAdd { a, b, c } = *expr else { continue };
            let (
                TypeInner::CooperativeMatrix { rows: am, columns: ak, scalar: sa, .. },
                TypeInner::CooperativeMatrix { rows: bk, columns: bn, scalar: sb, .. },
                TypeInner::CooperativeMatrix { rows: cm, columns: cn, .. },
            ) = (ty(a), ty(b), ty(c))
            else {
                continue;
            };
            let (am, ak, bk, bn, cm, cn) = (am as u32, ak as u32, bk as u32, bn as u32, cm as u32, cn as u32);
            let mut wrong = Vec::new();
            if ak != bk {
                wrong.push(format!("A has {ak} columns but B has {bk} rows"));
            }
            if am != cm {
                wrong.push(format!("A has {am} rows but C has {cm}"));
            }
            if bn != cn {
                wrong.push(format!("B has {bn} columns but C has {cn}"));
            }
            if sa != sb {
                wrong.push(format!(
                    "A holds {} and B holds {}",
                    if sa.width == 2 { "f16" } else { "f32" },
                    if sb.width == 2 { "f16" } else { "f32" }
                ));
            }
            if wrong.is_empty() {
                continue;
            }
            out.push(RawError {
                primary: function
                    .expressions
                    .get_span(handle)
                    .to_range()
                    .map(|r| (r, format!("A {am}×{ak}, B {bk}×{bn}, C {cm}×{cn}"))),
                message: format!("`coopMultiplyAdd` of mismatched operands: {}", wrong.join(", ")),
                notes: vec![(
                    None,
                    "the product is an m×k A times a k×n B plus an m×n C, with A and B of one element type; \
                     adapters offer only such configurations"
                        .into(),
                )],
            });
        }
    }
    out
}

/// What a variant needs from the device, which is what naga's SPIR-V backend is allowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Needs {
    /// `SUBGROUP`.
    pub subgroups: bool,
    /// `SHADER_F16`.
    pub f16: bool,
    /// `EXPERIMENTAL_COOPERATIVE_MATRIX`.
    pub coop: bool,
    /// The other features ([`Checked::features`]).
    pub features: Vec<&'static str>,
}

impl Needs {
    /// Whether a device that offers `self` offers all `other` needs.
    pub fn covers(&self, other: &Needs) -> bool {
        (self.subgroups || !other.subgroups)
            && (self.f16 || !other.f16)
            && (self.coop || !other.coop)
            && other.features.iter().all(|f| self.features.contains(f))
    }
}

/// The Vulkan device naga's SPIR-V is written for, in the terms from which wgpu-hal 30's Vulkan
/// backend builds its `spv::Options` when it opens a device (`Adapter::open`): the wgpu features
/// enabled and what the driver offers. The build-time check and `tools/pipeline-stats` (which
/// fills it from a real device) both write SPIR-V through [`VulkanTarget::options`] and
/// [`write_spirv`], so the two cannot drift apart.
///
/// What wgpu also sets and is fixed here: release flags (`InstanceFlags::DEBUG` off, so no debug
/// names or source) and zero-initialised workgroup memory (what the runtime asks for). The
/// task-shader dispatch limits, which only task shaders read, are left out. The module's runtime
/// checks are [`VulkanTarget::runtime_checks`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VulkanTarget {
    /// The device's Vulkan version, (major, minor): it picks the SPIR-V version (1.0, 1.3, 1.5,
    /// 1.6 for Vulkan 1.0, 1.1, 1.2, 1.3 and later).
    pub api_version: (u32, u32),
    /// wgpu's `SUBGROUP` is enabled.
    pub subgroups: bool,
    /// `SHADER_F16` is enabled.
    pub f16: bool,
    /// `EXPERIMENTAL_COOPERATIVE_MATRIX` is enabled (wgpu then offers naga the Vulkan memory
    /// model, which naga uses for the modules that hold cooperative matrices).
    pub coop: bool,
    /// The driver's `shaderIntegerDotProduct`.
    pub integer_dot_product: bool,
    /// The driver's `shaderInt8`.
    pub int8: bool,
    /// `robustBufferAccess2` (`VK_EXT_robustness2`): naga leaves buffer bounds to the driver;
    /// without it naga clamps every buffer index itself.
    pub robust_buffer_access2: bool,
    /// `robustImageAccess2`, or `robustImageAccess` without `VK_EXT_robustness2`.
    pub robust_image_access: bool,
    /// `shaderZeroInitializeWorkgroupMemory`: the driver zeroes workgroup memory; without it
    /// naga writes the zeroing code into the kernel.
    pub zero_initialize_workgroup_memory: bool,
    /// `storageInputOutput16` with `SHADER_F16`.
    pub storage_input_output_16: bool,
    /// A Qualcomm device (vendor 0x5143), where wgpu does not label varyings.
    pub qualcomm: bool,
    /// `SHADER_INT64`, `SHADER_F64`, and 64-bit atomics (`SHADER_INT64_ATOMIC_MIN_MAX` or
    /// `_ALL_OPS`) are enabled.
    pub int64: bool,
    pub float64: bool,
    pub int64_atomics: bool,
    /// The module is created with wgpu's runtime checks, as a safe `create_shader_module`
    /// creates it: naga clamps indices, bounds loops and guards integer division. `false` for a
    /// kernel marked `// @unchecked`, whose module the runtime creates with
    /// `ShaderRuntimeChecks::unchecked()`: every bounds-check policy `Unchecked`, no loop
    /// bounding, no division guards (wgpu-hal's `compile_stage`).
    pub runtime_checks: bool,
}

impl VulkanTarget {
    /// What the build-time check assumes: a Vulkan 1.3 device with `VK_EXT_robustness2`,
    /// int8 and integer dot products (the H200's driver and lavapipe both), enabling exactly the
    /// features a variant with `needs` requires, and a module with the runtime checks on.
    pub fn build_time(needs: &Needs) -> VulkanTarget {
        let has = |f: &str| needs.features.contains(&f);
        VulkanTarget {
            api_version: (1, 3),
            subgroups: needs.subgroups,
            f16: needs.f16,
            coop: needs.coop,
            integer_dot_product: true,
            int8: true,
            robust_buffer_access2: true,
            robust_image_access: true,
            zero_initialize_workgroup_memory: true,
            storage_input_output_16: false,
            qualcomm: false,
            int64: has("SHADER_INT64"),
            float64: has("SHADER_F64"),
            int64_atomics: has("SHADER_INT64_ATOMIC_MIN_MAX") || has("SHADER_INT64_ATOMIC_ALL_OPS"),
            runtime_checks: true,
        }
    }

    /// naga's SPIR-V options as wgpu-hal 30 builds them for this device and a pipeline layout
    /// whose bindings `binding_map` maps (see [`binding_map`]).
    pub fn options(&self, binding_map: naga::back::spv::BindingMap) -> naga::back::spv::Options<'static> {
        use naga::back::spv;
        // Always available on Vulkan; the downlevel flags add cube arrays and sample-rate
        // shading on every device this project runs on.
        let mut capabilities = vec![
            spv::Capability::Shader,
            spv::Capability::Matrix,
            spv::Capability::Sampled1D,
            spv::Capability::Image1D,
            spv::Capability::ImageQuery,
            spv::Capability::DerivativeControl,
            spv::Capability::StorageImageExtendedFormats,
            spv::Capability::SampledCubeArray,
            spv::Capability::SampleRateShading,
        ];
        if self.subgroups {
            capabilities.extend([
                spv::Capability::GroupNonUniform,
                spv::Capability::GroupNonUniformVote,
                spv::Capability::GroupNonUniformArithmetic,
                spv::Capability::GroupNonUniformBallot,
                spv::Capability::GroupNonUniformShuffle,
                spv::Capability::GroupNonUniformShuffleRelative,
                spv::Capability::GroupNonUniformQuad,
            ]);
        }
        if self.f16 {
            capabilities.push(spv::Capability::Float16);
        }
        if self.coop {
            capabilities.push(spv::Capability::CooperativeMatrixKHR);
            capabilities.push(spv::Capability::VulkanMemoryModel);
        }
        if self.integer_dot_product {
            capabilities.extend([
                spv::Capability::DotProductInputAllKHR,
                spv::Capability::DotProductInput4x8BitKHR,
                spv::Capability::DotProductInput4x8BitPackedKHR,
                spv::Capability::DotProductKHR,
            ]);
        }
        if self.int8 {
            capabilities.push(spv::Capability::Int8);
        }
        if self.int64 {
            capabilities.push(spv::Capability::Int64);
        }
        if self.float64 {
            capabilities.push(spv::Capability::Float64);
        }
        if self.int64_atomics {
            capabilities.push(spv::Capability::Int64Atomics);
        }
        let mut flags = spv::WriterFlags::FORCE_POINT_SIZE;
        flags.set(spv::WriterFlags::LABEL_VARYINGS, !self.qualcomm);
        let restrict = |robust: bool| {
            if robust || !self.runtime_checks {
                naga::proc::BoundsCheckPolicy::Unchecked
            } else {
                naga::proc::BoundsCheckPolicy::Restrict
            }
        };
        spv::Options {
            lang_version: match self.api_version {
                (1, 0) => (1, 0),
                (1, 1) => (1, 3),
                (1, 2) => (1, 5),
                _ => (1, 6),
            },
            flags,
            fake_missing_bindings: false,
            binding_map,
            capabilities: Some(capabilities.into_iter().collect()),
            bounds_check_policies: naga::proc::BoundsCheckPolicies {
                index: restrict(false),
                buffer: restrict(self.robust_buffer_access2),
                image_load: restrict(self.robust_image_access),
                binding_array: naga::proc::BoundsCheckPolicy::Unchecked,
            },
            zero_initialize_workgroup_memory: if self.zero_initialize_workgroup_memory {
                spv::ZeroInitializeWorkgroupMemoryMode::Native
            } else {
                spv::ZeroInitializeWorkgroupMemoryMode::Polyfill
            },
            force_loop_bounding: self.runtime_checks,
            ray_query_initialization_tracking: self.runtime_checks,
            trace_ray_argument_validation: true,
            use_storage_input_output_16: self.f16 && self.storage_input_output_16,
            debug_info: None,
            task_dispatch_limits: None,
            mesh_shader_primitive_indices_clamp: self.runtime_checks,
            emit_int_div_checks: self.runtime_checks,
        }
    }
}

/// The binding map wgpu-hal's Vulkan backend gives naga for a pipeline layout holding exactly
/// the module's bindings: in each group, the bindings in increasing order numbered 0, 1, 2, …
/// (the Vulkan binding numbers of wgpu's descriptor set layouts, not the WGSL ones).
pub fn binding_map(module: &Module) -> naga::back::spv::BindingMap {
    let mut bindings: Vec<naga::ResourceBinding> =
        module.global_variables.iter().filter_map(|(_, v)| v.binding).collect();
    bindings.sort_by_key(|b| (b.group, b.binding));
    bindings.dedup();
    let mut map = naga::back::spv::BindingMap::default();
    let mut next = (u32::MAX, 0);
    for rb in bindings {
        if next.0 != rb.group {
            next = (rb.group, 0);
        }
        map.insert(
            rb,
            naga::back::spv::BindingInfo { descriptor_set: rb.group, binding: next.1, binding_array_size: None },
        );
        next.1 += 1;
    }
    map
}

/// Why [`write_spirv`] wrote nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpirvError {
    /// `naga::back::pipeline_constants::process_overrides` rejected the override values (wgpu's
    /// `PipelineError::PipelineConstants`).
    Overrides(String),
    /// naga's SPIR-V writer failed (wgpu's `PipelineError::Linkage`).
    Writer(String),
}

impl std::fmt::Display for SpirvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpirvError::Overrides(e) => write!(f, "override values rejected: {e}"),
            SpirvError::Writer(e) => write!(f, "naga's SPIR-V writer failed: {e}"),
        }
    }
}

/// The SPIR-V wgpu 30's Vulkan backend creates the compute pipeline of entry point `entry` from
/// (`wgpu-hal` `Device::compile_stage`): every module is compiled per entry point (wgpu-hal
/// always applies its `SEPARATE_ENTRY_POINTS` workaround), overrides substituted by
/// `process_overrides` with `constants` (keys as wgpu takes them: the `@id` if given, else the
/// name), then `write_vec` with [`VulkanTarget::options`] and the layout's [`binding_map`].
/// naga may panic on code its validator accepted: callers that must not unwind catch it.
pub fn write_spirv(
    module: &Module,
    info: &ModuleInfo,
    entry: &str,
    constants: &naga::back::PipelineConstants,
    target: &VulkanTarget,
) -> Result<Vec<u32>, SpirvError> {
    use naga::back::spv;
    // The layout holds the module's bindings whatever the entry point uses.
    let options = target.options(binding_map(module));
    let (processed, processed_info) = naga::back::pipeline_constants::process_overrides(
        module,
        info,
        Some((naga::ShaderStage::Compute, entry)),
        constants,
    )
    .map_err(|e| SpirvError::Overrides(e.to_string()))?;
    let pipeline = spv::PipelineOptions { entry_point: entry.to_string(), shader_stage: naga::ShaderStage::Compute };
    spv::write_vec(&processed, &processed_info, &options, Some(&pipeline))
        .map_err(|e| SpirvError::Writer(e.to_string()))
}

/// Runs naga's SPIR-V backend on a checked kernel as wgpu's Vulkan backend does at pipeline
/// creation ([`write_spirv`] for [`VulkanTarget::build_time`], with the kernel's
/// `runtime_checks`: `false` for an `@unchecked` kernel), overrides without a default given the
/// value 1, under `catch_unwind`. An error or a panic comes back as a [`RawError`]
/// with a hint; for naga 30.0.2's "Expression \[N\] is not cached" panic on
/// `coopStore`/`coopStoreT` the error points at the store.
pub fn spirv(checked: &Checked, entry: &str, needs: &Needs, runtime_checks: bool) -> Result<(), RawError> {
    let module = &checked.module;
    let mut constants = naga::back::PipelineConstants::default();
    for (_, o) in module.overrides.iter() {
        if o.init.is_none() {
            let key = o.id.map(|id| id.to_string()).or_else(|| o.name.clone()).unwrap_or_default();
            constants.insert(key, 1.0);
        }
    }
    let target = VulkanTarget { runtime_checks, ..VulkanTarget::build_time(needs) };
    let written = std::panic::catch_unwind(|| write_spirv(module, &checked.info, entry, &constants, &target));
    let (what, panicked) = match written {
        Ok(Ok(_)) => return Ok(()),
        // Only our stand-in values can be wrong here; the runtime processes the real ones.
        Ok(Err(SpirvError::Overrides(_))) => return Ok(()),
        Ok(Err(SpirvError::Writer(e))) => (e, false),
        Err(panic) => (panic_text(&*panic), true),
    };
    let uncached = panicked && what.contains("is not cached");
    // The spans the store search reads are those of the processed module, which keeps them.
    let processed = naga::back::pipeline_constants::process_overrides(
        module,
        &checked.info,
        Some((naga::ShaderStage::Compute, entry)),
        &constants,
    );
    let primary = match (&processed, uncached) {
        (Ok((processed, _)), true) => uncached_store(processed, entry, &what),
        _ => None,
    };
    let mut notes = Vec::new();
    if uncached {
        notes.push((
            None,
            "hint: naga 30.0.2's SPIR-V writer cannot take an inline expression as the index or the stride of \
             `coopStore`/`coopStoreT` (its validator accepts it); bind both to `let`s first: \
             `let at = row * ld + col; let ld_c = ld; coopStore(acc, &c[at], ld_c);`"
                .to_string(),
        ));
    } else {
        notes.push((
            None,
            "hint: this is a naga backend failure on code its validator accepted; rewrite the statement \
             (binding subexpressions to `let`s often avoids it) and report it to naga with the kernel's source"
                .to_string(),
        ));
    }
    notes.push((None, "wgpu would hit this when it creates the kernel's pipeline on Vulkan".to_string()));
    Err(RawError {
        primary: primary.map(|r| (r, "naga's SPIR-V writer fails here".to_string())),
        message: if panicked {
            format!("naga's SPIR-V backend panicked on this kernel: {what}")
        } else {
            format!("naga's SPIR-V backend rejects this kernel: {what}")
        },
        notes,
    })
}

/// Where a "not cached" panic comes from: the `coopStore` whose pointer index or stride is the
/// expression the panic names, else the first `coopStore` with an index or stride that is
/// not a named `let`, a literal or a constant.
fn uncached_store(module: &Module, entry: &str, panic: &str) -> Option<Range<usize>> {
    let named: Option<usize> = panic
        .split_once("Expression [")
        .and_then(|(_, rest)| rest.split_once(']'))
        .and_then(|(n, _)| n.trim().parse().ok());
    let (index, functions) = reachable_functions(module, entry)?;
    let bodies =
        std::iter::once(&module.entry_points[index].function).chain(functions.iter().map(|&f| &module.functions[f]));
    let mut exact = None;
    let mut likely = None;
    for function in bodies {
        let mut stores = Vec::new();
        collect_stores(&function.body, &mut stores);
        for (data, span) in stores {
            let mut operands = vec![data.stride];
            let mut p = data.pointer;
            loop {
                match function.expressions[p] {
                    Expression::Access { base, index } => {
                        operands.push(index);
                        p = base;
                    }
                    Expression::AccessIndex { base, .. } => p = base,
                    _ => break,
                }
            }
            let inline = |h: Handle<Expression>| {
                !function.named_expressions.contains_key(&h)
                    && !matches!(
                        function.expressions[h],
                        Expression::Literal(_) | Expression::Constant(_) | Expression::Override(_)
                    )
            };
            if exact.is_none() && named.is_some_and(|n| operands.iter().any(|h| h.index() == n)) {
                exact = span.to_range();
            }
            if likely.is_none() && operands.iter().any(|&h| inline(h)) {
                likely = span.to_range();
            }
        }
    }
    exact.or(likely)
}

fn collect_stores(block: &Block, out: &mut Vec<(naga::CooperativeData, naga::Span)>) {
    for (stmt, span) in block.span_iter() {
        match stmt {
            Statement::CooperativeStore { data, .. } => out.push((*data, *span)),
            Statement::Block(b) => collect_stores(b, out),
            Statement::If { accept, reject, .. } => {
                collect_stores(accept, out);
                collect_stores(reject, out);
            }
            Statement::Switch { cases, .. } => cases.iter().for_each(|c| collect_stores(&c.body, out)),
            Statement::Loop { body, continuing, .. } => {
                collect_stores(body, out);
                collect_stores(continuing, out);
            }
            _ => {}
        }
    }
}

fn validator(caps: Capabilities) -> Validator {
    Validator::new(ValidationFlags::all(), caps)
}

fn parse_error(e: &naga::front::wgsl::ParseError) -> RawError {
    // The first label with a place leads (naga gives some errors, like a wrong return type,
    // no span of their own but a labelled one).
    let mut labels: Vec<(Option<Range<usize>>, String)> =
        e.labels().map(|(span, label)| (span.to_range(), label.to_string())).collect();
    let lead = labels.iter().position(|(r, _)| r.is_some());
    let primary = lead.map(|i| labels.remove(i)).and_then(|(r, l)| r.map(|r| (r, l)));
    let mut notes = labels;
    notes.extend(e.notes().map(|n| (None, n.to_string())));
    RawError { primary, message: e.message().to_string(), notes }
}

/// Where a declaration of type `ty` is: the type's own (a struct), else a global variable or
/// struct whose type holds it.
fn type_span(module: &Module, ty: Handle<naga::Type>) -> naga::Span {
    let own = module.types.get_span(ty);
    if own.is_defined() {
        return own;
    }
    let holds = |outer: Handle<naga::Type>| {
        let mut t = outer;
        loop {
            if t == ty {
                return true;
            }
            match module.types[t].inner {
                TypeInner::Array { base, .. }
                | TypeInner::BindingArray { base, .. }
                | TypeInner::Pointer { base, .. } => t = base,
                _ => return false,
            }
        }
    };
    if let Some((h, _)) = module.global_variables.iter().find(|(_, v)| holds(v.ty)) {
        return module.global_variables.get_span(h);
    }
    for (h, t) in module.types.iter() {
        if let TypeInner::Struct { members, .. } = &t.inner
            && members.iter().any(|m| holds(m.ty))
        {
            return module.types.get_span(h);
        }
    }
    naga::Span::UNDEFINED
}

/// The name of `fn name` in `text`.
pub fn fn_name_span(text: &str, name: &str) -> Option<Range<usize>> {
    let code = crate::split::mask_comments(text);
    crate::split::find_word(&code, "fn").into_iter().find_map(|r| {
        let after = code[r.end..].trim_start();
        let start = r.end + (code[r.end..].len() - after.len());
        (after.starts_with(name) && !after[name.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_'))
            .then(|| start..start + name.len())
    })
}

/// The place of the declaration a validation error without spans is about.
fn declaration_span(e: &naga::valid::ValidationError, module: &Module, text: &str) -> Option<Range<usize>> {
    use naga::valid::ValidationError as V;
    let span = match e {
        V::Function { handle, .. } => module.functions.get_span(*handle),
        V::GlobalVariable { handle, .. } => module.global_variables.get_span(*handle),
        V::Constant { handle, .. } => module.constants.get_span(*handle),
        V::Override { handle, .. } => module.overrides.get_span(*handle),
        V::Type { handle, .. } => type_span(module, *handle),
        V::Layouter(l) => type_span(module, l.ty),
        V::EntryPoint { name, .. } => return fn_name_span(text, name),
        _ => naga::Span::UNDEFINED,
    };
    span.to_range()
}

fn validation_error(e: &naga::WithSpan<naga::valid::ValidationError>) -> RawError {
    // naga nests errors: "Function [1] 'f' is invalid" → "Expression [3] is invalid" → the
    // actual problem. Lead with the innermost, keep the outer ones as context.
    let mut chain = vec![e.as_inner().to_string()];
    let mut source = std::error::Error::source(e.as_inner());
    while let Some(s) = source {
        let text = s.to_string();
        if chain.last() != Some(&text) {
            chain.push(text);
        }
        source = s.source();
    }
    let message = chain.pop().unwrap_or_default();
    // naga labels some spans with its own arena names ("naga::ir::GlobalVariable [0]"): they
    // mean nothing to a reader of the WGSL.
    let mut spans = e.spans().filter_map(|(s, l)| {
        let l = if l.starts_with("naga::") { String::new() } else { l.clone() };
        s.to_range().map(|r| (r, l))
    });
    // The last span naga attaches is the most specific one.
    let all: Vec<_> = spans.by_ref().collect();
    let primary = all.last().cloned();
    let mut notes: Vec<(Option<Range<usize>>, String)> = Vec::new();
    for (r, l) in all.iter().rev().skip(1) {
        if !l.is_empty() {
            notes.push((Some(r.clone()), l.clone()));
        }
    }
    if !chain.is_empty() {
        notes.push((None, format!("naga: {}", chain.join(": "))));
    }
    if message.contains("HOST_SHAREABLE") {
        notes.push((
            None,
            "this type cannot be shared with the host: `bool` (or a type holding one) has no defined layout; use `u32`"
                .into(),
        ));
    }
    RawError { primary, message: format!("validation error: {message}"), notes }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str = "@group(0) @binding(0) var<storage, read_write> x: array<f32>;\n\
        @compute @workgroup_size(64) fn k(@builtin(global_invocation_id) g: vec3<u32>) { x[g.x] = 1.0; }\n";

    #[test]
    fn detects_f16_and_subgroups() {
        let c = check(OK, "k").unwrap();
        assert!(!c.f16 && !c.subgroups);
        let f16 = OK.replace("x[g.x] = 1.0;", "x[g.x] = f32(f16(1.0));");
        assert!(check(&f16, "k").unwrap().f16);
        let sg = OK.replace("x[g.x] = 1.0;", "x[g.x] = subgroupAdd(1.0);");
        let c = check(&sg, "k").unwrap();
        assert!(c.subgroups && c.reaches_subgroups && !c.f16);
        let unused = format!("fn helper() -> f32 {{ return subgroupAdd(1.0); }}\n{OK}");
        let c = check(&unused, "k").unwrap();
        assert!(c.subgroups && !c.reaches_subgroups);
    }

    #[test]
    fn reports_parse_and_validation_errors_with_spans() {
        let bad = OK.replace("x[g.x] = 1.0;", "x[g.x] = 1.0");
        let f = check(&bad, "k").unwrap_err();
        let (m, e) = (f.module, f.errors);
        assert!(m.is_none());
        assert!(e[0].primary.is_some());
        let bad = OK.replace("array<f32>", "array<bool>").replace("1.0", "true");
        let f = check(&bad, "k").unwrap_err();
        let (m, e) = (f.module, f.errors);
        assert!(m.is_some(), "only the validator sees this");
        let (range, _) = e[0].primary.clone().unwrap();
        assert!(bad[range].contains("var<storage"), "{e:?}");
        assert!(e[0].message.contains("HOST_SHAREABLE"), "{e:?}");
    }

    #[test]
    fn bindings_are_numbered_per_group_as_wgpu_lays_them_out() {
        let src = "@group(1) @binding(9) var<storage, read> c: array<f32>;\n\
            @group(0) @binding(4) var<storage, read_write> b: array<f32>;\n\
            @group(0) @binding(2) var<storage, read> a: array<f32>;\n\
            @group(1) @binding(3) var<uniform> u: vec4<f32>;\n\
            @compute @workgroup_size(1) fn k() { b[0] = a[0] + c[0] + u.x; }\n";
        let c = check(src, "k").unwrap();
        let map = binding_map(&c.module);
        let at = |group, binding| {
            let info = map[&naga::ResourceBinding { group, binding }];
            (info.descriptor_set, info.binding)
        };
        assert_eq!([at(0, 2), at(0, 4), at(1, 3), at(1, 9)], [(0, 0), (0, 1), (1, 0), (1, 1)]);
        let words = write_spirv(
            &c.module,
            &c.info,
            "k",
            &Default::default(),
            &VulkanTarget::build_time(&Needs { subgroups: false, f16: false, coop: false, features: Vec::new() }),
        )
        .unwrap();
        assert_eq!(words[1], 0x0001_0600, "SPIR-V 1.6 for a Vulkan 1.3 device");
        let old = VulkanTarget {
            api_version: (1, 2),
            ..VulkanTarget::build_time(&Needs { subgroups: false, f16: false, coop: false, features: Vec::new() })
        };
        assert_eq!(write_spirv(&c.module, &c.info, "k", &Default::default(), &old).unwrap()[1], 0x0001_0500);
        assert!(matches!(
            write_spirv(&c.module, &c.info, "nope", &Default::default(), &old),
            Err(SpirvError::Writer(_))
        ));
    }

    /// (opcode, GLSL.std.450 instruction for `OpExtInst`) counts of a module's instructions.
    fn opcodes(words: &[u32]) -> std::collections::BTreeMap<(u32, u32), usize> {
        let mut counts = std::collections::BTreeMap::new();
        let mut at = 5;
        while at < words.len() {
            let (count, op) = ((words[at] >> 16) as usize, words[at] & 0xffff);
            let ext = if op == 12 { words[at + 4] } else { 0 };
            *counts.entry((op, ext)).or_insert(0) += 1;
            at += count.max(1);
        }
        counts
    }

    #[test]
    fn an_unchecked_module_loses_the_index_clamps_the_loop_bound_and_the_division_guards() {
        // A workgroup array and a private array indexed by computed values, a loop whose trip
        // count naga cannot know, and an integer division and remainders.
        let src = "@group(0) @binding(0) var<storage, read_write> x: array<u32>;\n\
            var<workgroup> tile: array<u32, 64>;\n\
            @compute @workgroup_size(64) fn k(@builtin(local_invocation_index) i: u32) {\n\
              var acc = array<u32, 4>(1u, 2u, 3u, 4u);\n\
              tile[i] = x[i];\n\
              workgroupBarrier();\n\
              for (var j = 0u; j < x[0]; j++) { acc[j % 4u] += tile[(i + j) % 64u] / x[1]; }\n\
              x[i] = acc[i % 4u];\n}\n";
        let c = check(src, "k").unwrap();
        let needs = Needs { subgroups: false, f16: false, coop: false, features: Vec::new() };
        let write = |target: VulkanTarget| {
            opcodes(&write_spirv(&c.module, &c.info, "k", &Default::default(), &target).unwrap())
        };
        let (umin, function, variable, null) = ((12, 38), (54, 0), (59, 0), (46, 0));
        let count = |m: &std::collections::BTreeMap<(u32, u32), usize>, key| m.get(&key).copied().unwrap_or(0);
        let mut clamps = Vec::new();
        for robust_buffer_access2 in [true, false] {
            let device = VulkanTarget { robust_buffer_access2, ..VulkanTarget::build_time(&needs) };
            let checked = write(device);
            let unchecked = write(VulkanTarget { runtime_checks: false, ..device });
            // Index clamping (`min(i, n - 1)`), at least of the four workgroup and private
            // indices; none unchecked.
            assert!(count(&checked, umin) >= 4, "{checked:?}");
            assert_eq!(count(&unchecked, umin), 0, "{unchecked:?}");
            clamps.push(count(&checked, umin));
            // Division guards: naga's guarded `/` and `%` are helper functions.
            assert_eq!((count(&checked, function), count(&unchecked, function)), (3, 1));
            // Loop bounding: the loop's counter is a variable of its own.
            assert_eq!(count(&checked, variable), count(&unchecked, variable) + 1);
            // Zeroed workgroup memory stays: the driver zeroes `tile` (a null initializer).
            assert!(count(&checked, null) >= 1 && count(&checked, null) == count(&unchecked, null));
        }
        // Without `robustBufferAccess2` naga clamps the four buffer indices too (and an
        // unchecked module leaves them to `robustBufferAccess`).
        assert_eq!(clamps[1], clamps[0] + 4, "{clamps:?}");
    }

    #[test]
    fn subgroup_op_in_divergent_branch_is_rejected() {
        let bad = OK.replace("x[g.x] = 1.0;", "if (g.x == 0u) { x[0] = subgroupAdd(1.0); }");
        let e = check(&bad, "k").unwrap_err().errors;
        assert!(e[0].message.contains("non-uniform control flow"), "{e:?}");
        let (range, _) = e[0].primary.clone().unwrap();
        assert!(bad[range].contains("subgroupAdd"));
        // Uniform condition: fine.
        let good = OK.replace("x[g.x] = 1.0;", "if (arrayLength(&x) > 3u) { x[g.x] = subgroupAdd(1.0); }");
        check(&good, "k").unwrap();
    }
}
