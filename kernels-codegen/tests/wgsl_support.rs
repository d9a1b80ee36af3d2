//! WGSL as people write it, through the compile stage: files that also hold a render
//! pipeline's entry points, 64-bit types, immediates, workgroup sizes from overrides, structs
//! ending in runtime-sized arrays, textures and samplers. What the generated code does with
//! them on a GPU is tested in the root crate's `tests/wgsl_features.rs`.

mod common;

use common::{compile_in, dir};
use kernels_codegen::compile::File;
use kernels_codegen::diagnostic::Diagnostic;

fn compile(shared: &str, kernel: &str) -> File {
    let d = dir(&[("00_shared.wgsl", shared), ("01_k.wgsl", kernel)]);
    let f = compile_in(&d, "01_k.wgsl");
    let _ = std::fs::remove_dir_all(&d);
    f
}

fn errors(f: &File) -> Vec<String> {
    Diagnostic::merge(f.all_errors().cloned()).iter().map(Diagnostic::render).collect()
}

#[track_caller]
fn clean(f: &File) {
    let e = errors(f);
    assert!(e.is_empty(), "{}", e.join("\n\n"));
}

/// A compute kernel beside a render pipeline's shaders, in the preamble and in its section.
const RENDER_AND_COMPUTE: &str = "\
struct VertexOut { @builtin(position) pos: vec4<f32>, @location(0) uv: vec2<f32> }
@group(0) @binding(0) var<storage, read_write> cells: array<u32>;
@group(0) @binding(1) var tex: texture_2d<f32>;
@group(0) @binding(2) var samp: sampler;
// Only the fragment shader uses it (`textureSample` is not allowed in compute).
fn shade(uv: vec2<f32>) -> vec4<f32> { return textureSample(tex, samp, uv); }
fn corner(i: u32) -> vec2<f32> { return vec2<f32>(f32(i & 1u), f32(i >> 1u)); }
@vertex fn vs(@builtin(vertex_index) i: u32) -> VertexOut {
    return VertexOut(vec4<f32>(corner(i), 0.0, 1.0), corner(i));
}
@fragment fn fs(v: VertexOut) -> @location(0) vec4<f32> { return shade(v.uv); }

// --- KERNEL: step ---
fn alive(i: u32) -> bool { return cells[i] != 0u; }
// Only the section's vertex shader uses it.
fn lift(p: vec2<f32>) -> vec4<f32> { return vec4<f32>(p, 0.0, 1.0); }
@vertex fn vs2(@builtin(vertex_index) i: u32) -> @builtin(position) vec4<f32> { return lift(corner(i)); }
@compute @workgroup_size(64)
fn step(@builtin(global_invocation_id) g: vec3<u32>) {
    if (g.x < arrayLength(&cells) && alive(g.x)) { cells[g.x] = 2u; }
}
";

#[test]
fn entry_points_of_other_stages_are_left_out_with_what_only_they_use() {
    let f = compile("", RENDER_AND_COMPUTE);
    clean(&f);
    let k = &f.kernels[0];
    let wgsl = &k.variants[0].wgsl;
    for gone in ["fn vs(", "fn fs(", "fn vs2(", "fn shade(", "fn lift(", "textureSample", "struct VertexOut"] {
        assert!(!wgsl.contains(gone), "`{gone}` is in the kernel's source:\n{wgsl}");
    }
    for kept in ["fn alive(", "fn step(", "var<storage, read_write> cells"] {
        assert!(wgsl.contains(kept), "`{kept}` is not in the kernel's source:\n{wgsl}");
    }
    // `corner` is used by both vertex shaders only: left out too.
    assert!(!wgsl.contains("fn corner("), "{wgsl}");
    let names: Vec<&str> = k.interface.as_ref().unwrap().bindings.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names, ["cells"]);
}

#[test]
fn a_helper_shared_by_a_kernel_and_a_vertex_shader_stays() {
    let src = RENDER_AND_COMPUTE.replace("alive(g.x)) {", "alive(g.x) && corner(g.x).x >= 0.0) {");
    let f = compile("", &src);
    clean(&f);
    assert!(f.kernels[0].variants[0].wgsl.contains("fn corner("));
}

/// The feature test files of the root crate (`tests/shaders/features`) compile cleanly, with
/// the interfaces their tests rely on.
#[test]
fn the_feature_test_files_compile() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/shaders/features");
    let site = kernels_codegen::CallSite { manifest_dir: Some(root.clone()), calling_file: None };
    let mut files = Vec::new();
    for name in ["01_boids.wgsl", "02_image.wgsl", "03_tuned.wgsl", "04_wide.wgsl"] {
        let f = kernels_codegen::compile::compile(&site, name, &kernels_codegen::input::Shared::Default, None);
        clean(&f);
        files.push(f);
    }
    let boids = &files[0].kernels[0];
    let dst = &boids.interface.as_ref().unwrap().bindings[2];
    assert_eq!((dst.offset, dst.stride, dst.header.is_some()), (8, 16, true), "a header padded to the array's offset");
    let wrapped = &files[0].kernels[1].interface.as_ref().unwrap().bindings[0];
    assert_eq!((wrapped.offset, wrapped.header.is_none()), (0, true), "a struct of the array alone is the array");
    let blur = files[1].kernels[0].interface.as_ref().unwrap();
    assert_eq!(blur.resources.len(), 3);
    let iota = files[2].kernels[0].interface.as_ref().unwrap();
    assert_eq!((iota.workgroup_size, iota.workgroup_size_overrides[0].as_deref()), ([64, 1, 1], Some("BLOCK")));
    let required = files[2].kernels[1].interface.as_ref().unwrap();
    assert_eq!(required.workgroup_size[0], 0, "no default");
    let affine = files[2].kernels[2].interface.as_ref().unwrap();
    assert_eq!(affine.immediate.as_ref().map(|i| i.size), Some(8));
    assert_eq!(files[2].kernels[2].variants[0].features, ["IMMEDIATES"]);
    assert!(files[2].kernels[2].variants[0].browser_wgsl.is_empty(), "native only");
    assert_eq!(files[3].kernels[0].variants[0].features, ["SHADER_INT64", "SHADER_F64"]);
    assert_eq!(files[3].kernels[1].variants[0].features, ["SHADER_INT64", "SHADER_INT64_ATOMIC_MIN_MAX"]);
    let scaled = files[2].kernels[5].interface.as_ref().unwrap();
    let ids = scaled.overrides.iter().map(|o| (o.name.as_str(), o.id)).collect::<Vec<_>>();
    assert_eq!(ids, [("STEP", Some(7)), ("OFFSET", None)]);
    assert_eq!(files[2].kernels[5].variants[0].overrides, ["7", "OFFSET"]);
    let life = &files[2].kernels[3].variants[0].wgsl;
    assert!(!life.contains("vert_main") && !life.contains("struct Out"), "{life}");
}

/// `subgroupBarrier()` needs wgpu's `SUBGROUP_BARRIER` beside `SUBGROUP` (native only: WebGPU
/// has no subgroup barrier), and only where the kernel reaches it.
#[test]
fn a_subgroup_barrier_is_a_native_feature() {
    let src = "\
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
var<workgroup> tile: array<f32, 64>;
fn publish(i: u32) { tile[i] = x[i]; subgroupBarrier(); }

// --- KERNEL: with_barrier ---
@compute @workgroup_size(64)
fn with_barrier(@builtin(local_invocation_index) i: u32) {
    publish(i);
    x[i] = tile[i ^ 1u];
}

// --- KERNEL: without ---
@compute @workgroup_size(64)
fn without(@builtin(local_invocation_index) i: u32) {
    x[i] = subgroupAdd(x[i]);
}
";
    let f = compile("", src);
    clean(&f);
    let with = &f.kernels[0].variants[0];
    assert_eq!(with.features, ["SUBGROUP_BARRIER"]);
    assert!(with.subgroups, "a subgroup barrier needs subgroups too");
    assert!(with.browser_wgsl.is_empty(), "native only");
    let without = &f.kernels[1].variants[0];
    assert!(without.features.is_empty() && without.subgroups, "{:?}", without.features);
}
