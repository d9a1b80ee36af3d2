//! Cooperative-matrix kernels through the macro: detection, the `enable` directives, the
//! `//#if coop` variants, the configurations each variant declares, the uniformity rule and
//! the build-time SPIR-V check. Everything here is build time: no adapter runs coop kernels.

mod common;

use kernels_codegen::compile::{File, Kernel};
use kernels_codegen::input::Shared;
use kernels_codegen::validate::{CoopConfig, CoopScalar};

/// Writes `files` into a fresh directory and compiles `kernel` there.
fn compile_files(files: &[(&str, &str)], kernel: &str, shared: Shared) -> File {
    let dir = common::dir(files);
    let out = common::compile_with(&dir, kernel, &shared);
    let _ = std::fs::remove_dir_all(&dir);
    out
}

fn one_file(text: &str) -> File {
    compile_files(&[("01_k.wgsl", text)], "01_k.wgsl", Shared::None)
}

fn kernel<'a>(f: &'a File, name: &str) -> &'a Kernel {
    f.kernels.iter().find(|k| k.name == name).unwrap_or_else(|| panic!("no kernel `{name}`"))
}

fn no_errors(f: &File) {
    let errors: Vec<String> = f.all_errors().map(|d| d.render()).collect();
    assert!(errors.is_empty(), "unexpected errors:\n{}", errors.join("\n\n"));
}

const BINDINGS: &str = "@group(0) @binding(0) var<storage, read> a: array<f16>;
@group(0) @binding(1) var<storage, read> b: array<f16>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
";

/// One 16×16 tile of C = A·B through tensor cores.
const COOP_BODY: &str = "    let ma = coopLoadT<coop_mat16x16<f16, A>>(&a[0], 16u);
    let mb = coopLoadT<coop_mat16x16<f16, B>>(&b[0], 16u);
    let mc = coopMultiplyAdd(ma, mb, coop_mat16x16<f32, C>());
    coopStoreT(mc, &c[0], 16u);
";

/// The same tile, portable.
const PORTABLE_BODY: &str = "    for (var e = lid; e < 256u; e += 32u) {
        var acc = 0.0;
        for (var k = 0u; k < 16u; k++) { acc += f32(a[(e / 16u) * 16u + k]) * f32(b[k * 16u + e % 16u]); }
        c[e] = acc;
    }
";

fn tile_kernel(name: &str, body: &str) -> String {
    format!(
        "// --- KERNEL: {name} ---\n{BINDINGS}@compute @workgroup_size(32)\nfn {name}(@builtin(local_invocation_index) lid: u32) {{\n{body}}}\n"
    )
}

const F16_F32: CoopConfig = CoopConfig { m: 16, n: 16, k: 16, ab: CoopScalar::F16, cr: CoopScalar::F32 };

#[test]
fn coop_kernel_with_fallback_gets_two_variants_and_only_it_gets_the_directives() {
    let text = format!(
        "{}{}",
        tile_kernel("tile", &format!("//#if coop\n{COOP_BODY}//#else\n{PORTABLE_BODY}//#endif\n")),
        tile_kernel("plain", PORTABLE_BODY)
    );
    let f = one_file(&text);
    no_errors(&f);
    let tile = kernel(&f, "tile");
    assert_eq!(tile.variants.len(), 2, "{:#?}", tile.variants);
    let (fast, portable) = (&tile.variants[0], &tile.variants[1]);
    // The coop variant: both directives at the very top, its configuration, no browser form.
    assert!(fast.wgsl.starts_with("enable f16;\nenable wgpu_cooperative_matrix;\n"), "{}", fast.wgsl);
    assert!(fast.wgsl.contains("coopMultiplyAdd"));
    assert_eq!(fast.coop, vec![F16_F32]);
    assert!(fast.f16);
    assert!(fast.browser_wgsl.is_empty());
    assert!(fast.conditions.coop);
    // The fallback: no coop directive or code, a browser form with `enable f16;`.
    assert!(!portable.wgsl.contains("wgpu_cooperative_matrix") && !portable.wgsl.contains("coop_mat"));
    assert!(portable.wgsl.starts_with("enable f16;\n"));
    assert!(portable.coop.is_empty() && portable.f16 && !portable.conditions.coop);
    assert_eq!(portable.browser_wgsl, portable.wgsl);
    // The other kernel of the file stays free of the coop directive.
    let plain = kernel(&f, "plain");
    assert_eq!(plain.variants.len(), 1);
    assert!(!plain.variants[0].wgsl.contains("wgpu_cooperative_matrix"));
    assert!(plain.variants[0].coop.is_empty());
}

#[test]
fn coop_kernel_without_fallback_gets_only_the_coop_variant() {
    let f = one_file(&tile_kernel("tile", COOP_BODY));
    no_errors(&f);
    let tile = kernel(&f, "tile");
    assert_eq!(tile.variants.len(), 1);
    assert_eq!(tile.variants[0].coop, vec![F16_F32]);
    assert!(tile.variants[0].browser_wgsl.is_empty());
}

#[test]
fn configurations_come_from_the_products() {
    // An f16 accumulator, and a kernel with two products of different accumulator types.
    let f16_c = COOP_BODY
        .replace("coop_mat16x16<f32, C>()", "coop_mat16x16<f16, C>()")
        .replace("coopStoreT(mc, &c[0], 16u);", "let h = mc;\n    _ = h;");
    let two = format!("{COOP_BODY}    let mh = coopMultiplyAdd(ma, mb, coop_mat16x16<f16, C>());\n    _ = mh;\n");
    let f = one_file(&format!("{}{}", tile_kernel("half", &f16_c), tile_kernel("both", &two)));
    no_errors(&f);
    let f16_f16 = CoopConfig { cr: CoopScalar::F16, ..F16_F32 };
    assert_eq!(kernel(&f, "half").variants[0].coop, vec![f16_f16]);
    assert_eq!(kernel(&f, "both").variants[0].coop, vec![f16_f16, F16_F32]);
}

#[test]
fn coop_helpers_a_kernel_does_not_reach_do_not_make_it_a_coop_kernel() {
    // A file preamble with a coop helper under `//#if coop`, called by one kernel only.
    let text = format!(
        "{BINDINGS}//#if coop\nfn tile_product() {{\n{COOP_BODY}}}\n//#endif\n\
         // --- KERNEL: fast ---\n@compute @workgroup_size(32)\nfn fast(@builtin(local_invocation_index) lid: u32) {{\n\
         //#if coop\n    tile_product();\n//#else\n    c[lid] = 0.0;\n//#endif\n}}\n\
         // --- KERNEL: other ---\n@compute @workgroup_size(32)\nfn other(@builtin(local_invocation_index) lid: u32) {{\n\
         c[lid] = f32(a[lid]);\n}}\n"
    );
    let f = one_file(&text);
    no_errors(&f);
    let fast = kernel(&f, "fast");
    assert_eq!(fast.variants.len(), 2);
    assert_eq!(fast.variants[0].coop, vec![F16_F32], "the product is reached through the helper");
    let other = kernel(&f, "other");
    assert_eq!(other.variants.len(), 1, "{:#?}", other.variants);
    assert!(other.variants[0].coop.is_empty());
    assert!(!other.variants[0].wgsl.contains("wgpu_cooperative_matrix"));
}

#[test]
fn coop_and_subgroup_conditions_combine_preferred_first() {
    let shared = "//#if subgroups\nfn total(v: f32) -> f32 { return subgroupAdd(v); }\n//#else\nfn total(v: f32) -> f32 { return v; }\n//#endif\n";
    let body = format!("//#if coop\n{COOP_BODY}//#else\n{PORTABLE_BODY}//#endif\n    c[lid] = total(c[lid]);\n");
    let f = compile_files(
        &[("00_shared.wgsl", shared), ("01_k.wgsl", &tile_kernel("tile", &body))],
        "01_k.wgsl",
        Shared::Default,
    );
    no_errors(&f);
    let v = &kernel(&f, "tile").variants;
    let needs: Vec<(bool, bool)> = v.iter().map(|v| (!v.coop.is_empty(), v.subgroups)).collect();
    assert_eq!(needs, vec![(true, true), (true, false), (false, true), (false, false)]);
    // Browser forms only for the variants without cooperative matrices.
    assert!(v[0].browser_wgsl.is_empty() && v[1].browser_wgsl.is_empty());
    assert!(v[2].browser_wgsl.contains("enable subgroups;") && !v[3].browser_wgsl.contains("enable subgroups;"));
}

#[test]
fn coop_operations_need_uniform_control_flow() {
    // A loop bounded by the invocation index: naga accepts it, the uniformity pass does not.
    let body = "    for (var i = lid; i < 2u; i++) {\n        let ma = coopLoadT<coop_mat16x16<f16, A>>(&a[0], 16u);\n        _ = ma;\n    }\n";
    let f = one_file(&tile_kernel("tile", body));
    let errors: Vec<String> = f.all_errors().map(|d| d.render()).collect();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(errors[0].contains("cooperative-matrix operation in non-uniform control flow"), "{}", errors[0]);
    assert!(errors[0].contains("coopLoadT"), "points at the load: {}", errors[0]);
    // The same loop with a uniform bound is fine.
    let f = one_file(&tile_kernel("tile", &body.replace("var i = lid", "var i = 0u")));
    no_errors(&f);
    // After a non-uniform early return: naga's own check reports it (it checks `if`s).
    let body = format!("    if (lid > 40u) {{ return; }}\n{COOP_BODY}");
    let f = one_file(&tile_kernel("tile", &body));
    assert!(f.all_errors().any(|d| d.message.contains("uniformity")), "{:?}", f.all_errors().collect::<Vec<_>>());
}

#[test]
fn spirv_check_catches_the_inline_coop_store_stride() {
    // naga 30.0.2 validates this, then panics in its SPIR-V writer ("Expression [N] is not
    // cached"): the macro must turn that into an error at the store with the fix.
    // (An inline index alone is fine in naga 30.0.2; an inline stride is not.)
    let body = COOP_BODY
        .replace("coopStoreT(mc, &c[0], 16u);", "coopStoreT(mc, &c[lid / 32u * 16u], arrayLength(&c) / 256u);");
    let text = tile_kernel("tile", &body);
    let f = one_file(&text);
    let errors: Vec<_> = f.all_errors().collect();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    let e = errors[0];
    assert!(e.message.contains("SPIR-V backend panicked") && e.message.contains("is not cached"), "{}", e.message);
    let loc = e.location.as_ref().expect("a location");
    assert!(loc.line_text.contains("coopStoreT"), "points at the store: {loc:?}");
    assert_eq!(loc.line, text.lines().position(|l| l.contains("coopStoreT")).unwrap() + 1);
    assert!(e.notes.iter().any(|n| n.contains("bind both to `let`s")), "{:?}", e.notes);
    assert!(kernel(&f, "tile").variants.is_empty());
    // Bound to `let`s first, it builds.
    let fixed = COOP_BODY.replace(
        "coopStoreT(mc, &c[0], 16u);",
        "let at = lid / 32u * 16u;\n    let ld = arrayLength(&c) / 256u;\n    coopStoreT(mc, &c[at], ld);",
    );
    no_errors(&one_file(&tile_kernel("tile", &fixed)));
}

#[test]
fn spirv_check_covers_the_fallback_too() {
    // The fallback is fine; the coop variant is not: the error names the variant it is in
    // only when it is not the preferred one.
    let bad = COOP_BODY.replace("coopStoreT(mc, &c[0], 16u);", "coopStoreT(mc, &c[0], arrayLength(&c));");
    let f = one_file(&tile_kernel("tile", &format!("//#if !coop\n{PORTABLE_BODY}//#else\n{bad}//#endif\n")));
    let errors: Vec<_> = f.all_errors().collect();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(!errors[0].notes.iter().any(|n| n.contains("in the variant without")), "{:?}", errors[0].notes);
}

#[test]
fn the_guide_coop_example_builds_as_it_says() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/guide/variants.md")).unwrap();
    let start = readme.find("// --- KERNEL: tile16 ---").expect("the guide shows the tile16 kernel");
    let end = start + readme[start..].find("```").unwrap();
    let f = one_file(&readme[start..end]);
    no_errors(&f);
    let v = &kernel(&f, "tile16").variants;
    assert_eq!(v.len(), 2);
    assert!(v[0].wgsl.starts_with("enable f16;\nenable wgpu_cooperative_matrix;\n"));
    assert_eq!(v[0].coop, vec![F16_F32]);
    assert!(v[0].browser_wgsl.is_empty());
    assert!(v[1].coop.is_empty() && !v[1].browser_wgsl.is_empty());
}
