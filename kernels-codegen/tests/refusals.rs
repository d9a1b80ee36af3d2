//! Inputs the macro refuses with a message of its own, at the place the mistake is: the kernel
//! file included into itself, include chains and annotation expressions too deep to follow,
//! names Rust reads as one, products of mismatched cooperative matrices, annotations that fail
//! on every call, an `@unchecked` with an expression or twice, files that are not UTF-8; and
//! each error once, whatever the variants.

mod common;

use common::{compile_in, dir};
use kernels_codegen::diagnostic::Diagnostic;

const SHARED: &str = "const WG: u32 = 64u;\n";
const BINDING: &str = "@group(0) @binding(0) var<storage, read_write> x: array<u32>;\n";

fn kernel(name: &str, body: &str) -> String {
    format!("// --- KERNEL: {name} ---\n{BINDING}@compute @workgroup_size(WG) fn {name}() {{ {body} }}\n")
}

/// The errors of compiling `files` (`00_shared.wgsl` and `01_k.wgsl` among them), merged as
/// the user sees them.
fn errors(files: &[(&str, &str)]) -> Vec<Diagnostic> {
    let d = dir(files);
    let f = compile_in(&d, "01_k.wgsl");
    let _ = std::fs::remove_dir_all(&d);
    Diagnostic::merge(f.all_errors().cloned())
}

/// Runs `f` on a thread with a 1 MiB stack: input that nests deeply must not be followed by
/// unbounded recursion.
fn small_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| std::thread::Builder::new().stack_size(1 << 20).spawn_scoped(s, f).unwrap().join().unwrap())
}

/// The one error, as (file, line, rendered text).
fn one(errors: &[Diagnostic]) -> (String, usize, String) {
    assert_eq!(errors.len(), 1, "{errors:#?}");
    let l = errors[0].location.as_ref().unwrap_or_else(|| panic!("no location: {}", errors[0].render()));
    (l.file.clone(), l.line, errors[0].render())
}

#[test]
fn the_kernel_file_cannot_be_included() {
    let k = kernel("k", "x[0] = 1u;");
    // From the shared preamble, directly.
    let shared = format!("{SHARED}//#include \"01_k.wgsl\"\n");
    let (file, line, text) = one(&errors(&[("00_shared.wgsl", &shared), ("01_k.wgsl", &k)]));
    assert_eq!((file.as_str(), line), ("00_shared.wgsl", 2), "{text}");
    assert!(text.contains("`01_k.wgsl` is the kernel file, which cannot be included"), "{text}");
    assert!(text.contains("the first at 01_k.wgsl:1"), "{text}");
    // Through a library file the shared preamble includes.
    let shared = format!("{SHARED}//#include \"lib/a.wgsl\"\n");
    let lib = "fn a() {}\n//#include \"../01_k.wgsl\"\n";
    let (file, line, text) = one(&errors(&[("00_shared.wgsl", &shared), ("lib/a.wgsl", lib), ("01_k.wgsl", &k)]));
    assert_eq!((file.as_str(), line), ("lib/a.wgsl", 2), "{text}");
    // From itself.
    let k2 = format!("//#include \"01_k.wgsl\"\n{k}");
    let (file, line, _) = one(&errors(&[("00_shared.wgsl", SHARED), ("01_k.wgsl", &k2)]));
    assert_eq!((file.as_str(), line), ("01_k.wgsl", 1));
}

#[test]
fn a_deep_include_chain_is_an_error_not_a_crash() {
    // Ten thousand files, each including the next: followed to the limit, then refused.
    let n = 10_000;
    let names: Vec<String> = (0..n).map(|i| format!("lib/f{i}.wgsl")).collect();
    let texts: Vec<String> = (0..n)
        .map(|i| if i + 1 < n { format!("//#include \"f{}.wgsl\"\n", i + 1) } else { "fn last() {}\n".into() })
        .collect();
    let k = format!("//#include \"lib/f0.wgsl\"\n{}", kernel("k", "x[0] = 1u;"));
    let mut files: Vec<(&str, &str)> = vec![("00_shared.wgsl", SHARED), ("01_k.wgsl", &k)];
    files.extend(names.iter().map(String::as_str).zip(texts.iter().map(String::as_str)));
    let e = small_stack(|| errors(&files));
    let (file, _, text) = one(&e);
    assert!(text.contains("includes nest more than 64 files deep"), "{text}");
    assert!(file.starts_with("lib/f"), "{text}");
}

#[test]
fn annotation_expressions_too_deep_or_long_are_errors() {
    let deep = format!("len(x) >= {}1{}", "(".repeat(5000), ")".repeat(5000));
    let long = format!("len(x) >= {}", vec!["1"; 20_000].join(" + "));
    for (expr, why) in [(deep, "nests 5000 levels deep"), (long, "at most 256 are allowed")] {
        let k = kernel("k", "x[0] = 1u;").replace("---\n", &format!("---\n// @requires {expr}\n"));
        let e = small_stack(|| errors(&[("00_shared.wgsl", SHARED), ("01_k.wgsl", &k)]));
        let (_, line, text) = one(&e);
        assert_eq!(line, 2, "{text}");
        assert!(text.contains(why), "{text}");
    }
}

#[test]
fn a_colon_after_an_annotation_is_named_as_such() {
    let k = kernel("k", "x[0] = 1u;").replace("---\n", "---\n// @requires: len(x) >= 1\n");
    let (_, line, text) = one(&errors(&[("00_shared.wgsl", SHARED), ("01_k.wgsl", &k)]));
    assert_eq!(line, 2);
    assert!(text.contains("malformed annotation `@requires`"), "{text}");
    assert!(!text.contains("did you mean `@requires`"), "{text}");
}

#[test]
fn unchecked_stands_alone_once() {
    let with = |lines: &str| kernel("k", "x[0] = 1u;").replace("---\n", &format!("---\n// Doc.\n{lines}"));
    // Alone, once: no error, and the kernel knows where.
    let d = dir(&[("00_shared.wgsl", SHARED), ("01_k.wgsl", &with("// @unchecked\n"))]);
    let f = compile_in(&d, "01_k.wgsl");
    let _ = std::fs::remove_dir_all(&d);
    assert!(f.all_errors().next().is_none(), "{:?}", f.all_errors().map(Diagnostic::render).collect::<Vec<_>>());
    assert_eq!(f.kernels[0].shape.unchecked.as_ref().map(|l| l.line), Some(3));
    assert_eq!(f.kernels[0].doc, vec!["Doc."], "an annotation is not doc text");
    // With an expression.
    let k = with("// @unchecked len(x) >= 1\n");
    let (_, line, text) = one(&errors(&[("00_shared.wgsl", SHARED), ("01_k.wgsl", &k)]));
    assert_eq!(line, 3, "{text}");
    assert!(text.contains("kernel `k`: `@unchecked` takes no expression"), "{text}");
    assert!(text.contains("stands alone on its line: `// @unchecked`"), "{text}");
    assert!(text.contains("is a `// @requires …` line of its own"), "{text}");
    // Twice: at the second, naming the first.
    let k = with("// @unchecked\n// @requires len(x) >= 1\n// @unchecked\n");
    let (_, line, text) = one(&errors(&[("00_shared.wgsl", SHARED), ("01_k.wgsl", &k)]));
    assert_eq!(line, 5, "{text}");
    assert!(text.contains("more than one `@unchecked`") && text.contains("the first is at line 3"), "{text}");
    // Something glued to the word.
    for glued in ["// @unchecked:\n", "// @unchecked(true)\n"] {
        let (_, line, text) = one(&errors(&[("00_shared.wgsl", SHARED), ("01_k.wgsl", &with(glued))]));
        assert_eq!(line, 3, "{text}");
        assert!(text.contains("malformed annotation `@unchecked`"), "{text}");
        assert!(text.contains("stands alone on its line") && !text.contains("did you mean"), "{text}");
    }
    // Misspelled.
    let (_, line, text) = one(&errors(&[("00_shared.wgsl", SHARED), ("01_k.wgsl", &with("// @uncheked\n"))]));
    assert_eq!(line, 3, "{text}");
    assert!(text.contains("unknown annotation `@uncheked`") && text.contains("did you mean `@unchecked`?"), "{text}");
    assert!(text.contains("`// @accumulates …` and `// @unchecked`"), "{text}");
}

#[test]
fn annotations_that_fail_on_every_call_are_compile_errors() {
    let uniform = "@group(0) @binding(1) var<uniform> n: u32;\n";
    for (annotation, why) in [
        ("@requires len(x) >= n / 0", "divides by zero"),
        ("@requires len(x) >= ceil_div(n, 0)", "divisor must be positive"),
        ("@requires 1 > 2", "never holds"),
        ("@grid workgroups(n, 0 - 1)", "cannot be negative"),
    ] {
        let k = kernel("k", "x[0] = n;")
            .replace("---\n", &format!("---\n// {annotation}\n"))
            .replace(BINDING, &format!("{BINDING}{uniform}"));
        let (_, line, text) = one(&errors(&[("00_shared.wgsl", SHARED), ("01_k.wgsl", &k)]));
        assert_eq!(line, 2, "{text}");
        assert!(text.contains("refuses every call") && text.contains(why), "{annotation}: {text}");
    }
}

#[test]
fn a_file_that_is_not_utf8_is_reported_at_the_bad_byte() {
    let d = dir(&[("00_shared.wgsl", SHARED)]);
    let mut bytes = kernel("k", "x[0] = 1u;").into_bytes();
    let at = bytes.iter().position(|&b| b == b'@').unwrap();
    // Line 2 starts with `@group`: a Latin-1 `é` before it.
    bytes.insert(at, 0xe9);
    std::fs::write(d.join("01_k.wgsl"), &bytes).unwrap();
    let f = compile_in(&d, "01_k.wgsl");
    let (_, line, text) = one(&f.errors);
    assert_eq!(line, 2, "{text}");
    assert!(text.contains("is not UTF-8") && text.contains(":2:1"), "{text}");
    // An included file.
    let k = format!("//#include \"lib.wgsl\"\n{}", kernel("k", "x[0] = 1u;"));
    std::fs::write(d.join("01_k.wgsl"), k).unwrap();
    std::fs::write(d.join("lib.wgsl"), b"fn a() {}\nfn b() { /* \xff */ }\n").unwrap();
    let f = compile_in(&d, "01_k.wgsl");
    let _ = std::fs::remove_dir_all(&d);
    let (file, line, text) = one(&f.errors);
    assert_eq!((file.as_str(), line), ("lib.wgsl", 2), "{text}");
    assert!(text.contains(":2:13") && text.contains("included at 01_k.wgsl:1"), "{text}");
}

#[test]
fn an_error_in_several_variants_is_reported_once() {
    // Unused code of the file preamble, checked once per variant of the file.
    let file = format!(
        "fn unused() -> u32 {{ return 1.5; }}\n{}",
        kernel("k", "x[0] = 1u;\n//#if subgroups\nx[1] = subgroupAdd(1u);\n//#endif\n")
    );
    let e = errors(&[("00_shared.wgsl", SHARED), ("01_k.wgsl", &file)]);
    let (_, line, text) = one(&e);
    assert_eq!(line, 1, "{text}");
    assert!(!text.contains("in the variant without"), "it is in every variant: {text}");
    // An error in a branch two variants share (without cooperative matrices, with and without
    // subgroups): once, naming both.
    let file = kernel(
        "k",
        "x[0] = 1u;\n//#if subgroups\nx[1] = subgroupAdd(1u);\n//#endif\n//#if !coop\nx[2] = 1.5;\n//#endif\n",
    );
    let e = errors(&[("00_shared.wgsl", SHARED), ("01_k.wgsl", &file)]);
    let (_, line, text) = one(&e);
    assert_eq!(line, 8, "{text}");
    assert_eq!(text.matches("in the variant without").count(), 2, "{text}");
}

#[test]
fn mismatched_cooperative_matrices_are_an_error() {
    let k = "// --- KERNEL: k ---\n\
             @group(0) @binding(0) var<storage, read_write> x: array<f32>;\n\
             @compute @workgroup_size(64) fn k() {\n\
             let a = coopLoad<coop_mat16x16<f32,A>>(&x[0], 16u);\n\
             let b = coopLoad<coop_mat8x8<f32,B>>(&x[0], 8u);\n\
             let c = coopLoad<coop_mat16x16<f32,C>>(&x[0], 16u);\n\
             let d = coopMultiplyAdd(a, b, c);\n\
             coopStore(d, &x[0], 16u);\n\
             }\n";
    let (_, line, text) = one(&errors(&[("00_shared.wgsl", SHARED), ("01_k.wgsl", k)]));
    assert_eq!(line, 7, "{text}");
    assert!(text.contains("mismatched operands: A has 16 columns but B has 8 rows"), "{text}");
    assert!(text.contains("B has 8 columns but C has 16"), "{text}");
}

#[test]
fn names_rust_reads_as_one_are_errors_at_the_second() {
    let (nfc, nfd) = ("caf\u{e9}", "cafe\u{301}");
    let cases = [
        (
            format!(
                "@group(0) @binding(0) var<storage, read_write> {nfc}: array<u32>;\n\
                 @group(0) @binding(1) var<storage, read_write> {nfd}: array<u32>;\n\
                 @compute @workgroup_size(1) fn k() {{ {nfc}[0] = 1u; {nfd}[0] = 2u; }}\n"
            ),
            "binding",
            3,
        ),
        (
            format!(
                "struct {nfc} {{ a: u32 }}\nstruct {nfd} {{ b: u32 }}\n\
                 @group(0) @binding(0) var<uniform> p: {nfc};\n@group(0) @binding(1) var<uniform> q: {nfd};\n\
                 @group(0) @binding(2) var<storage, read_write> x: array<u32>;\n\
                 @compute @workgroup_size(1) fn k() {{ x[0] = p.a + q.b; }}\n"
            ),
            "struct",
            3,
        ),
        (
            format!(
                "override {nfc}: u32 = 1u;\noverride {nfd}: u32 = 2u;\n\
                 @group(0) @binding(0) var<storage, read_write> x: array<u32>;\n\
                 @compute @workgroup_size(1) fn k() {{ x[0] = {nfc} + {nfd}; }}\n"
            ),
            "override",
            3,
        ),
        (
            format!(
                "struct P {{ {nfc}: u32, {nfd}: u32 }}\n@group(0) @binding(0) var<uniform> p: P;\n\
                 @group(0) @binding(1) var<storage, read_write> x: array<u32>;\n\
                 @compute @workgroup_size(1) fn k() {{ x[0] = p.{nfc} + p.{nfd}; }}\n"
            ),
            "`P` field",
            2,
        ),
    ];
    for (body, what, line) in cases {
        let k = format!("// --- KERNEL: k ---\n{body}");
        let (_, at, text) = one(&errors(&[("00_shared.wgsl", ""), ("01_k.wgsl", &k)]));
        assert!(text.contains(&format!("{what} `{nfd}` and {what} `{nfc}` are one name")), "{text}");
        assert!(text.contains("cafe\\u{301}"), "the spelling is shown: {text}");
        assert_eq!(at, line, "{text}");
    }
    // A constant of the file preamble and a kernel.
    let k = format!("const {nfd}: u32 = 1u;\n{}", kernel(nfc, &format!("x[0] = {nfd};")));
    let (_, line, text) = one(&errors(&[("00_shared.wgsl", SHARED), ("01_k.wgsl", &k)]));
    assert_eq!(line, 1, "{text}");
    assert!(text.contains(&format!("constant `{nfd}` and kernel `{nfc}` are one name")), "{text}");
}

#[test]
fn a_workgroup_size_from_an_expression_of_overrides_is_refused_at_the_attribute() {
    let k = "// --- KERNEL: k ---\n\
             override X: u32 = 8u;\n\
             @group(0) @binding(0) var<storage, read_write> x: array<f32>;\n\
             @compute\n\
             @workgroup_size(X * 2u)\n\
             fn k() { x[0] = 1.0; }\n";
    let (_, line, text) = one(&errors(&[("00_shared.wgsl", SHARED), ("01_k.wgsl", k)]));
    assert_eq!(line, 5, "{text}");
    assert!(text.contains("@workgroup_size(X * 2u)") && text.contains("an expression of overrides"), "{text}");
}

#[test]
fn immediates_past_what_naga_takes_are_refused_at_the_declaration() {
    let k = "// --- KERNEL: k ---\n\
             struct Many { m: array<mat4x4<f32>, 8> }\n\
             var<immediate> many: Many;\n\
             @group(0) @binding(0) var<storage, read_write> x: array<f32>;\n\
             @compute @workgroup_size(1) fn k() { x[0] = many.m[0][0].x; }\n";
    let (_, line, text) = one(&errors(&[("00_shared.wgsl", SHARED), ("01_k.wgsl", k)]));
    assert_eq!(line, 3, "{text}");
    assert!(text.contains("`var<immediate>` of 512 bytes: naga 30 takes at most 256"), "{text}");
}
