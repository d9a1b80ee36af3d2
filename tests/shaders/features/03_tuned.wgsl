// Workgroup sizes from overrides (users tune them per device), immediates, and a render
// pipeline's shaders beside a compute kernel.

// --- KERNEL: iota ---
// x[i] = i for every element, with a workgroup size the caller may set.
// @grid threads(len(x))
override BLOCK: u32 = 64u;
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@compute @workgroup_size(BLOCK)
fn iota(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < arrayLength(&x)) {
        x[gid.x] = f32(gid.x);
    }
}

// --- KERNEL: iota_required ---
// As `iota`, with a workgroup size every call must give.
// @grid threads(len(x))
override SIZE: u32;
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@compute @workgroup_size(SIZE)
fn iota_required(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < arrayLength(&x)) {
        x[gid.x] = f32(gid.x);
    }
}

// --- KERNEL: affine ---
// y[i] = push.scale · i + push.offset, the two numbers passed as immediates.
// @grid threads(len(y))
struct Push {
    scale: f32,
    offset: f32,
}
var<immediate> push: Push;
@group(0) @binding(0) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(WG)
fn affine(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < arrayLength(&y)) {
        y[gid.x] = push.scale * f32(gid.x) + push.offset;
    }
}

// --- KERNEL: life ---
// One step of Conway's game of life on a torus (after webgpu-samples' game of life, whose file
// also holds the vertex and fragment shaders that draw the cells).
// @grid workgroups(ceil_div(size.x, 8), ceil_div(size.y, 8))
@group(0) @binding(0) var<uniform> size: vec2<u32>;
@group(0) @binding(1) var<storage, read> current: array<u32>;
@group(0) @binding(2) var<storage, read_write> next: array<u32>;
fn cell(x: i32, y: i32) -> u32 {
    let w = i32(size.x);
    let h = i32(size.y);
    return current[u32((y + h) % h) * size.x + u32((x + w) % w)];
}
@compute @workgroup_size(8, 8)
fn life(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x >= size.x || gid.y >= size.y) {
        return;
    }
    let x = i32(gid.x);
    let y = i32(gid.y);
    var n = 0u;
    for (var dy = -1; dy <= 1; dy++) {
        for (var dx = -1; dx <= 1; dx++) {
            if (dx != 0 || dy != 0) {
                n += cell(x + dx, y + dy);
            }
        }
    }
    let alive = cell(x, y) == 1u;
    next[gid.y * size.x + gid.x] = select(u32(n == 3u), u32(n == 2u || n == 3u), alive);
}

struct Out {
    @builtin(position) pos: vec4<f32>,
    @location(0) cell: f32,
}
@vertex
fn vert_main(@builtin(instance_index) i: u32, @location(0) corner: vec2<u32>) -> Out {
    let c = vec2<f32>(f32(i % size.x), f32(i / size.x));
    let at = (c + vec2<f32>(corner)) / vec2<f32>(size) * 2.0 - 1.0;
    return Out(vec4<f32>(at, 0.0, 1.0), f32(current[i]));
}
@fragment
fn frag_main(v: Out) -> @location(0) vec4<f32> {
    return vec4<f32>(v.cell);
}

// --- KERNEL: many_immediates ---
// out[0] = the sum of 64 immediate values (256 bytes, the most naga takes: more than the
// 128 bytes of max_immediate_size Vulkan guarantees).
// @requires len(out) >= 1
struct Many {
    m: array<mat4x4<f32>, 4>,
}
var<immediate> many: Many;
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(1)
fn many_immediates() {
    var s = 0.0;
    for (var i = 0u; i < 4u; i++) {
        let m = many.m[i];
        s += dot(m[0] + m[1] + m[2] + m[3], vec4<f32>(1.0));
    }
    out[0] = s;
}

// --- KERNEL: scaled_iota ---
// x[i] = STEP · i + OFFSET, STEP an override with a pipeline id (wgpu's key is the id, not the
// name), OFFSET one declared over two lines, as WGSL's free layout allows.
// @grid threads(len(x))
@id(7) override STEP: f32 = 1.0;
override
    OFFSET : f32 = 0.0;
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@compute @workgroup_size(64)
fn scaled_iota(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < arrayLength(&x)) {
        x[gid.x] = STEP * f32(gid.x) + OFFSET;
    }
}
