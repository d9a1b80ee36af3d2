//! `//#include "path"`: shared WGSL beyond the one shared preamble. Each file is inserted at
//! most once per kernel, errors inside included text point into the included file, and every
//! file read is tracked for rebuilds.

mod common;

use common::{compile_in, dir};
use kernels_codegen::compile::File;

fn errors(f: &File) -> Vec<String> {
    f.all_errors().map(|d| d.render()).collect()
}

const SHARED: &str = "const WG: u32 = 64u;\n";

/// An algorithm written once, calling hooks each kernel defines.
const ALGORITHM: &str = "// The shared body: each kernel defines `load` and `store`.
fn run(i: u32) {
    store(i, 2.0 * load(i));
}
";

#[test]
fn an_algorithm_included_by_two_kernels_with_their_own_hooks() {
    let kernel = "// --- KERNEL: double ---
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
fn load(i: u32) -> f32 { return x[i]; }
fn store(i: u32, v: f32) { x[i] = v; }
//#include \"lib/algorithm.wgsl\"
@compute @workgroup_size(WG)
fn double(@builtin(global_invocation_id) g: vec3<u32>) { run(g.x); }

// --- KERNEL: double_into ---
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
fn load(i: u32) -> f32 { return x[i]; }
fn store(i: u32, v: f32) { y[i] = v; }
//#include \"lib/algorithm.wgsl\"
@compute @workgroup_size(WG)
fn double_into(@builtin(global_invocation_id) g: vec3<u32>) { run(g.x); }
";
    let d = dir(&[("00_shared.wgsl", SHARED), ("lib/algorithm.wgsl", ALGORITHM), ("01_k.wgsl", kernel)]);
    let f = compile_in(&d, "01_k.wgsl");
    assert!(errors(&f).is_empty(), "{:#?}", errors(&f));
    for k in &f.kernels {
        let wgsl = &k.variants[0].wgsl;
        assert_eq!(wgsl.matches("fn run(").count(), 1, "{wgsl}");
        assert!(
            wgsl.contains("//#include \"lib/algorithm.wgsl\"\n// The shared body"),
            "inserted after its line:\n{wgsl}"
        );
    }
    assert_eq!(f.kernels[1].interface.as_ref().unwrap().bindings.len(), 2);
    // Every file read is tracked, the included one too.
    assert!(f.read.iter().any(|p| p.ends_with("lib/algorithm.wgsl")), "{:?}", f.read);
    let tokens = kernels_codegen::expand::expand(&f, proc_macro2::Span::call_site(), &syn::parse_quote!(::kernels));
    assert!(tokens.to_string().contains("algorithm.wgsl"), "an include_str! for the included file");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_file_is_inserted_once_per_kernel_and_includes_nest() {
    // The file preamble and a section both include `common`; `common` includes `consts`,
    // which the shared preamble includes too.
    let d = dir(&[
        ("00_shared.wgsl", "//#include \"lib/consts.wgsl\"\n"),
        ("lib/consts.wgsl", "const HALF: f32 = 0.5;\n"),
        ("lib/common.wgsl", "//#include \"consts.wgsl\"\nfn half(v: f32) -> f32 { return v * HALF; }\n"),
        (
            "01_k.wgsl",
            "//#include \"lib/common.wgsl\"\n// --- KERNEL: k ---\n//#include \"lib/common.wgsl\"\n\
             @group(0) @binding(0) var<storage, read_write> x: array<f32>;\n\
             @compute @workgroup_size(1) fn k() { x[0] = half(x[0]); }\n",
        ),
    ]);
    let f = compile_in(&d, "01_k.wgsl");
    assert!(errors(&f).is_empty(), "{:#?}", errors(&f));
    let wgsl = &f.kernels[0].variants[0].wgsl;
    assert_eq!(wgsl.matches("const HALF").count(), 1, "{wgsl}");
    assert_eq!(wgsl.matches("fn half").count(), 1, "{wgsl}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn errors_inside_included_text_point_into_the_included_file() {
    let broken = "fn helper(v: f32) -> f32 {\n    return v * 2.0\n}\n";
    let d = dir(&[
        ("00_shared.wgsl", SHARED),
        ("lib/broken.wgsl", broken),
        (
            "01_k.wgsl",
            "// --- KERNEL: k ---\n//#include \"lib/broken.wgsl\"\n\
             @group(0) @binding(0) var<storage, read_write> x: array<f32>;\n\
             @compute @workgroup_size(1) fn k() { x[0] = helper(x[0]); }\n",
        ),
    ]);
    let f = compile_in(&d, "01_k.wgsl");
    let e: Vec<_> = f.all_errors().collect();
    assert_eq!(e.len(), 1, "{e:#?}");
    let loc = e[0].location.as_ref().unwrap();
    assert_eq!(loc.file, "lib/broken.wgsl");
    assert_eq!((loc.line, loc.column), (3, 1), "{}", e[0].render());
    // A validation error in included text too.
    std::fs::write(d.join("lib/broken.wgsl"), "fn helper(v: f32) -> f32 {\n    return v * true;\n}\n").unwrap();
    let f = compile_in(&d, "01_k.wgsl");
    let e: Vec<_> = f.all_errors().collect();
    assert_eq!(e.len(), 1, "{e:#?}");
    let loc = e[0].location.as_ref().unwrap();
    assert_eq!((loc.file.as_str(), loc.line), ("lib/broken.wgsl", 2), "{}", e[0].render());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn include_errors_are_at_the_include_line() {
    let kernel = |include: &str| {
        format!(
            "// --- KERNEL: k ---\n{include}\n@group(0) @binding(0) var<storage, read_write> x: array<f32>;\n\
             @compute @workgroup_size(1) fn k() {{ x[0] = 1.0; }}\n"
        )
    };
    // A missing file.
    let d = dir(&[("00_shared.wgsl", SHARED), ("01_k.wgsl", &kernel("//#include \"nope.wgsl\""))]);
    let f = compile_in(&d, "01_k.wgsl");
    let e: Vec<_> = f.all_errors().collect();
    assert_eq!(e.len(), 1);
    assert!(e[0].message.contains("cannot read included file `nope.wgsl`"), "{}", e[0].render());
    assert_eq!(e[0].location.as_ref().unwrap().line, 2);
    // A malformed line.
    std::fs::write(d.join("01_k.wgsl"), kernel("//#include nope.wgsl")).unwrap();
    let f = compile_in(&d, "01_k.wgsl");
    assert!(f.all_errors().any(|e| e.message.contains("malformed include")), "{:#?}", errors(&f));
    // A cycle: a → b → a, reported at the line that closes it.
    std::fs::write(d.join("a.wgsl"), "//#include \"b.wgsl\"\n").unwrap();
    std::fs::write(d.join("b.wgsl"), "fn b() {}\n//#include \"a.wgsl\"\n").unwrap();
    std::fs::write(d.join("01_k.wgsl"), kernel("//#include \"a.wgsl\"")).unwrap();
    let f = compile_in(&d, "01_k.wgsl");
    let e: Vec<_> = f.all_errors().collect();
    assert_eq!(e.len(), 1, "{e:#?}");
    assert!(e[0].message.contains("include cycle"));
    let loc = e[0].location.as_ref().unwrap();
    assert_eq!((loc.file.as_str(), loc.line), ("b.wgsl", 2));
    assert!(e[0].notes[0].contains("`a.wgsl` → `b.wgsl` → `a.wgsl`"), "{:?}", e[0].notes);
    // Markers and `enable` directives are not allowed in included files.
    std::fs::write(d.join("a.wgsl"), "enable f16;\n// --- KERNEL: sneaky ---\n").unwrap();
    let f = compile_in(&d, "01_k.wgsl");
    let e = errors(&f);
    assert_eq!(e.len(), 2, "{e:#?}");
    assert!(e.iter().any(|e| e.contains("must not contain kernel markers") && e.contains("a.wgsl:2:1")), "{e:#?}");
    assert!(e.iter().any(|e| e.contains("`enable` directive") && e.contains("a.wgsl:1:1")), "{e:#?}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn included_files_take_part_in_variants() {
    // An included file with a subgroup form and a portable form; an include inside an inactive
    // branch includes nothing in that variant.
    let d = dir(&[
        ("00_shared.wgsl", SHARED),
        (
            "lib/sum.wgsl",
            "//#if subgroups\nfn total(v: f32) -> f32 { return subgroupAdd(v); }\n//#else\nfn total(v: f32) -> f32 { return v; }\n//#endif\n",
        ),
        ("lib/extra.wgsl", "fn extra() -> f32 { return 1.0; }\n"),
        (
            "01_k.wgsl",
            "// --- KERNEL: k ---\n//#include \"lib/sum.wgsl\"\n//#if !subgroups\n//#include \"lib/extra.wgsl\"\n//#endif\n\
             @group(0) @binding(0) var<storage, read_write> x: array<f32>;\n\
             @compute @workgroup_size(64) fn k(@builtin(local_invocation_index) i: u32) {\n    x[i] = total(x[i]);\n\
             //#if !subgroups\n    x[i] += extra();\n//#endif\n}\n",
        ),
    ]);
    let f = compile_in(&d, "01_k.wgsl");
    assert!(errors(&f).is_empty(), "{:#?}", errors(&f));
    let v = &f.kernels[0].variants;
    assert_eq!(v.len(), 2);
    assert!(v[0].subgroups && v[0].wgsl.contains("subgroupAdd") && !v[0].wgsl.contains("fn extra"));
    assert!(!v[1].subgroups && !v[1].wgsl.contains("subgroupAdd") && v[1].wgsl.contains("fn extra"));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn the_guide_include_example_builds_as_it_says() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/guide/writing-kernels.md")).unwrap();
    let lib_at = readme.find("// file: lib/scale_body.wgsl").expect("the guide shows the include example");
    let kernel_at = lib_at + readme[lib_at..].find("// file: 01_scale.wgsl").unwrap();
    let end = kernel_at + readme[kernel_at..].find("```").unwrap();
    let d = dir(&[
        ("00_shared.wgsl", SHARED),
        ("lib/scale_body.wgsl", &readme[lib_at..kernel_at]),
        ("01_scale.wgsl", &readme[kernel_at..end]),
    ]);
    let f = compile_in(&d, "01_scale.wgsl");
    assert!(errors(&f).is_empty(), "{:#?}", errors(&f));
    assert_eq!(f.kernels.len(), 1);
    assert!(f.kernels[0].variants[0].wgsl.contains("fn scale_all"));
    let _ = std::fs::remove_dir_all(&d);
}
