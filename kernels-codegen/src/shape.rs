//! Stage 7: the shape annotations as typed values. `// @requires len(x) >= p.m * p.k` becomes
//! a [`Requirement`] checked before dispatch, `// @grid threads(p.n)` the [`Grid`] the
//! function dispatches. The expressions are a small integer language over a kernel's
//! arguments, checked here against its interface, so that emitting code from them cannot
//! fail:
//!
//! - `len(x)`: the number of elements of storage binding `x` ([`Expr::Len`]);
//! - `p.n`, `p.dims.x`: an integer field (or vector component) of uniform `p`, or `n` for a
//!   uniform that is a plain integer ([`Expr::Uniform`]);
//! - integer literals and module-scope integer constants, folded to their value ([`Expr::Int`]);
//! - `+ - * / %`, `ceil_div(a, b)`, `min(a, b)`, `max(a, b)`, parentheses ([`Expr::Binary`]);
//! - `@requires` is one comparison (`>=`, `>`, `<=`, `<`, `==`, `!=`);
//! - `@grid` is `threads(n)` (1-D over n invocations), `workgroups(n)` (1-D over n
//!   workgroups) — both with the 2-D fallback past the per-dimension limit — or
//!   `workgroups(x, y)` / `workgroups(x, y, z)` (an explicit grid, checked against the limits).
//!
//! `// @accumulates y[, z]` says that the kernel adds into those read-write storage bindings
//! (`+=`) rather than updating them in place by another rule: a fact for hosts (the web
//! export's `access`), checked against naga's analysis ([`accumulates`]).
//!
//! `// @unchecked`, alone on its line, says that the kernel's own index arithmetic keeps every
//! access in range once its `@requires` hold, so that it runs without wgpu's runtime checks
//! ([`Shape::unchecked`] says exactly which).
//!
//! **Semantics** (the generated Rust, `kernels_runtime::shape`, and any other evaluator — a
//! JavaScript host with `BigInt` — must agree): values are `i128`; every leaf fits (u32, i32,
//! lengths); `+ - *` fail on overflow; `/` and `%` truncate toward zero (Rust's and `BigInt`'s
//! `/` and `%`) and fail on a zero divisor; `ceil_div(a, b)` is ⌈a / b⌉ and fails unless
//! `a >= 0` and `b > 0`; `min`/`max` as usual. A failure anywhere makes the whole expression
//! fail: a `@requires` with a failing side is not met, a `@grid` with a failing size is an
//! error. A grid size must be non-negative (and fit in `u32` per explicit dimension).
//! [`Expr::eval`] is the reference implementation.

use crate::reflect::{Access, HostType, Interface};
use crate::source::Location;
use syn::ext::IdentExt;
use syn::{BinOp, Lit};

/// An integer expression of a shape annotation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Expr {
    /// A literal or a module-scope constant, by value.
    Int(i128),
    /// `len(binding)`: elements in a storage binding.
    Len {
        /// The binding's WGSL name.
        binding: String,
    },
    /// An integer read from a uniform: the uniform itself (`path` empty) or a field path.
    Uniform {
        /// The uniform binding's WGSL name.
        binding: String,
        /// Fields and vector components from the uniform's value down to an integer.
        path: Vec<Step>,
    },
    /// An operation on two integers.
    Binary {
        /// Which.
        op: Op,
        /// The first operand.
        left: Box<Expr>,
        /// The second operand.
        right: Box<Expr>,
    },
}

/// One step from a uniform's value to an integer inside it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// A struct field, by its WGSL name.
    Field(String),
    /// A vector component (`x`/`r` = 0, `y`/`g` = 1, `z`/`b` = 2, `w`/`a` = 3).
    Component(u32),
}

/// A binary operation (see the module docs for the exact semantics).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// `a + b`
    Add,
    /// `a - b`
    Sub,
    /// `a * b`
    Mul,
    /// `a / b`, truncated toward zero
    Div,
    /// `a % b`, with the sign of `a`
    Rem,
    /// `ceil_div(a, b)`: ⌈a / b⌉ for `a >= 0`, `b > 0`
    CeilDiv,
    /// `min(a, b)`
    Min,
    /// `max(a, b)`
    Max,
}

impl Op {
    /// The name of the `kernels_runtime::shape` function that computes it.
    pub fn runtime_name(self) -> &'static str {
        match self {
            Op::Add => "add",
            Op::Sub => "sub",
            Op::Mul => "mul",
            Op::Div => "div",
            Op::Rem => "rem",
            Op::CeilDiv => "ceil_div",
            Op::Min => "min",
            Op::Max => "max",
        }
    }

    /// Applies the operation; `None` is a failure (overflow, division by zero, a negative
    /// `ceil_div` operand).
    pub fn apply(self, a: i128, b: i128) -> Option<i128> {
        match self {
            Op::Add => a.checked_add(b),
            Op::Sub => a.checked_sub(b),
            Op::Mul => a.checked_mul(b),
            Op::Div => a.checked_div(b),
            Op::Rem => a.checked_rem(b),
            Op::CeilDiv => (a >= 0 && b > 0).then(|| a / b + i128::from(a % b != 0)),
            Op::Min => Some(a.min(b)),
            Op::Max => Some(a.max(b)),
        }
    }
}

/// The comparison of a `@requires`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cmp {
    /// `>=`
    Ge,
    /// `>`
    Gt,
    /// `<=`
    Le,
    /// `<`
    Lt,
    /// `==`
    Eq,
    /// `!=`
    Ne,
}

impl Cmp {
    /// The name of the `kernels_runtime::shape` function that computes it.
    pub fn runtime_name(self) -> &'static str {
        match self {
            Cmp::Ge => "ge",
            Cmp::Gt => "gt",
            Cmp::Le => "le",
            Cmp::Lt => "lt",
            Cmp::Eq => "eq",
            Cmp::Ne => "ne",
        }
    }

    /// Whether `a` compares to `b` this way.
    pub fn holds(self, a: i128, b: i128) -> bool {
        match self {
            Cmp::Ge => a >= b,
            Cmp::Gt => a > b,
            Cmp::Le => a <= b,
            Cmp::Lt => a < b,
            Cmp::Eq => a == b,
            Cmp::Ne => a != b,
        }
    }
}

impl Expr {
    /// Evaluates the expression; `len` and `uniform` give the leaves' values. `None` is a
    /// failure.
    pub fn eval(
        &self,
        len: &dyn Fn(&str) -> Option<i128>,
        uniform: &dyn Fn(&str, &[Step]) -> Option<i128>,
    ) -> Option<i128> {
        match self {
            Expr::Int(v) => Some(*v),
            Expr::Len { binding } => len(binding),
            Expr::Uniform { binding, path } => uniform(binding, path),
            Expr::Binary { op, left, right } => op.apply(left.eval(len, uniform)?, right.eval(len, uniform)?),
        }
    }
}

/// A checked `@requires`: `left cmp right`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Requirement {
    /// The left side.
    pub left: Expr,
    /// The comparison.
    pub cmp: Cmp,
    /// The right side.
    pub right: Expr,
    /// The left side as written (tidied), for messages.
    pub left_text: String,
    /// The right side as written (tidied), for messages.
    pub right_text: String,
}

/// A checked `@grid`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Grid {
    /// `threads(n)`: ⌈n / workgroup size⌉ workgroups, 1-D with the 2-D fallback.
    Threads(Expr),
    /// `workgroups(n)`: n workgroups, 1-D with the 2-D fallback.
    Workgroups(Expr),
    /// `workgroups(x, y[, z])`: this grid (`z` is 1 when not written).
    Explicit([Expr; 3]),
}

/// An annotation's value with the annotation's text and place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Located<T> {
    /// The checked value.
    pub value: T,
    /// The expression as written after `@grid` / `@requires`.
    pub text: String,
    /// The annotation line.
    pub location: Location,
}

/// How a kernel's grid is chosen.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum GridSource {
    /// No `@grid`: the caller passes one.
    #[default]
    Caller,
    /// From a `@grid` annotation.
    Annotation(Box<Located<Grid>>),
    /// A `@grid` annotation with an error (reported): the function takes no grid argument and
    /// its body is not emitted.
    Invalid,
}

/// Everything the annotations of one kernel say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    /// The grid.
    pub grid: GridSource,
    /// The `@requires` checks, in order.
    pub requires: Vec<Located<Requirement>>,
    /// The bindings named by `@accumulates`, in order.
    pub accumulates: Vec<Located<String>>,
    /// Where `// @unchecked` is written, if it is. With it the kernel's author states that the
    /// kernel keeps itself in range once its `@requires` hold: every index into a storage,
    /// uniform, workgroup, private or fixed-size array and every texel coordinate is in
    /// bounds, every loop ends, and no integer division or remainder has a zero divisor or is
    /// `i32` minimum by −1. The runtime then creates its shader module natively with
    /// `wgpu::ShaderRuntimeChecks::unchecked()`, which takes out naga's clamping of those
    /// indices and coordinates (on Vulkan with `robustBufferAccess2` naga leaves the storage
    /// and uniform ones to the driver in any case), its loop bounding (`force_loop_bounding`)
    /// and its guarded integer division. What stays: on Vulkan the driver's robust buffer access on
    /// storage and uniform buffers (`robustBufferAccess2`, else `robustBufferAccess`, which
    /// wgpu enables where the device has them; Metal has none, so there nothing bounds them),
    /// zero-initialised workgroup memory, and every check of the generated function. In a
    /// browser the WebGPU implementation checks regardless.
    pub unchecked: Option<Location>,
}

/// Translates an expression against a kernel's interface.
pub fn expr(e: &syn::Expr, iface: &Interface) -> Result<Expr, String> {
    Ok(match e {
        syn::Expr::Paren(p) => return expr(&p.expr, iface),
        syn::Expr::Group(g) => return expr(&g.expr, iface),
        syn::Expr::Lit(l) => match &l.lit {
            Lit::Int(i) => Expr::Int(i.base10_parse().map_err(|e| e.to_string())?),
            _ => return Err("only integer literals are allowed".into()),
        },
        syn::Expr::Path(p) => {
            let name = p.path.get_ident().ok_or("expected a name")?.unraw().to_string();
            if let Some((_, v)) = iface.consts.iter().find(|(n, _)| *n == name) {
                Expr::Int(*v)
            } else if let Some(b) = iface.bindings.iter().find(|b| b.name == name) {
                match (&b.access, &b.ty) {
                    (Access::Uniform, HostType::Scalar(s)) if s.is_integer() => {
                        Expr::Uniform { binding: name, path: Vec::new() }
                    }
                    (Access::Uniform, _) => {
                        return Err(format!(
                            "uniform `{name}` is not an integer; name one of its integer fields, like `{name}.n`"
                        ));
                    }
                    _ => return Err(format!("`{name}` is a storage buffer; use `len({name})` for its length")),
                }
            } else {
                return Err(format!(
                    "unknown name `{name}`: expected a uniform, a uniform's field, `len(buffer)` or a module-scope integer constant"
                ));
            }
        }
        syn::Expr::Field(_) => {
            let (root, names) = field_path(e)?;
            let b = iface
                .bindings
                .iter()
                .find(|b| b.name == root && b.access == Access::Uniform)
                .ok_or_else(|| format!("`{root}` is not a uniform of this kernel"))?;
            let mut ty = b.ty.clone();
            let mut path = Vec::new();
            for part in &names {
                match &ty {
                    HostType::Struct(sname) => {
                        let s = iface.structs.iter().find(|s| &s.name == sname).ok_or("unknown struct")?;
                        let f = s
                            .fields
                            .iter()
                            .find(|f| f.name.as_deref() == Some(part.as_str()))
                            .ok_or_else(|| format!("`{sname}` has no field `{part}`"))?;
                        ty = f.ty.clone().ok_or("padding")?;
                        path.push(Step::Field(part.clone()));
                    }
                    HostType::Array(inner, n) => {
                        let i = match part.as_str() {
                            "x" | "r" => 0,
                            "y" | "g" => 1,
                            "z" | "b" => 2,
                            "w" | "a" => 3,
                            _ => return Err(format!("`.{part}` is not a vector component")),
                        };
                        if i >= *n {
                            return Err(format!("`.{part}` is past the vector's end"));
                        }
                        ty = (**inner).clone();
                        path.push(Step::Component(i));
                    }
                    HostType::Scalar(_) => return Err(format!("`.{part}` on a scalar")),
                }
            }
            match ty {
                HostType::Scalar(s) if s.is_integer() => Expr::Uniform { binding: root, path },
                HostType::Scalar(_) => return Err("only integer fields can be used in shapes".into()),
                _ => return Err("name an integer field, not a struct or vector".into()),
            }
        }
        syn::Expr::Call(c) => {
            let f = match &*c.func {
                syn::Expr::Path(p) => p.path.get_ident().map(|i| i.unraw().to_string()).unwrap_or_default(),
                _ => String::new(),
            };
            let args: Vec<&syn::Expr> = c.args.iter().collect();
            match (f.as_str(), args.as_slice()) {
                ("len", [syn::Expr::Path(p)]) => {
                    let name = p.path.get_ident().ok_or("expected a buffer name")?.unraw().to_string();
                    let b = iface
                        .bindings
                        .iter()
                        .find(|b| b.name == name)
                        .ok_or_else(|| format!("`{name}` is not a binding of this kernel"))?;
                    if b.access == Access::Uniform {
                        return Err(format!("`{name}` is a uniform; `len` takes a storage buffer"));
                    }
                    Expr::Len { binding: name }
                }
                ("ceil_div" | "min" | "max", [a, b]) => {
                    let op = match f.as_str() {
                        "ceil_div" => Op::CeilDiv,
                        "min" => Op::Min,
                        _ => Op::Max,
                    };
                    Expr::Binary { op, left: Box::new(expr(a, iface)?), right: Box::new(expr(b, iface)?) }
                }
                _ => {
                    return Err(format!(
                        "unknown function `{f}` (or wrong arguments): the functions are `len(buffer)`, `ceil_div(a, b)`, `min(a, b)` and `max(a, b)`"
                    ));
                }
            }
        }
        syn::Expr::Binary(b) => {
            let op = match b.op {
                BinOp::Add(_) => Op::Add,
                BinOp::Sub(_) => Op::Sub,
                BinOp::Mul(_) => Op::Mul,
                BinOp::Div(_) => Op::Div,
                BinOp::Rem(_) => Op::Rem,
                _ => return Err("comparisons belong only at the top of a `@requires`".into()),
            };
            Expr::Binary { op, left: Box::new(expr(&b.left, iface)?), right: Box::new(expr(&b.right, iface)?) }
        }
        _ => {
            return Err(
                "unsupported expression: use integers, names, `len(x)`, `+ - * / %`, `ceil_div`, `min`, `max`".into()
            );
        }
    })
}

fn field_path(e: &syn::Expr) -> Result<(String, Vec<String>), String> {
    match e {
        syn::Expr::Field(f) => {
            let (root, mut path) = field_path(&f.base)?;
            match &f.member {
                syn::Member::Named(n) => path.push(n.unraw().to_string()),
                syn::Member::Unnamed(_) => return Err("use field names".into()),
            }
            Ok((root, path))
        }
        syn::Expr::Path(p) => Ok((p.path.get_ident().ok_or("expected a name")?.unraw().to_string(), Vec::new())),
        _ => Err("expected `uniform.field`".into()),
    }
}

/// Parses an annotation expression. Every name is read as a raw identifier, so that WGSL names
/// that are Rust keywords (`box`, `dyn`, `gen`) are names here too.
fn parse(text: &str) -> Result<syn::Expr, String> {
    // Parsing, checking and emitting recurse over the tree: bound it before anything else.
    let mut depth = 0usize;
    let mut deepest = 0usize;
    let mut operators = 0usize;
    for c in text.chars() {
        match c {
            '(' | '[' | '{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            '+' | '-' | '*' | '/' | '%' | '!' | '&' | '|' | '^' | '<' | '>' | '=' | ',' | '.' => operators += 1,
            _ => {}
        }
    }
    if deepest > MAX_NESTING {
        return Err(format!("the expression nests {deepest} levels deep; at most {MAX_NESTING} are allowed"));
    }
    if operators > MAX_OPERATORS {
        return Err(format!(
            "the expression has {operators} operators and separators; at most {MAX_OPERATORS} are allowed"
        ));
    }
    let mut raw = String::with_capacity(text.len() + 16);
    let mut chars = text.char_indices().peekable();
    let mut prev: Option<char> = None;
    while let Some((i, c)) = chars.next() {
        let starts_word = (c.is_alphabetic() || c == '_') && !prev.is_some_and(|p| p.is_alphanumeric() || p == '_');
        if starts_word {
            let mut end = i + c.len_utf8();
            while let Some(&(j, d)) = chars.peek() {
                if d.is_alphanumeric() || d == '_' {
                    end = j + d.len_utf8();
                    chars.next();
                } else {
                    break;
                }
            }
            let word = &text[i..end];
            if syn::parse_str::<syn::Ident>(&format!("r#{word}")).is_ok() {
                raw.push_str("r#");
            }
            raw.push_str(word);
            prev = word.chars().last();
        } else {
            raw.push(c);
            prev = Some(c);
        }
    }
    syn::parse_str(&raw).map_err(|e| format!("cannot parse `{text}`: {e}"))
}

/// How deep brackets may nest in an annotation's expression.
pub const MAX_NESTING: usize = 32;

/// How many operators, commas and dots an annotation's expression may hold.
pub const MAX_OPERATORS: usize = 256;

/// Why `e` fails on every call, if it does: a failure that does not depend on the arguments
/// (a constant divisor of zero, a `ceil_div` by a constant that is not positive or of a
/// negative constant, a constant overflow).
pub fn always_fails(e: &Expr) -> Option<String> {
    let Expr::Binary { op, left, right } = e else { return None };
    if let Some(why) = always_fails(left).or_else(|| always_fails(right)) {
        return Some(why);
    }
    let (l, r) = (left.constant(), right.constant());
    match (op, l, r) {
        (Op::Div | Op::Rem, _, Some(0)) => Some("it divides by zero".into()),
        (Op::CeilDiv, _, Some(b)) if b <= 0 => Some(format!("`ceil_div` by {b} (the divisor must be positive)")),
        (Op::CeilDiv, Some(a), _) if a < 0 => Some(format!("`ceil_div` of {a} (the dividend must not be negative)")),
        (_, Some(a), Some(b)) if op.apply(a, b).is_none() => Some("its constant part overflows".into()),
        _ => None,
    }
}

impl Expr {
    /// The value of an expression that reads no argument (`None` if it reads one or fails).
    pub fn constant(&self) -> Option<i128> {
        self.eval(&|_| None, &|_, _| None)
    }
}

/// A `@requires` that cannot hold on any call, and why.
fn never_holds(r: &Requirement) -> Option<String> {
    if let Some(why) = always_fails(&r.left).or_else(|| always_fails(&r.right)) {
        return Some(format!("it fails on every call: {why}"));
    }
    match (r.left.constant(), r.right.constant()) {
        (Some(a), Some(b)) if !r.cmp.holds(a, b) => Some(format!(
            "it never holds: both sides are constants ({a} {} {b} is false)",
            crate::manifest::cmp_name(r.cmp)
        )),
        _ => None,
    }
}

/// A grid size that is wrong on every call, and why.
fn bad_size(e: &Expr, explicit: bool) -> Option<String> {
    if let Some(why) = always_fails(e) {
        return Some(format!("it fails on every call: {why}"));
    }
    match e.constant() {
        Some(v) if v < 0 => Some(format!("it is {v} on every call (a size cannot be negative)")),
        Some(v) if explicit && v > i128::from(u32::MAX) => {
            Some(format!("it is {v} on every call, more than a dimension holds (u32)"))
        }
        _ => None,
    }
}

/// Parses and checks a `@requires`.
pub fn requirement(text: &str, iface: &Interface) -> Result<Requirement, String> {
    let e = parse(text)?;
    let syn::Expr::Binary(b) = &e else {
        return Err("a `@requires` is one comparison, like `len(x) >= p.n`".into());
    };
    let cmp = match b.op {
        BinOp::Ge(_) => Cmp::Ge,
        BinOp::Gt(_) => Cmp::Gt,
        BinOp::Le(_) => Cmp::Le,
        BinOp::Lt(_) => Cmp::Lt,
        BinOp::Eq(_) => Cmp::Eq,
        BinOp::Ne(_) => Cmp::Ne,
        _ => return Err("a `@requires` is one comparison, like `len(x) >= p.n`".into()),
    };
    let (left, right) = (&b.left, &b.right);
    let r = Requirement {
        left: expr(left, iface)?,
        cmp,
        right: expr(right, iface)?,
        left_text: tidy(&quote::quote!(#left).to_string()),
        right_text: tidy(&quote::quote!(#right).to_string()),
    };
    match never_holds(&r) {
        Some(why) => Err(format!("`{text}` refuses every call: {why}")),
        None => Ok(r),
    }
}

/// Token text back to how a person writes it: `r#len (r#x)` → `len(x)`, `p . n` → `p.n`.
fn tidy(s: &str) -> String {
    s.replace("r#", "").replace(" . ", ".").replace(" (", "(").replace("( ", "(").replace(" )", ")").replace(" ,", ",")
}

/// Parses and checks an `@accumulates`: one or more binding names, separated by commas, each a
/// `read_write` storage binding that the entry point both reads and writes.
pub fn accumulates(text: &str, iface: &Interface) -> Result<Vec<String>, String> {
    let usage = "an `@accumulates` names the read-write storage bindings the kernel adds into, like `@accumulates y`";
    let mut out = Vec::new();
    for name in text.split(',').map(str::trim) {
        if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
            return Err(format!("`{text}`: {usage}"));
        }
        let b = iface
            .bindings
            .iter()
            .find(|b| b.name == name)
            .ok_or_else(|| format!("`{name}` is not a binding of this kernel"))?;
        if b.access != Access::ReadWrite {
            return Err(format!("`{name}` is not a `read_write` storage binding, so nothing accumulates into it"));
        }
        if let Some((_, u)) = iface.usage.iter().find(|(n, _)| n == name)
            && !(u.read && u.written)
        {
            return Err(format!(
                "the kernel {} `{name}`, so it does not accumulate into it (`+=` reads and writes)",
                if u.written { "never reads" } else { "never writes" }
            ));
        }
        if out.iter().any(|n| n == name) {
            return Err(format!("`{name}` is named twice"));
        }
        out.push(name.to_string());
    }
    Ok(out)
}

/// Parses and checks a `@grid`.
pub fn grid(text: &str, iface: &Interface) -> Result<Grid, String> {
    let usage = "a `@grid` is `threads(n)`, `workgroups(n)` or `workgroups(x, y[, z])`";
    let e = parse(text)?;
    let syn::Expr::Call(c) = &e else { return Err(usage.into()) };
    let f = match &*c.func {
        syn::Expr::Path(p) => p.path.get_ident().map(|i| i.unraw().to_string()).unwrap_or_default(),
        _ => String::new(),
    };
    let mut args = c.args.iter().map(|a| expr(a, iface)).collect::<Result<Vec<_>, _>>()?;
    for (i, a) in args.iter().enumerate() {
        if let Some(why) = bad_size(a, args.len() > 1) {
            let which = if args.len() > 1 {
                format!("dimension {} of ", ["x", "y", "z"].get(i).unwrap_or(&"?"))
            } else {
                String::new()
            };
            return Err(format!("{which}`{text}` refuses every call: {why}"));
        }
    }
    match (f.as_str(), args.len()) {
        ("threads", 1) => {
            let [_, y, z] = iface.workgroup_size;
            if y != 1 || z != 1 {
                return Err("`threads(n)` needs a one-dimensional workgroup (`@workgroup_size(x)`), since the \
                     kernel recovers its index with `flat_id`"
                    .into());
            }
            Ok(Grid::Threads(args.remove(0)))
        }
        ("workgroups", 1) => Ok(Grid::Workgroups(args.remove(0))),
        ("workgroups", 2 | 3) => {
            let z = if args.len() == 3 { args.remove(2) } else { Expr::Int(1) };
            let y = args.remove(1);
            Ok(Grid::Explicit([args.remove(0), y, z]))
        }
        _ => Err(usage.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reflect::{Binding, Field, HostScalar, StructDef};

    fn iface() -> Interface {
        let u32t = || Some(HostType::Scalar(HostScalar::U32));
        Interface {
            workgroup_size: [64, 1, 1],
            bindings: vec![
                Binding {
                    group: 0,
                    binding: 0,
                    name: "x".into(),
                    access: Access::ReadWrite,
                    ty: HostType::Scalar(HostScalar::F32),
                    wgsl: "array<f32>".into(),
                    stride: 4,
                    min_elems: 0,
                    runtime_sized: true,
                    header: None,
                    offset: 0,
                },
                Binding {
                    group: 0,
                    binding: 1,
                    name: "p".into(),
                    access: Access::Uniform,
                    ty: HostType::Struct("P".into()),
                    wgsl: "P".into(),
                    stride: 16,
                    min_elems: 1,
                    runtime_sized: false,
                    header: None,
                    offset: 0,
                },
            ],
            structs: vec![StructDef {
                name: "P".into(),
                size: 16,
                fields: vec![
                    Field { name: Some("n".into()), ty: u32t(), offset: 0, size: 4 },
                    Field {
                        name: Some("scale".into()),
                        ty: Some(HostType::Scalar(HostScalar::F32)),
                        offset: 4,
                        size: 4,
                    },
                    Field {
                        name: Some("dims".into()),
                        ty: Some(HostType::Array(Box::new(HostType::Scalar(HostScalar::U32)), 2)),
                        offset: 8,
                        size: 8,
                    },
                ],
            }],
            consts: vec![("TILE".into(), 16)],
            ..Interface::default()
        }
    }

    #[test]
    fn typed_trees() {
        let i = iface();
        let r = requirement("len(x) >= ceil_div(p.n, TILE) * p.dims.y", &i).unwrap();
        assert_eq!(r.cmp, Cmp::Ge);
        assert_eq!(r.left, Expr::Len { binding: "x".into() });
        assert_eq!(r.left_text, "len(x)");
        assert_eq!(r.right_text, "ceil_div(p.n, TILE) * p.dims.y");
        let Expr::Binary { op: Op::Mul, left, right } = &r.right else { panic!("{:?}", r.right) };
        assert_eq!(
            **right,
            Expr::Uniform { binding: "p".into(), path: vec![Step::Field("dims".into()), Step::Component(1)] }
        );
        let Expr::Binary { op: Op::CeilDiv, right: tile, .. } = &**left else { panic!() };
        assert_eq!(**tile, Expr::Int(16));
        assert_eq!(
            grid("workgroups(p.n, 2)", &i).unwrap(),
            Grid::Explicit([
                Expr::Uniform { binding: "p".into(), path: vec![Step::Field("n".into())] },
                Expr::Int(2),
                Expr::Int(1)
            ])
        );
        for (bad, why) in [
            ("len(p) > 1", "is a uniform"),
            ("p.scale > 1", "only integer fields"),
            ("p.dims.z > 1", "past the vector's end"),
            ("x > 1", "storage buffer"),
            ("q > 1", "unknown name"),
            ("len(x)", "one comparison"),
            ("len(x) > 1 + (2 > 1)", "comparisons belong"),
        ] {
            let e = requirement(bad, &i).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        assert!(grid("threads(1, 2)", &i).is_err());
        // Suffixed literals and names that are Rust keywords elsewhere.
        assert!(requirement("len(x) >= 2 * TILE", &i).is_ok());
    }

    #[test]
    fn evaluation_follows_the_documented_semantics() {
        let i = iface();
        let uniform = |_: &str, path: &[Step]| match path {
            [Step::Field(n)] if n == "n" => Some(10),
            [Step::Field(_), Step::Component(1)] => Some(3),
            _ => None,
        };
        let eval = |text: &str| expr(&syn::parse_str(text).unwrap(), &i).unwrap().eval(&|_| Some(7), &uniform);
        assert_eq!(eval("ceil_div(p.n, 4)"), Some(3));
        assert_eq!(eval("p.n / 4 + p.n % 4"), Some(4));
        assert_eq!(eval("(0 - p.n) / 4"), Some(-2), "truncates toward zero");
        assert_eq!(eval("(0 - p.n) % 4"), Some(-2), "has the dividend's sign");
        assert_eq!(eval("p.n / (p.dims.y - 3)"), None, "division by zero fails");
        assert_eq!(eval("ceil_div(0 - 1, 2)"), None, "ceil_div of a negative fails");
        assert_eq!(eval("min(len(x), p.dims.y) * max(1, TILE)"), Some(48));
        assert_eq!(eval("170141183460469231731687303715884105727 + 1"), None, "overflow fails");
    }

    #[test]
    fn annotations_that_fail_on_every_call_are_errors() {
        let i = iface();
        for (bad, why) in [
            ("len(x) >= p.n / 0", "divides by zero"),
            ("len(x) >= p.n % (TILE - 16)", "divides by zero"),
            ("len(x) >= ceil_div(p.n, 0)", "divisor must be positive"),
            ("len(x) >= ceil_div(0 - 1, p.n)", "dividend must not be negative"),
            ("1 > 2", "never holds"),
            ("len(x) >= 170141183460469231731687303715884105727 + 1", "overflows"),
        ] {
            let e = requirement(bad, &i).unwrap_err();
            assert!(e.contains("refuses every call") && e.contains(why), "{bad}: {e}");
        }
        assert!(requirement("2 > 1", &i).is_ok(), "a check that always holds refuses nothing");
        assert!(requirement("len(x) >= p.n / TILE", &i).is_ok());
        for (bad, why) in [
            ("workgroups(p.n, 0 - 1)", "negative"),
            ("threads(p.n / 0)", "divides by zero"),
            ("workgroups(4294967296, 1)", "more than a dimension"),
        ] {
            let e = grid(bad, &i).unwrap_err();
            assert!(e.contains("refuses every call") && e.contains(why), "{bad}: {e}");
        }
        assert!(grid("workgroups(4294967296)", &i).is_ok(), "a 1-D count may pass u32 (the 2-D fallback)");
    }

    #[test]
    fn expressions_are_bounded_before_parsing() {
        let i = iface();
        let deep = format!("len(x) >= {}p.n{}", "(".repeat(5000), ")".repeat(5000));
        assert!(requirement(&deep, &i).unwrap_err().contains("nests 5000 levels"));
        let long = format!("len(x) >= {}", vec!["p.n"; 20_000].join(" + "));
        assert!(requirement(&long, &i).unwrap_err().contains("at most 256"));
        let unary = format!("len(x) >= {}1", "-".repeat(20_000));
        assert!(requirement(&unary, &i).is_err());
        let ok = format!("len(x) >= {}p.n{}", "(".repeat(MAX_NESTING), ")".repeat(MAX_NESTING));
        assert!(requirement(&ok, &i).is_ok());
    }
}
