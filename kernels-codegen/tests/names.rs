//! No name breaks the generated code: every identifier WGSL accepts — Rust keywords of every
//! edition, prelude names, primitive type names, the names the macro generates itself — used as
//! a file, kernel, binding, struct, field, constant (of the file or the shared preamble) or
//! override name gives a module that parses and in which no two items of a namespace share a
//! name, no parameter or local of a generated function is a constant of the module and no local
//! shadows a parameter (the checks rustc's E0428, E0255, E0124, E0415, E0530 and E0308 make).
//! Names Rust normalizes (NFC) into one are refused by the macro instead. A sample goes through
//! rustc itself in the root crate's `tests/structs.rs` (`hostile_names`).

use kernels_codegen::compile;
use kernels_codegen::input::Shared;
use kernels_codegen::source::CallSite;
use kernels_codegen::split::wgsl_ident_problem;
use proptest::prelude::*;
use std::collections::HashSet;
use syn::ext::IdentExt;

/// Names that have broken code generators: keywords of every Rust edition (strict, reserved,
/// weak), prelude and primitive names, the macro's own names, and plain ones.
const HOSTILE: &[&str] = &[
    "as",
    "async",
    "await",
    "dyn",
    "abstract",
    "become",
    "box",
    "do",
    "final",
    "macro",
    "override",
    "priv",
    "typeof",
    "unsized",
    "virtual",
    "yield",
    "try",
    "gen",
    "union",
    "macro_rules",
    "raw",
    "safe",
    "None",
    "Some",
    "Ok",
    "Err",
    "Option",
    "Result",
    "Vec",
    "String",
    "Box",
    "Default",
    "Clone",
    "Copy",
    "Send",
    "drop",
    "u8",
    "u16",
    "u64",
    "i8",
    "i64",
    "i128",
    "u128",
    "usize",
    "isize",
    "str",
    "char",
    "f64",
    "KERNELS",
    "KERNEL",
    "WGSL",
    "WGSL_WITHOUT_SUBGROUPS",
    "BROWSER_WGSL",
    "WORKGROUP_SIZE",
    "Overrides",
    "Params",
    "rec",
    "rec_",
    "grid",
    "overrides",
    "new",
    "default",
    "len",
    "core",
    "kernels",
    "_pad0",
    "_pad1",
    "__k_pad0",
    "r",
    "a",
    "b",
    "x",
    "n",
    "Record",
    "Buffer",
    "Grid",
    "Error",
    "shape",
    "bytemuck",
    "std",
    "super",
    "self",
    "Self",
    "crate",
    "type",
    "loop",
    "fn",
    "mod",
    "impl",
    "match",
    "ref",
    "move",
    "where",
    "static",
    "trait",
    "use",
    // The names of generated locals, less their prefix (a constant `v` once made the
    // override code's `let` a pattern).
    "v",
    "l",
    // Names Rust normalizes (NFC) to another name of the pool: a precomposed and a decomposed
    // `é`, the Kelvin sign for `K`.
    "caf\u{e9}",
    "cafe\u{301}",
    "\u{212a}ERNELS",
    "\u{212a}",
    "K",
];

/// The names above that WGSL accepts as declaration names (the others never reach Rust).
fn usable() -> Vec<&'static str> {
    HOSTILE
        .iter()
        .copied()
        .filter(|n| wgsl_ident_problem(n).is_none() && !naga::keywords::wgsl::BUILTIN_IDENTIFIERS.contains(n))
        .collect()
}

/// A kernel file using `names` in every role: [file, kernel, other kernel, struct, field,
/// field, binding, binding, constant, override, constant of the shared preamble]. The first
/// kernel also declares a struct named like the other kernel; the other kernel has a binding
/// named like the first.
fn source(n: &[&str]) -> String {
    let [_, k, k2, s, f1, f2, b1, b2, c, o, sc] = n else { panic!() };
    format!(
        "const {c}: u32 = 4u + {sc};\n\
         struct {s} {{ {f1}: vec3<f32>, {f2}: u32, tail: u32 }}\n\
         // --- KERNEL: {k} ---\n\
         // @grid workgroups({b2}.{f2} + {c})\n\
         // @requires len({b1}) >= {b2}.tail\n\
         struct {k2} {{ w: u32 }}\n\
         override {o}: u32 = 1u;\n\
         @group(0) @binding(0) var<storage, read_write> {b1}: array<u32>;\n\
         @group(0) @binding(1) var<uniform> {b2}: {s};\n\
         @group(0) @binding(2) var<uniform> extra: {k2};\n\
         @compute @workgroup_size(1) fn {k}() {{ {b1}[0] = {b2}.{f2} + u32({b2}.{f1}.x) + {c} + {o} + extra.w; }}\n\
         // --- KERNEL: {k2} ---\n\
         @group(0) @binding(0) var<storage, read_write> {k}: array<{s}>;\n\
         @compute @workgroup_size(1) fn {k2}() {{ {k}[0].{f2} = {c}; }}\n"
    )
}

fn unraw(i: &syn::Ident) -> String {
    i.unraw().to_string()
}

/// The names a pattern binds.
fn pattern_names(p: &syn::Pat, out: &mut Vec<String>) {
    match p {
        syn::Pat::Ident(i) => {
            out.push(unraw(&i.ident));
            if let Some((_, sub)) = &i.subpat {
                pattern_names(sub, out);
            }
        }
        syn::Pat::TupleStruct(t) => t.elems.iter().for_each(|e| pattern_names(e, out)),
        syn::Pat::Tuple(t) => t.elems.iter().for_each(|e| pattern_names(e, out)),
        syn::Pat::Slice(t) => t.elems.iter().for_each(|e| pattern_names(e, out)),
        syn::Pat::Or(o) => o.cases.iter().for_each(|e| pattern_names(e, out)),
        syn::Pat::Struct(s) => s.fields.iter().for_each(|f| pattern_names(&f.pat, out)),
        syn::Pat::Reference(r) => pattern_names(&r.pat, out),
        syn::Pat::Paren(r) => pattern_names(&r.pat, out),
        syn::Pat::Type(t) => pattern_names(&t.pat, out),
        _ => {}
    }
}

/// The names every pattern of a block binds: `let`, `if let`, `match` arms, closure and `for`
/// patterns.
fn block_locals(b: &syn::Block, out: &mut Vec<String>) {
    for stmt in &b.stmts {
        match stmt {
            syn::Stmt::Local(l) => {
                pattern_names(&l.pat, out);
                if let Some(init) = &l.init {
                    expr_locals(&init.expr, out);
                    if let Some((_, e)) = &init.diverge {
                        expr_locals(e, out);
                    }
                }
            }
            syn::Stmt::Expr(e, _) => expr_locals(e, out),
            _ => {}
        }
    }
}

fn expr_locals(e: &syn::Expr, out: &mut Vec<String>) {
    use syn::Expr as E;
    let all = |es: &mut dyn Iterator<Item = &syn::Expr>, out: &mut Vec<String>| es.for_each(|e| expr_locals(e, out));
    match e {
        E::Let(l) => {
            pattern_names(&l.pat, out);
            expr_locals(&l.expr, out);
        }
        E::If(i) => {
            expr_locals(&i.cond, out);
            block_locals(&i.then_branch, out);
            if let Some((_, e)) = &i.else_branch {
                expr_locals(e, out);
            }
        }
        E::Match(m) => {
            expr_locals(&m.expr, out);
            for arm in &m.arms {
                pattern_names(&arm.pat, out);
                expr_locals(&arm.body, out);
            }
        }
        E::Closure(c) => {
            c.inputs.iter().for_each(|p| pattern_names(p, out));
            expr_locals(&c.body, out);
        }
        E::ForLoop(f) => {
            pattern_names(&f.pat, out);
            expr_locals(&f.expr, out);
            block_locals(&f.body, out);
        }
        E::Block(b) => block_locals(&b.block, out),
        E::Unsafe(b) => block_locals(&b.block, out),
        E::Loop(b) => block_locals(&b.body, out),
        E::While(w) => {
            expr_locals(&w.cond, out);
            block_locals(&w.body, out);
        }
        E::Call(c) => all(&mut std::iter::once(&*c.func).chain(c.args.iter()), out),
        E::MethodCall(m) => all(&mut std::iter::once(&*m.receiver).chain(m.args.iter()), out),
        E::Array(a) => all(&mut a.elems.iter(), out),
        E::Tuple(a) => all(&mut a.elems.iter(), out),
        E::Struct(s) => all(&mut s.fields.iter().map(|f| &f.expr), out),
        E::Binary(b) => all(&mut [&*b.left, &*b.right].into_iter(), out),
        E::Assign(b) => all(&mut [&*b.left, &*b.right].into_iter(), out),
        E::Index(b) => all(&mut [&*b.expr, &*b.index].into_iter(), out),
        E::Unary(u) => expr_locals(&u.expr, out),
        E::Reference(r) => expr_locals(&r.expr, out),
        E::Paren(p) => expr_locals(&p.expr, out),
        E::Group(p) => expr_locals(&p.expr, out),
        E::Try(t) => expr_locals(&t.expr, out),
        E::Cast(c) => expr_locals(&c.expr, out),
        E::Field(f) => expr_locals(&f.base, out),
        E::Return(r) => {
            if let Some(e) = &r.expr {
                expr_locals(e, out);
            }
        }
        _ => {}
    }
}

/// The clashes rustc would report in one module and its submodules.
fn clashes(items: &[syn::Item], path: &str, out: &mut Vec<String>) {
    let mut types = HashSet::new();
    let mut values = HashSet::new();
    let mut consts = HashSet::new();
    let mut fns = Vec::new();
    for item in items {
        let (ty, value) = match item {
            syn::Item::Struct(s) => {
                let mut fields = HashSet::new();
                for f in &s.fields {
                    if let Some(i) = &f.ident
                        && !fields.insert(unraw(i))
                    {
                        out.push(format!("{path}::{}: field `{i}` twice", s.ident));
                    }
                }
                (Some(unraw(&s.ident)), None)
            }
            syn::Item::Mod(m) => {
                if let Some((_, items)) = &m.content {
                    clashes(items, &format!("{path}::{}", m.ident), out);
                }
                (Some(unraw(&m.ident)), None)
            }
            syn::Item::Use(u) => {
                let mut last = &u.tree;
                while let syn::UseTree::Path(p) = last {
                    last = &p.tree;
                }
                match last {
                    syn::UseTree::Name(n) => (Some(unraw(&n.ident)), None),
                    _ => (None, None),
                }
            }
            syn::Item::Fn(f) => {
                fns.push(f.clone());
                (None, Some(unraw(&f.sig.ident)))
            }
            syn::Item::Const(c) => {
                consts.insert(unraw(&c.ident));
                (None, Some(unraw(&c.ident)))
            }
            syn::Item::Static(s) => {
                consts.insert(unraw(&s.ident));
                (None, Some(unraw(&s.ident)))
            }
            _ => (None, None),
        };
        if let Some(t) = ty
            && !types.insert(t.clone())
            && t != "_"
        {
            out.push(format!("{path}: type `{t}` twice"));
        }
        if let Some(v) = value
            && !values.insert(v.clone())
            && v != "_"
        {
            out.push(format!("{path}: value `{v}` twice"));
        }
    }
    for f in fns {
        let mut params = HashSet::new();
        for input in &f.sig.inputs {
            if let syn::FnArg::Typed(t) = input
                && let syn::Pat::Ident(p) = &*t.pat
            {
                let name = unraw(&p.ident);
                if !params.insert(name.clone()) {
                    out.push(format!("{path}::{}: parameter `{name}` twice", f.sig.ident));
                }
                if consts.contains(&name) {
                    out.push(format!("{path}::{}: parameter `{name}` is a constant of the module", f.sig.ident));
                }
            }
        }
        // A local named like a constant is a pattern (E0308, E0530); one named like a
        // parameter hides it from the code after it.
        let mut locals = Vec::new();
        block_locals(&f.block, &mut locals);
        for name in locals {
            if consts.contains(&name) {
                out.push(format!("{path}::{}: local `{name}` is a constant of the module", f.sig.ident));
            }
            if params.contains(&name) {
                out.push(format!("{path}::{}: local `{name}` shadows a parameter", f.sig.ident));
            }
        }
    }
}

fn check(names: &[&str]) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("kernels-names-{}-{}", std::process::id(), names.join("-")));
    std::fs::create_dir_all(&dir).unwrap();
    let file = format!("01_{}.wgsl", names[0]);
    std::fs::write(dir.join("00_shared.wgsl"), format!("const {}: u32 = 2u;\n", names[10])).unwrap();
    std::fs::write(dir.join(&file), source(names)).unwrap();
    let site = CallSite { manifest_dir: Some(dir.clone()), calling_file: None };
    let compiled = compile::compile(&site, &file, &Shared::Default, None);
    let _ = std::fs::remove_dir_all(&dir);
    let errors: Vec<String> = compiled.all_errors().map(|e| e.render()).collect();
    // Names Rust would read as one are refused with a message of ours: no expansion to check.
    if !errors.is_empty() && normalizes_to_one(names) && errors.iter().all(|e| is_ours(e)) {
        return Ok(());
    }
    if !errors.is_empty() {
        return Err(format!("{names:?}: WGSL errors:\n{}", errors.join("\n")));
    }
    let tokens =
        kernels_codegen::expand::expand(&compiled, proc_macro2::Span::call_site(), &syn::parse_quote!(::kernels));
    let parsed: syn::File = syn::parse2(tokens).map_err(|e| format!("{names:?}: the expansion does not parse: {e}"))?;
    let mut found = Vec::new();
    clashes(&parsed.items, "", &mut found);
    if found.is_empty() { Ok(()) } else { Err(format!("{names:?}: {}", found.join("; "))) }
}

/// Whether two of `names` are one identifier once normalized (NFC).
fn normalizes_to_one(names: &[&str]) -> bool {
    let n: HashSet<String> = names.iter().map(|n| kernels_codegen::split::rust_name(n)).collect();
    n.len() < names.len()
}

/// The macro's error for names Rust reads as one.
fn is_ours(e: &str) -> bool {
    e.contains("one name in the generated Rust") || e.contains("normalizes identifiers")
}

/// Eleven distinct usable names.
fn names() -> impl Strategy<Value = Vec<&'static str>> {
    let pool = usable();
    proptest::sample::subsequence(pool.clone(), 11).prop_shuffle()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 120, ..ProptestConfig::default() })]

    #[test]
    fn no_name_breaks_the_generated_code(n in names()) {
        prop_assert!(check(&n).is_ok(), "{}", check(&n).unwrap_err());
    }
}

#[test]
fn the_pool_keeps_the_names_that_broke_the_macro() {
    let pool = usable();
    for n in ["gen", "None", "KERNELS", "Overrides", "rec", "rec_", "_pad0", "u8", "try", "dyn", "abstract"] {
        // `try`, `abstract` … are reserved in WGSL: they never reach Rust.
        if wgsl_ident_problem(n).is_none() {
            assert!(pool.contains(&n), "{n}");
        }
    }
    // Every name in every role, one at a time, with plain names elsewhere.
    let plain = ["f", "k1", "k2", "S", "g1", "g2", "v1", "v2", "C", "O", "SC"];
    for n in &pool {
        for role in 0..plain.len() {
            let mut names = plain;
            if names.contains(n) {
                continue;
            }
            names[role] = n;
            check(&names).unwrap();
        }
    }
}

#[test]
fn names_rust_reads_as_one_are_refused_in_every_pair_of_roles() {
    let plain = ["f", "k1", "k2", "S", "g1", "g2", "v1", "v2", "C", "O", "SC"];
    let (nfc, nfd) = ("caf\u{e9}", "cafe\u{301}");
    // Roles that share a namespace in the generated Rust: the two kernels (functions and
    // modules), the two fields, the two bindings (parameters), a constant with a kernel or the
    // other constant.
    for (a, b) in [(1, 2), (4, 5), (6, 7), (8, 10), (1, 8), (2, 10)] {
        let mut names = plain;
        names[a] = nfc;
        names[b] = nfd;
        let dir = std::env::temp_dir().join(format!("kernels-names-nfc-{}-{a}-{b}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("00_shared.wgsl"), format!("const {}: u32 = 2u;\n", names[10])).unwrap();
        std::fs::write(dir.join("01_f.wgsl"), source(&names)).unwrap();
        let site = CallSite { manifest_dir: Some(dir.clone()), calling_file: None };
        let compiled = compile::compile(&site, "01_f.wgsl", &Shared::Default, None);
        let _ = std::fs::remove_dir_all(&dir);
        let errors: Vec<String> = compiled.all_errors().map(|e| e.render()).collect();
        assert!(!errors.is_empty() && errors.iter().any(|e| is_ours(e)), "roles {a} and {b}: {errors:?}");
        assert!(check(&names).is_ok(), "{}", check(&names).unwrap_err());
    }
}
