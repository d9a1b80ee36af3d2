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
