//! Uniform control flow for subgroup operations, cooperative-matrix operations and barriers.
//!
//! WGSL requires subgroup operations, barriers and `workgroupUniformLoad` to run in uniform
//! control flow. naga (30) does not check this for subgroup operations, but Chrome's compiler
//! does, and on real hardware a reduction in divergent control flow gives wrong sums.
//! Cooperative-matrix loads, stores and products (`coopLoad`, `coopStore`, `coopMultiplyAdd`)
//! are subgroup-wide too; naga checks the `if`s around them but not loop bounds, so they are
//! treated like barriers here. This pass
//! follows the WGSL uniformity analysis closely enough for compute kernels:
//!
//! - uniform values: constants, `workgroup_id`, `num_workgroups`, `subgroup_size`,
//!   `num_subgroups`, loads from `uniform` and read-only `storage` buffers, `arrayLength`,
//!   `workgroupUniformLoad` results; everything else (invocation ids, `workgroup`, `private` and
//!   read-write `storage` memory, atomics, subgroup results) is non-uniform;
//! - control flow under an `if`/`switch`/loop condition that is non-uniform is non-uniform; a
//!   loop with a non-uniform `break`, `continue` or `return` is non-uniform throughout; control
//!   flow reconverges after a statement, except after a non-uniform `return`, which makes the
//!   rest of the function non-uniform;
//! - function-scope variables are non-uniform if any store to them is (flow-insensitive, so a
//!   little stricter than WGSL);
//! - a helper function that needs uniform control flow passes the need to its callers, together
//!   with the parameters whose values steer it (so `wg_reduce_sum(tid, v)` is fine to call with
//!   a non-uniform `v`);
//! - WGSL's `subgroup_uniformity` diagnostic, turned off for a function, lifts the check from
//!   its operations of subgroup scope: subgroup operations, `subgroupBarrier` and
//!   cooperative-matrix operations. Those need only the subgroup to agree, which the analysis
//!   cannot see (a branch on `subgroupAny`, say), so the author vouches for it; workgroup
//!   barriers and `workgroupUniformLoad` stay checked.

use naga::{Block, Expression, Function, Handle, Module, Span, Statement};
use std::collections::HashMap;

/// A statement that needs uniform control flow but does not have it.
#[derive(Clone, Debug, PartialEq)]
pub struct UniformityError {
    /// The offending statement or call.
    pub span: Span,
    /// Headline.
    pub message: String,
    /// What makes the control flow non-uniform, if known.
    pub cause: Option<Span>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Taint {
    /// Set when the value is non-uniform whatever the parameters: where that comes from.
    cause: Option<Span>,
    /// Parameters (of a helper function) whose non-uniformity would make the value non-uniform.
    params: u64,
}

impl Taint {
    const UNIFORM: Taint = Taint { cause: None, params: 0 };

    fn non_uniform(span: Span) -> Taint {
        Taint {
            // An unknown span still has to mark the value non-uniform.
            cause: Some(if span.is_defined() { span } else { Span::new(0, 0) }),
            params: 0,
        }
    }

    fn join(self, other: Taint) -> Taint {
        Taint { cause: self.cause.or(other.cause), params: self.params | other.params }
    }
}

#[derive(Clone, Debug, Default)]
struct Summary {
    /// Why calling this function needs uniform control flow (what, where), for operations of
    /// workgroup scope and for those of subgroup scope.
    requires: Option<(String, Span)>,
    requires_subgroup: Option<(String, Span)>,
    /// Parameters that steer the control flow reaching those operations.
    cf_params: u64,
    cf_params_subgroup: u64,
    /// How uniform the return value is.
    ret: Taint,
}

/// Which invocations an operation runs across: all of the workgroup's must reach it together,
/// or all of the subgroup's.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Scope {
    Workgroup,
    Subgroup,
}

#[derive(Clone, Copy, Default)]
struct Flow {
    ret: Option<Taint>,
    brk: Option<Taint>,
    cont: Option<Taint>,
}

impl Flow {
    fn merge(self, other: Flow) -> Flow {
        fn m(a: Option<Taint>, b: Option<Taint>) -> Option<Taint> {
            match (a, b) {
                (Some(a), Some(b)) => Some(a.join(b)),
                (a, b) => a.or(b),
            }
        }
        Flow { ret: m(self.ret, other.ret), brk: m(self.brk, other.brk), cont: m(self.cont, other.cont) }
    }
}

/// A loop's body (by address), the control flow it is entered with (cause, parameters) and
/// the locals' version.
type LoopKey = (usize, Option<Option<(usize, usize)>>, u64, usize);

struct Analyzer<'a> {
    module: &'a Module,
    func: &'a Function,
    entry: bool,
    summaries: &'a [Summary],
    names: &'a [String],
    locals: Vec<Taint>,
    /// Bumped whenever a local's taint grows: a loop's result depends on it.
    locals_version: usize,
    call_results: Vec<Option<Taint>>,
    summary: Summary,
    errors: Vec<UniformityError>,
    /// Each loop's result for (its body, the control flow it was entered with, the locals'
    /// version): a loop entered again the same way is not walked again. Without it, nested
    /// loops are walked exponentially often (each level walks its body twice to reach its
    /// fixed point).
    loops: HashMap<LoopKey, Flow>,
    /// Statements walked, for tests of the pass's cost.
    visits: usize,
    /// WGSL's `subgroup_uniformity` diagnostic is turned off (or down to a warning) for this
    /// function: `@diagnostic(off, subgroup_uniformity)` on it or a `diagnostic(…)` directive.
    subgroup_lint_off: bool,
}

/// Whether the diagnostic filters that apply at `leaf` turn `subgroup_uniformity` below an
/// error (the nearest filter naming the rule decides).
fn subgroup_lint_off(module: &Module, leaf: Option<Handle<naga::diagnostic_filter::DiagnosticFilterNode>>) -> bool {
    use naga::diagnostic_filter::{FilterableTriggeringRule, Severity};
    let mut node = leaf.or(module.diagnostic_filter_leaf);
    while let Some(h) = node {
        let n = &module.diagnostic_filters[h];
        if let FilterableTriggeringRule::Unknown(name) = &n.inner.triggering_rule
            && &**name == "subgroup_uniformity"
        {
            return n.inner.new_severity != Severity::Error;
        }
        node = n.parent;
    }
    false
}

/// Checks every entry point of a validated module. Errors in helper functions are reported
/// once, at the helper.
pub fn check(module: &Module) -> Vec<UniformityError> {
    check_counting(module).0
}

/// [`check`], also returning how many statements the pass walked (its cost, for tests: it
/// grows about linearly with the code, nested loops included).
pub fn check_counting(module: &Module) -> (Vec<UniformityError>, usize) {
    let mut visits = 0;
    let mut summaries: Vec<Summary> = Vec::with_capacity(module.functions.len());
    let mut names: Vec<String> = Vec::new();
    let mut errors = Vec::new();
    for (_, func) in module.functions.iter() {
        let (summary, errs, n) = analyze(module, func, false, &summaries, &names);
        summaries.push(summary);
        names.push(func.name.clone().unwrap_or_else(|| "<unnamed>".into()));
        errors.extend(errs);
        visits += n;
    }
    for ep in &module.entry_points {
        let (_, errs, n) = analyze(module, &ep.function, true, &summaries, &names);
        errors.extend(errs);
        visits += n;
    }
    (errors, visits)
}

fn analyze(
    module: &Module,
    func: &Function,
    entry: bool,
    summaries: &[Summary],
    names: &[String],
) -> (Summary, Vec<UniformityError>, usize) {
    let mut a = Analyzer {
        module,
        func,
        entry,
        summaries,
        names,
        locals: vec![Taint::UNIFORM; func.local_variables.len()],
        locals_version: 0,
        call_results: vec![None; func.expressions.len()],
        summary: Summary::default(),
        errors: Vec::new(),
        loops: HashMap::new(),
        visits: 0,
        subgroup_lint_off: subgroup_lint_off(module, func.diagnostic_filter_leaf),
    };
    // Local variable taints only grow; iterate to a fixed point.
    for _ in 0..64 {
        let before = a.locals.clone();
        a.summary = Summary::default();
        a.errors.clear();
        a.loops.clear();
        // Initializers.
        for (h, local) in func.local_variables.iter() {
            if let Some(init) = local.init {
                let t = a.expr(init);
                a.join_local(h.index(), t);
            }
        }
        a.block(&func.body, Taint::UNIFORM);
        if a.locals == before {
            break;
        }
    }
    // Loops are walked more than once: report each place once.
    let mut errors: Vec<UniformityError> = Vec::new();
    for e in a.errors {
        if !errors.iter().any(|x| x.span == e.span) {
            errors.push(e);
        }
    }
    (a.summary, errors, a.visits)
}

impl Analyzer<'_> {
    fn join_local(&mut self, l: usize, t: Taint) {
        let joined = self.locals[l].join(t);
        if joined != self.locals[l] {
            self.locals[l] = joined;
            self.locals_version += 1;
        }
    }

    fn span(&self, e: Handle<Expression>) -> Span {
        self.func.expressions.get_span(e)
    }

    fn builtin_is_uniform(b: &naga::Binding) -> bool {
        use naga::BuiltIn as B;
        matches!(b, naga::Binding::BuiltIn(B::WorkGroupId | B::NumWorkGroups | B::SubgroupSize | B::NumSubgroups))
    }

    fn expr(&mut self, e: Handle<Expression>) -> Taint {
        use Expression as E;
        let span = self.span(e);
        match self.func.expressions[e] {
            E::Literal(_) | E::Constant(_) | E::Override(_) | E::ZeroValue(_) => Taint::UNIFORM,
            E::Compose { ref components, .. } => {
                let mut t = Taint::UNIFORM;
                for &c in components {
                    t = t.join(self.expr(c));
                }
                t
            }
            E::Access { base, index } => self.expr(base).join(self.expr(index)),
            E::AccessIndex { base, index } => {
                // A member of a struct-typed entry-point argument has its own binding.
                if let E::FunctionArgument(i) = self.func.expressions[base]
                    && self.entry
                    && let naga::TypeInner::Struct { ref members, .. } =
                        self.module.types[self.func.arguments[i as usize].ty].inner
                {
                    let uniform = members
                        .get(index as usize)
                        .and_then(|m| m.binding.as_ref())
                        .is_some_and(Self::builtin_is_uniform);
                    return if uniform { Taint::UNIFORM } else { Taint::non_uniform(span) };
                }
                self.expr(base)
            }
            E::Splat { value, .. } => self.expr(value),
            E::Swizzle { vector, .. } => self.expr(vector),
            E::FunctionArgument(i) => {
                let arg = &self.func.arguments[i as usize];
                if self.entry {
                    if arg.binding.as_ref().is_some_and(Self::builtin_is_uniform) {
                        Taint::UNIFORM
                    } else {
                        Taint::non_uniform(span)
                    }
                } else if i < 64 {
                    Taint { cause: None, params: 1 << i }
                } else {
                    Taint::non_uniform(span)
                }
            }
            E::GlobalVariable(g) => {
                use naga::AddressSpace as A;
                match self.module.global_variables[g].space {
                    A::Uniform | A::Handle | A::Immediate => Taint::UNIFORM,
                    A::Storage { access } if !access.contains(naga::StorageAccess::STORE) => Taint::UNIFORM,
                    _ => Taint::non_uniform(span),
                }
            }
            E::LocalVariable(l) => self.locals[l.index()],
            E::Load { pointer } => self.expr(pointer),
            E::Unary { expr, .. } => self.expr(expr),
            E::Binary { left, right, .. } => self.expr(left).join(self.expr(right)),
            E::Select { condition, accept, reject } => {
                self.expr(condition).join(self.expr(accept)).join(self.expr(reject))
            }
            E::Relational { argument, .. } => self.expr(argument),
            E::Math { arg, arg1, arg2, arg3, .. } => {
                let mut t = self.expr(arg);
                for a in [arg1, arg2, arg3].into_iter().flatten() {
                    t = t.join(self.expr(a));
                }
                t
            }
            E::As { expr, .. } => self.expr(expr),
            E::CallResult(_) => self.call_results[e.index()].unwrap_or(Taint::non_uniform(span)),
            E::WorkGroupUniformLoadResult { .. } => Taint::UNIFORM,
            E::ArrayLength(_) => Taint::UNIFORM,
            // Atomics, subgroup results, images, ray queries and cooperative matrices.
            _ => Taint::non_uniform(span),
        }
    }

    /// A branch condition's taint, blaming the condition itself (what a reader changes).
    fn condition(&mut self, e: Handle<Expression>) -> Taint {
        let t = self.expr(e);
        let span = self.span(e);
        Taint { cause: t.cause.map(|c| if span.is_defined() { span } else { c }), params: t.params }
    }

    /// The local variable a pointer expression is rooted at, with the taint of its indices.
    fn pointer_root(&mut self, mut p: Handle<Expression>) -> (Option<usize>, Taint) {
        let mut t = Taint::UNIFORM;
        loop {
            match self.func.expressions[p] {
                Expression::Access { base, index } => {
                    t = t.join(self.expr(index));
                    p = base;
                }
                Expression::AccessIndex { base, .. } => p = base,
                Expression::LocalVariable(l) => return (Some(l.index()), t),
                _ => return (None, t),
            }
        }
    }

    fn require(&mut self, cf: Taint, what: String, span: Span, scope: Scope) {
        if self.subgroup_lint_off && scope == Scope::Subgroup {
            return;
        }
        if let Some(cause) = cf.cause {
            self.errors.push(UniformityError {
                span,
                message: format!("{what} in non-uniform control flow"),
                cause: cause.is_defined().then_some(cause),
            });
            return;
        }
        if !self.entry {
            let (params, requires) = match scope {
                Scope::Workgroup => (&mut self.summary.cf_params, &mut self.summary.requires),
                Scope::Subgroup => (&mut self.summary.cf_params_subgroup, &mut self.summary.requires_subgroup),
            };
            *params |= cf.params;
            if requires.is_none() {
                *requires = Some((what, span));
            }
        }
    }

    fn block(&mut self, block: &Block, cf_in: Taint) -> Flow {
        let mut cf = cf_in;
        let mut flow = Flow::default();
        for (stmt, &span) in block.span_iter() {
            let f = self.statement(stmt, span, cf);
            // After a construct that returned (or broke out) non-uniformly, the rest of this
            // block runs only for some invocations.
            for t in [f.ret, f.brk, f.cont].into_iter().flatten() {
                cf = cf.join(t);
            }
            flow = flow.merge(f);
        }
        flow
    }

    fn statement(&mut self, stmt: &Statement, span: Span, cf: Taint) -> Flow {
        use Statement as S;
        self.visits += 1;
        match *stmt {
            S::Emit(ref range) => {
                // Cooperative-matrix loads and products run across the subgroup, like
                // subgroup operations (naga checks `if` conditions for them, not loops).
                for e in range.clone() {
                    if matches!(
                        self.func.expressions[e],
                        Expression::CooperativeLoad { .. } | Expression::CooperativeMultiplyAdd { .. }
                    ) {
                        let at = self.span(e);
                        self.require(
                            cf,
                            "cooperative-matrix operation".into(),
                            if at.is_defined() { at } else { span },
                            Scope::Subgroup,
                        );
                    }
                }
                Flow::default()
            }
            S::Block(ref b) => self.block(b, cf),
            S::If { condition, ref accept, ref reject } => {
                let inner = cf.join(self.condition(condition));
                let a = self.block(accept, inner);
                let r = self.block(reject, inner);
                a.merge(r)
            }
            S::Switch { selector, ref cases } => {
                let inner = cf.join(self.condition(selector));
                let mut flow = Flow::default();
                for case in cases {
                    flow = flow.merge(self.block(&case.body, inner));
                }
                // `break` ends the switch; `continue` and `return` leave it.
                Flow { brk: None, ..flow }
            }
            S::Loop { ref body, ref continuing, break_if } => {
                let cause = cf.cause.map(|c| c.to_range().map(|r| (r.start, r.end)));
                let key = (body as *const Block as usize, cause, cf.params, self.locals_version);
                if let Some(&flow) = self.loops.get(&key) {
                    return flow;
                }
                let mut loop_taint = Taint::UNIFORM;
                let mut result = Flow::default();
                for _ in 0..16 {
                    let inner = cf.join(loop_taint);
                    let b = self.block(body, inner);
                    let c = self.block(continuing, inner);
                    let mut next = loop_taint;
                    for t in [b.brk, b.cont, b.ret, c.brk, c.cont].into_iter().flatten() {
                        next = next.join(t);
                    }
                    if let Some(e) = break_if {
                        next = next.join(inner.join(self.condition(e)));
                    }
                    result = Flow { ret: b.ret, brk: None, cont: None };
                    if next == loop_taint {
                        break;
                    }
                    loop_taint = next;
                }
                self.loops.insert(key, result);
                result
            }
            S::Break => Flow { brk: Some(cf), ..Flow::default() },
            S::Continue => Flow { cont: Some(cf), ..Flow::default() },
            S::Return { value } => {
                let mut t = cf;
                if let Some(v) = value {
                    t = t.join(self.expr(v));
                }
                self.summary.ret = self.summary.ret.join(t);
                Flow { ret: Some(cf), ..Flow::default() }
            }
            S::Kill => Flow { ret: Some(cf), ..Flow::default() },
            S::ControlBarrier(flags) | S::MemoryBarrier(flags) => {
                if flags == naga::Barrier::SUB_GROUP {
                    self.require(cf, "subgroup barrier".into(), span, Scope::Subgroup);
                } else {
                    self.require(cf, "barrier".into(), span, Scope::Workgroup);
                }
                Flow::default()
            }
            S::WorkGroupUniformLoad { .. } => {
                self.require(cf, "`workgroupUniformLoad`".into(), span, Scope::Workgroup);
                Flow::default()
            }
            S::SubgroupBallot { .. } | S::SubgroupGather { .. } | S::SubgroupCollectiveOperation { .. } => {
                self.require(cf, "subgroup operation".into(), span, Scope::Subgroup);
                Flow::default()
            }
            S::CooperativeStore { .. } => {
                self.require(cf, "cooperative-matrix operation".into(), span, Scope::Subgroup);
                Flow::default()
            }
            S::Store { pointer, value } => {
                let (root, index_taint) = self.pointer_root(pointer);
                if let Some(l) = root {
                    let t = self.expr(value).join(index_taint).join(cf);
                    self.join_local(l, t);
                }
                Flow::default()
            }
            S::Atomic { .. } => Flow::default(),
            S::Call { function, ref arguments, result } => {
                let callee = self.summaries[function.index()].clone();
                let name = self.names[function.index()].clone();
                let mut arg_taints = Vec::with_capacity(arguments.len());
                for &arg in arguments {
                    arg_taints.push(self.expr(arg));
                    // The callee may write through a pointer argument.
                    if let (Some(l), _) = self.pointer_root(arg) {
                        self.join_local(l, Taint::non_uniform(span));
                    }
                }
                let pick = |mask: u64, taints: &[Taint]| {
                    let mut t = Taint::UNIFORM;
                    for (i, a) in taints.iter().enumerate() {
                        if i < 64 && mask & (1 << i) != 0 {
                            t = t.join(*a);
                        }
                    }
                    t
                };
                if let Some((what, _)) = &callee.requires {
                    let eff = cf.join(pick(callee.cf_params, &arg_taints));
                    self.require(eff, format!("call to `{name}` (which contains a {what})"), span, Scope::Workgroup);
                }
                if let Some((what, _)) = &callee.requires_subgroup {
                    let eff = cf.join(pick(callee.cf_params_subgroup, &arg_taints));
                    self.require(eff, format!("call to `{name}` (which contains a {what})"), span, Scope::Subgroup);
                }
                if let Some(r) = result {
                    let t = Taint { cause: callee.ret.cause.map(|_| span), params: 0 }
                        .join(pick(callee.ret.params, &arg_taints))
                        .join(cf);
                    self.call_results[r.index()] = Some(t);
                }
                Flow::default()
            }
            _ => Flow::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    const DECLS: &str = "@group(0) @binding(0) var<storage, read_write> x: array<f32>;\n\
             @group(0) @binding(1) var<uniform> n: u32;\n\
             var<workgroup> w: u32;\n";

    fn errors(body: &str) -> Vec<String> {
        errors_raw(&format!("{DECLS}{body}"))
    }

    /// `src` with the declarations after its first line (which may be a directive).
    fn errors_raw(src: &str) -> Vec<String> {
        let src = if src.starts_with("diagnostic") {
            let (first, rest) = src.split_once('\n').unwrap();
            format!("{first}\n{DECLS}{rest}")
        } else if src.starts_with(DECLS) {
            src.to_string()
        } else {
            format!("{DECLS}{src}")
        };
        let m = naga::front::wgsl::parse_str(&src).unwrap_or_else(|e| panic!("{}", e.emit_to_string(&src)));
        super::check(&m).into_iter().map(|e| e.message).collect()
    }

    fn entry(stmts: &str) -> String {
        format!(
            "@compute @workgroup_size(64) fn k(@builtin(local_invocation_index) t: u32, \
             @builtin(workgroup_id) wid: vec3<u32>) {{ {stmts} }}"
        )
    }

    #[test]
    fn loops_reconverge() {
        // A loop bounded by a non-uniform value, then a subgroup op after it: fine.
        assert!(
            errors(&entry("var a = 0.0; for (var i = t; i < 64u; i += 8u) { a += x[i]; } x[t] = subgroupAdd(a);"))
                .is_empty()
        );
        // Inside it: not fine.
        assert_eq!(errors(&entry("for (var i = t; i < 64u; i += 8u) { x[i] = subgroupAdd(1.0); }")).len(), 1);
        // A uniform loop with a barrier inside: fine.
        assert!(errors(&entry("for (var s = 32u; s > 0u; s >>= 1u) { workgroupBarrier(); }")).is_empty());
        // A non-uniform break in a loop with a barrier: not fine.
        assert_eq!(errors(&entry("loop { workgroupBarrier(); if (t == 3u) { break; } }")).len(), 1);
    }

    #[test]
    fn returns() {
        // Uniform early return (workgroup id against a uniform): fine.
        assert!(errors(&entry("if (wid.x >= n) { return; } x[t] = subgroupAdd(1.0);")).is_empty());
        // Non-uniform early return poisons the rest of the function.
        assert_eq!(errors(&entry("if (t >= n) { return; } x[t] = subgroupAdd(1.0);")).len(), 1);
    }

    #[test]
    fn helpers_pass_their_needs_to_callers() {
        let helper = "fn h(v: f32) -> f32 { return subgroupAdd(v); }\n\
                      fn g(c: bool) -> f32 { if (c) { return subgroupAdd(1.0); } return 0.0; }\n";
        // A non-uniform argument that is only a value: fine.
        assert!(errors(&format!("{helper}{}", entry("x[t] = h(x[t]);"))).is_empty());
        // Called under a non-uniform branch: not fine.
        assert_eq!(errors(&format!("{helper}{}", entry("if (x[t] > 0.0) { x[t] = h(1.0); }"))).len(), 1);
        // A parameter that steers the helper's control flow: uniform argument fine …
        assert!(errors(&format!("{helper}{}", entry("x[t] = g(n > 3u);"))).is_empty());
        // … non-uniform argument not.
        assert_eq!(errors(&format!("{helper}{}", entry("x[t] = g(t > 3u);"))).len(), 1);
    }

    #[test]
    fn values_through_variables_and_memory() {
        // A variable that may hold a non-uniform value steers a branch.
        assert_eq!(
            errors(&entry("var c = 0u; if (x[0] > 1.0) { c = 1u; } if (c == 1u) { workgroupBarrier(); }")).len(),
            1
        );
        // Workgroup memory is non-uniform, unless loaded with workgroupUniformLoad.
        assert_eq!(errors(&entry("if (w > 0u) { workgroupBarrier(); }")).len(), 1);
        assert!(errors(&entry("if (workgroupUniformLoad(&w) > 0u) { workgroupBarrier(); }")).is_empty());
        // Uniform buffers and arrayLength are uniform.
        assert!(errors(&entry("if (arrayLength(&x) > n) { workgroupBarrier(); }")).is_empty());
        // Subgroup results are not workgroup-uniform.
        assert_eq!(errors(&entry("if (subgroupAdd(1u) == 32u) { workgroupBarrier(); }")).len(), 1);
    }

    #[test]
    fn the_subgroup_uniformity_diagnostic_can_be_turned_off() {
        let helper = "fn h(v: f32) -> f32 { return subgroupAdd(v); }\n";
        let diverging = entry("if (x[t] > 0.0) { x[t] = subgroupAdd(1.0); }");
        assert_eq!(errors(&diverging).len(), 1);
        // On the function, …
        let off = diverging.replace("@compute", "@diagnostic(off, subgroup_uniformity) @compute");
        assert!(errors(&off).is_empty(), "{:?}", errors(&off));
        let warn = diverging.replace("@compute", "@diagnostic(warning, subgroup_uniformity) @compute");
        assert!(errors(&warn).is_empty());
        // … on a helper (its callers need not be uniform either), …
        let off_helper =
            format!("@diagnostic(off, subgroup_uniformity) {helper}{}", entry("if (x[t] > 0.0) { x[t] = h(1.0); }"));
        assert!(errors(&off_helper).is_empty(), "{:?}", errors(&off_helper));
        // … for the module; barriers stay errors (WGSL cannot turn that off).
        let src = format!(
            "diagnostic(off, subgroup_uniformity);\n{}",
            entry("if (x[t] > 0.0) { x[t] = subgroupAdd(1.0); workgroupBarrier(); }")
        );
        assert_eq!(errors_raw(&src), vec!["barrier in non-uniform control flow".to_string()]);
    }

    #[test]
    fn turning_the_subgroup_diagnostic_off_lifts_subgroup_barriers_but_not_workgroup_ones() {
        // A branch every lane of a subgroup takes together (the analysis sees a subgroup result).
        let helper = "fn h() { subgroupBarrier(); }\n";
        let body = "if (subgroupAny(x[t] > 0.0)) { subgroupBarrier(); h(); }";
        assert_eq!(
            errors_raw(&format!("{helper}{}", entry(body))),
            vec![
                "subgroup barrier in non-uniform control flow".to_string(),
                "call to `h` (which contains a subgroup barrier) in non-uniform control flow".to_string(),
            ]
        );
        let off = entry(body).replace("@compute", "@diagnostic(off, subgroup_uniformity) @compute");
        assert!(errors_raw(&format!("{helper}{off}")).is_empty());
        // A helper with both kinds passes the workgroup barrier's need on to a caller that has
        // the diagnostic off.
        let both = "fn g() { subgroupBarrier(); workgroupBarrier(); }\n";
        let off = entry("if (subgroupAny(x[t] > 0.0)) { g(); }")
            .replace("@compute", "@diagnostic(off, subgroup_uniformity) @compute");
        assert_eq!(
            errors_raw(&format!("{both}{off}")),
            vec!["call to `g` (which contains a barrier) in non-uniform control flow".to_string()]
        );
    }

    /// `depth` loops nested, each bounded by the invocation index, a barrier inside.
    fn nested(depth: usize) -> (Vec<String>, usize) {
        let mut body = String::from("workgroupBarrier();");
        for d in (0..depth).rev() {
            body = format!("for (var i{d} = t; i{d} < 4u; i{d}++) {{ {body} }}");
        }
        let src = format!("@compute @workgroup_size(64) fn k(@builtin(local_invocation_index) t: u32) {{ {body} }}");
        let m = naga::front::wgsl::parse_str(&src).unwrap();
        let (errors, visits) = super::check_counting(&m);
        (errors.into_iter().map(|e| e.message).collect(), visits)
    }

    #[test]
    fn nested_loops_cost_about_linear_time() {
        // Counted, not timed: statements walked by the pass.
        let (e12, v12) = nested(12);
        let (e24, v24) = nested(24);
        assert_eq!(e12, vec!["barrier in non-uniform control flow".to_string()]);
        assert_eq!(e24, e12);
        // Twice the nesting: about twice the work (each level: a bounded number of walks of
        // the levels below, not a number that doubles per level).
        assert!(v24 <= 3 * v12, "12 loops: {v12} visits, 24 loops: {v24}");
        let (_, v6) = nested(6);
        assert!(v12 <= 3 * v6, "6 loops: {v6} visits, 12 loops: {v12}");
    }
}
