//! No name breaks the generated code: every identifier WGSL accepts — Rust keywords of every
//! edition, prelude names, primitive type names, the names the macro generates itself — used as
//! a file, kernel, binding, struct, field, constant or override name gives a module that parses
//! and in which no two items of a namespace share a name and no parameter is shadowed by a
//! constant (the checks rustc's E0428, E0255, E0124, E0415 and E0530 make). A sample goes through
//! rustc itself in `tests/ui/pass/hostile_names.rs`.

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
/// field, binding, binding, constant, override]. The first kernel also declares a struct named
/// like the other kernel; the other kernel has a binding named like the first.
fn source(n: &[&str]) -> String {
    let [_, k, k2, s, f1, f2, b1, b2, c, o] = n else { panic!() };
    format!(
        "const {c}: u32 = 4u;\n\
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
    }
}

fn check(names: &[&str]) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("kernels-names-{}-{}", std::process::id(), names.join("-")));
    std::fs::create_dir_all(&dir).unwrap();
    let file = format!("01_{}.wgsl", names[0]);
    std::fs::write(dir.join("00_shared.wgsl"), "").unwrap();
    std::fs::write(dir.join(&file), source(names)).unwrap();
    let site = CallSite { manifest_dir: Some(dir.clone()), calling_file: None };
    let compiled = compile::compile(&site, &file, &Shared::Default, None);
    let _ = std::fs::remove_dir_all(&dir);
    let errors: Vec<String> = compiled.all_errors().map(|e| e.render()).collect();
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

/// Ten distinct usable names.
fn names() -> impl Strategy<Value = Vec<&'static str>> {
    let pool = usable();
    proptest::sample::subsequence(pool.clone(), 10).prop_shuffle()
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
    let plain = ["f", "k1", "k2", "S", "g1", "g2", "v1", "v2", "C", "O"];
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
