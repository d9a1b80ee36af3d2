//! Stage 4: naga parses and validates each assembled kernel; errors come back as offsets into
//! the assembled text, to be mapped to the original files by the caller.

use crate::uniformity;
use naga::valid::{Capabilities, ModuleInfo, ValidationFlags, Validator};
use std::ops::Range;

/// The capabilities kernels may use: those the runtime asks the device for.
pub const CAPABILITIES: Capabilities = Capabilities::SUBGROUP.union(Capabilities::SHADER_FLOAT16);

/// The directive every kernel is first parsed with; it is left out of the emitted source of
/// kernels that turn out not to use f16 (declaring it would make them need `SHADER_F16`).
pub const F16_PREFIX: &str = "enable f16;\n";

/// A kernel that parsed and validated.
#[derive(Debug)]
pub struct Checked {
    /// The IR.
    pub module: naga::Module,
    /// naga's analysis of it.
    pub info: ModuleInfo,
    /// Whether it uses f16 (needs `SHADER_F16` and `enable f16;`).
    pub f16: bool,
    /// Whether its text uses subgroup operations or built-ins (needs `SUBGROUP`).
    pub subgroups: bool,
    /// Whether the entry point actually reaches them (a kernel may include subgroup helpers
    /// from the shared preamble without calling them).
    pub reaches_subgroups: bool,
}

/// Why a kernel did not check: the errors, and the module when it parsed.
#[derive(Debug)]
pub struct Failure {
    /// The parsed module (absent on a parse error).
    pub module: Option<Box<naga::Module>>,
    /// What is wrong.
    pub errors: Vec<RawError>,
}

impl Failure {
    fn new(module: Option<naga::Module>, errors: Vec<RawError>) -> Failure {
        Failure { module: module.map(Box::new), errors }
    }
}

/// An error with spans in the assembled text.
#[derive(Clone, Debug, PartialEq)]
pub struct RawError {
    /// The primary span and its label.
    pub primary: Option<(Range<usize>, String)>,
    /// Headline.
    pub message: String,
    /// Notes, possibly with spans of their own.
    pub notes: Vec<(Option<Range<usize>>, String)>,
}

/// Parses and validates a kernel's source (without any `enable` line). If it only parses with
/// `enable f16;` in front, it uses f16 and the directive becomes part of its source. Spans in
/// errors are offsets into `body`. On a parse error no module exists; on a validation error the
/// parsed module is returned too (so the kernel's interface can still be emitted).
pub fn check(body: &str) -> Result<Checked, Failure> {
    // A panic inside naga must not become "proc macro panicked" without a location.
    match std::panic::catch_unwind(|| check_inner(body)) {
        Ok(r) => r,
        Err(panic) => {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(Failure::new(
                None,
                vec![RawError {
                    primary: None,
                    message: format!(
                        "naga panicked on this kernel ({what}); please report it with the kernel's source"
                    ),
                    notes: Vec::new(),
                }],
            ))
        }
    }
}

fn check_inner(body: &str) -> Result<Checked, Failure> {
    let (module, f16) = match naga::front::wgsl::parse_str(body) {
        Ok(m) => (m, false),
        Err(plain) => {
            let with = format!("{F16_PREFIX}{body}");
            match naga::front::wgsl::parse_str(&with) {
                Ok(m) => (m, true),
                // Report what is wrong with the text as it will run: with the directive, so
                // that f16 code is not blamed for a directive the user cannot write.
                Err(e) => {
                    let err = if plain.message().contains("f16") { parse_error(&e) } else { parse_error(&plain) };
                    let shift = if plain.message().contains("f16") { F16_PREFIX.len() } else { 0 };
                    return Err(Failure::new(None, vec![err.shifted(shift)]));
                }
            }
        }
    };
    let shift = if f16 { F16_PREFIX.len() } else { 0 };
    let info = match validator(CAPABILITIES).validate(&module) {
        Ok(info) => info,
        Err(e) => return Err(Failure::new(Some(module), vec![validation_error(&e).shifted(shift)])),
    };
    let uniformity = uniformity::check(&module);
    if !uniformity.is_empty() {
        let errors = uniformity
            .into_iter()
            .map(|u| {
                RawError {
                    primary: u.span.to_range().map(|r| (r, "needs every invocation of the workgroup here".to_string())),
                    message: u.message,
                    notes: vec![(
                        u.cause.and_then(|c| c.to_range()),
                        "control flow depends on this non-uniform value (WGSL's uniformity rules; \
                         Chrome rejects such shaders and GPUs give wrong results)"
                            .to_string(),
                    )],
                }
                .shifted(shift)
            })
            .collect();
        return Err(Failure::new(Some(module), errors));
    }
    let subgroups = validator(CAPABILITIES - Capabilities::SUBGROUP).validate(&module).is_err();
    let reaches_subgroups = subgroups && {
        let mut used = module.clone();
        naga::compact::compact(&mut used, naga::compact::KeepUnused::No);
        validator(CAPABILITIES - Capabilities::SUBGROUP).validate(&used).is_err()
    };
    Ok(Checked { module, info, f16, subgroups, reaches_subgroups })
}

impl RawError {
    /// Moves spans back by `by` bytes (spans inside the first `by` bytes are dropped).
    fn shifted(mut self, by: usize) -> RawError {
        let shift = |r: Range<usize>| (r.start >= by).then(|| r.start - by..r.end.saturating_sub(by));
        self.primary = self.primary.and_then(|(r, l)| shift(r).map(|r| (r, l)));
        for (r, _) in &mut self.notes {
            *r = r.clone().and_then(shift);
        }
        self
    }
}

fn validator(caps: Capabilities) -> Validator {
    Validator::new(ValidationFlags::all(), caps)
}

fn parse_error(e: &naga::front::wgsl::ParseError) -> RawError {
    let mut labels = e.labels();
    let primary = labels.next().and_then(|(span, label)| span.to_range().map(|r| (r, label.to_string())));
    let mut notes: Vec<(Option<Range<usize>>, String)> =
        labels.map(|(span, label)| (span.to_range(), label.to_string())).collect();
    notes.extend(e.notes().map(|n| (None, n.to_string())));
    RawError { primary, message: e.message().to_string(), notes }
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
        let c = check(OK).unwrap();
        assert!(!c.f16 && !c.subgroups);
        let f16 = OK.replace("x[g.x] = 1.0;", "x[g.x] = f32(f16(1.0));");
        assert!(check(&f16).unwrap().f16);
        let sg = OK.replace("x[g.x] = 1.0;", "x[g.x] = subgroupAdd(1.0);");
        let c = check(&sg).unwrap();
        assert!(c.subgroups && c.reaches_subgroups && !c.f16);
        let unused = format!("fn helper() -> f32 {{ return subgroupAdd(1.0); }}\n{OK}");
        let c = check(&unused).unwrap();
        assert!(c.subgroups && !c.reaches_subgroups);
    }

    #[test]
    fn reports_parse_and_validation_errors_with_spans() {
        let bad = OK.replace("x[g.x] = 1.0;", "x[g.x] = 1.0");
        let f = check(&bad).unwrap_err();
        let (m, e) = (f.module, f.errors);
        assert!(m.is_none());
        assert!(e[0].primary.is_some());
        let bad = OK.replace("array<f32>", "array<bool>").replace("1.0", "true");
        let f = check(&bad).unwrap_err();
        let (m, e) = (f.module, f.errors);
        assert!(m.is_some(), "only the validator sees this");
        let (range, _) = e[0].primary.clone().unwrap();
        assert!(bad[range].contains("var<storage"), "{e:?}");
        assert!(e[0].message.contains("HOST_SHAREABLE"), "{e:?}");
    }

    #[test]
    fn subgroup_op_in_divergent_branch_is_rejected() {
        let bad = OK.replace("x[g.x] = 1.0;", "if (g.x == 0u) { x[0] = subgroupAdd(1.0); }");
        let e = check(&bad).unwrap_err().errors;
        assert!(e[0].message.contains("non-uniform control flow"), "{e:?}");
        let (range, _) = e[0].primary.clone().unwrap();
        assert!(bad[range].contains("subgroupAdd"));
        // Uniform condition: fine.
        let good = OK.replace("x[g.x] = 1.0;", "if (arrayLength(&x) > 3u) { x[g.x] = subgroupAdd(1.0); }");
        check(&good).unwrap();
    }
}
