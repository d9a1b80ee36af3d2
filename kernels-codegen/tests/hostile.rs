//! Strange input (issue 11): errors at the right place, names that break nothing, no panics.

mod common;

use common::{compile_in, dir};
use kernels_codegen::diagnostic::Diagnostic;
use kernels_codegen::source::Location;

/// Compiles `kernel` with `shared` as `00_shared.wgsl`; the errors as the user sees them.
fn errors_of(shared: &str, kernel: &str) -> Vec<Diagnostic> {
    let d = dir(&[("00_shared.wgsl", shared), ("01_k.wgsl", kernel)]);
    let f = compile_in(&d, "01_k.wgsl");
    let _ = std::fs::remove_dir_all(&d);
    Diagnostic::merge(f.all_errors().cloned())
}

fn at(d: &Diagnostic) -> (&str, usize, &str) {
    let l: &Location = d.location.as_ref().unwrap_or_else(|| panic!("no location: {}", d.render()));
    (l.file.as_str(), l.line, l.line_text.trim())
}

const SHARED: &str = "const WG: u32 = 64u;\n";
const BINDING: &str = "@group(0) @binding(0) var<storage, read_write> x: array<u32>;\n";

fn kernel(name: &str, body: &str) -> String {
    format!("// --- KERNEL: {name} ---\n{BINDING}@compute @workgroup_size(WG) fn {name}() {{ {body} }}\n")
}

#[test]
fn d5_a_wrong_return_is_reported_where_it_is() {
    let bad = "fn bad() -> u32 { return 1.5; }\n";
    // In a section: at the return value, not at the marker.
    let e = errors_of(SHARED, &kernel("k", "x[0] = bad();").replace("@compute", &format!("{bad}@compute")));
    assert_eq!(e.len(), 1, "{e:#?}");
    assert_eq!(at(&e[0]), ("01_k.wgsl", 3, bad.trim()), "{}", e[0].render());
    assert!(e[0].render().contains("1.5"));
    // In the file preamble, used by two kernels: once, at the preamble line, naming both.
    let file = format!("{bad}{}{}", kernel("a", "x[0] = bad();"), kernel("b", "x[1] = bad();"));
    let e = errors_of(SHARED, &file);
    assert_eq!(e.len(), 1, "{e:#?}");
    assert_eq!(at(&e[0]), ("01_k.wgsl", 1, bad.trim()));
    assert!(e[0].render().starts_with("kernels `a` and `b`:"), "{}", e[0].render());
    // In the file preamble, used by no kernel: still checked, once.
    let file = format!("{bad}{}{}", kernel("a", "x[0] = 1u;"), kernel("b", "x[1] = 2u;"));
    let e = errors_of(SHARED, &file);
    assert_eq!(e.len(), 1, "{e:#?}");
    assert_eq!(at(&e[0]), ("01_k.wgsl", 1, bad.trim()));
    // In the shared preamble: in that file.
    let e = errors_of(&format!("{SHARED}{bad}"), &kernel("k", "x[0] = bad();"));
    assert_eq!(e.len(), 1, "{e:#?}");
    assert_eq!(at(&e[0]), ("00_shared.wgsl", 2, bad.trim()));
}

#[test]
fn errors_without_a_span_of_their_own_go_to_the_declaration() {
    // A zero workgroup size: at the entry point.
    let e = errors_of(SHARED, &kernel("k", "x[0] = 1u;").replace("@workgroup_size(WG)", "@workgroup_size(0)"));
    assert_eq!(e.len(), 1, "{e:#?}");
    assert!(at(&e[0]).2.contains("fn k"), "{}", e[0].render());
    // A binding of f32 atomics (a capability kernels do not get): at its declaration.
    let file = kernel("k", "x[0] = u32(atomicLoad(&y[0]));")
        .replace("@compute", "@group(0) @binding(1) var<storage, read_write> y: array<atomic<f32>>;\n@compute");
    let e = errors_of(SHARED, &file);
    assert_eq!(e.len(), 1, "{e:#?}");
    assert!(at(&e[0]).2.contains("array<atomic<f32>>"), "{}", e[0].render());
    // A fixed array too large to lay out: at the variable.
    let file =
        kernel("k", "x[0] = u32(big[0]);").replace("@compute", "var<private> big: array<f32, 1000000000>;\n@compute");
    let e = errors_of(SHARED, &file);
    assert_eq!(e.len(), 1, "{e:#?}");
    assert!(at(&e[0]).2.contains("var<private> big"), "{}", e[0].render());
    // A multisampled texture and a binding outside group 0: at their declarations (from
    // reflection).
    let file = kernel("k", "x[0] = u32(textureLoad(t, vec2<i32>(0), 0).x);")
        .replace("@compute", "@group(0) @binding(1) var t: texture_multisampled_2d<f32>;\n@compute");
    let e = errors_of(SHARED, &file);
    assert_eq!(e.len(), 1, "{e:#?}");
    assert!(at(&e[0]).2.contains("texture_multisampled_2d"), "{}", e[0].render());
    assert!(e[0].message.contains("multisampled texture"), "{}", e[0].message);
    let file = kernel("k", "x[0] = y[0];")
        .replace("@compute", "@group(1) @binding(0) var<storage, read_write> y: array<u32>;\n@compute");
    let e = errors_of(SHARED, &file);
    assert_eq!(e.len(), 1, "{e:#?}");
    assert!(at(&e[0]).2.contains("@group(1)"), "{}", e[0].render());
}

#[test]
fn a_missing_brace_at_the_end_of_the_shared_preamble_is_reported_there() {
    let shared = "const WG: u32 = 64u;\nfn helper() -> u32 {\n    return 1u;\n";
    let e = errors_of(shared, &kernel("k", "x[0] = helper();"));
    assert_eq!(e.len(), 1, "{e:#?}");
    assert_eq!(at(&e[0]).0, "00_shared.wgsl");
    assert_eq!(at(&e[0]).1, 2);
    assert!(e[0].message.contains("unclosed `{`"), "{}", e[0].render());
}

#[test]
fn an_f16_helper_a_kernel_never_calls_does_not_make_it_need_f16() {
    let shared = "const WG: u32 = 64u;\nfn half(v: f32) -> f16 { return f16(v); }\n";
    let file = format!("{}{}", kernel("plain", "x[0] = 1u;"), kernel("halves", "x[0] = u32(half(2.0));"));
    let d = dir(&[("00_shared.wgsl", shared), ("01_k.wgsl", &file)]);
    let f = compile_in(&d, "01_k.wgsl");
    let _ = std::fs::remove_dir_all(&d);
    assert_eq!(f.all_errors().count(), 0);
    let plain = &f.kernels[0].variants[0];
    assert!(!plain.f16 && !plain.wgsl.contains("enable f16") && !plain.wgsl.contains("fn half"), "{}", plain.wgsl);
    let halves = &f.kernels[1].variants[0];
    assert!(halves.f16 && halves.wgsl.starts_with("enable f16;\n"));
}

#[test]
fn a_second_entry_point_is_an_error() {
    let file = kernel("k", "x[0] = 1u;")
        .replace("@compute", "@compute @workgroup_size(1) fn stray() { x[1] = 2u; }\n@compute");
    let e = errors_of(SHARED, &file);
    assert_eq!(e.len(), 1, "{e:#?}");
    assert!(e[0].message.contains("a second entry point, `stray`"), "{}", e[0].render());
    assert!(at(&e[0]).2.contains("fn stray"));
}

#[test]
fn a_misspelled_annotation_is_an_error() {
    for (line, want) in
        [("// @require len(x) >= 1", "did you mean `@requires`?"), ("// @grd threads(1)", "did you mean `@grid`?")]
    {
        let file = kernel("k", "x[0] = 1u;").replace(BINDING, &format!("{line}\n{BINDING}"));
        let e = errors_of(SHARED, &file);
        assert_eq!(e.len(), 1, "{e:#?}");
        assert!(e[0].message.starts_with("unknown annotation"), "{}", e[0].render());
        assert_eq!(e[0].label, want);
        assert_eq!(at(&e[0]).1, 2);
    }
}

#[test]
fn a_byte_order_mark_before_the_first_marker_is_fine() {
    let file = format!("\u{feff}{}", kernel("k", "x[0] = 1u;"));
    assert!(errors_of(SHARED, &file).is_empty());
    let e = errors_of(&format!("\u{feff}{SHARED}"), &format!("\u{feff}{}", kernel("k", "x[0] = 2.0;")));
    assert_eq!(at(&e[0]).1, 3, "lines count as without the mark");
}
