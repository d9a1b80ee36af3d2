// Boids (after webgpu-samples' compute boids): particles in a struct ending in a runtime-sized
// array, with a count before it.

struct Particle {
    pos: vec2<f32>,
    vel: vec2<f32>,
}

struct SimParams {
    delta_t: f32,
    rule1_distance: f32,
    rule2_distance: f32,
    rule3_distance: f32,
    rule1_scale: f32,
    rule2_scale: f32,
    rule3_scale: f32,
}

struct Particles {
    count: u32,
    particles: array<Particle>,
}

// --- KERNEL: boids ---
// One step of the flock: cohesion toward the centre of mass within `rule1_distance`,
// separation from those within `rule2_distance`, alignment with the velocities within
// `rule3_distance`; speed clamped to 0.1. Reads `src.count` particles of `src`, writes as many
// to `dst` and `dst.count`.
// @grid threads(len(dst))
// @requires len(src) >= len(dst)
@group(0) @binding(0) var<uniform> params: SimParams;
@group(0) @binding(1) var<storage, read> src: Particles;
@group(0) @binding(2) var<storage, read_write> dst: Particles;
@compute @workgroup_size(WG)
fn boids(@builtin(global_invocation_id) gid: vec3<u32>) {
    let n = min(src.count, arrayLength(&dst.particles));
    let i = gid.x;
    if (i >= n) {
        return;
    }
    var pos = src.particles[i].pos;
    var vel = src.particles[i].vel;
    var mass = vec2<f32>(0.0);
    var mass_count = 0u;
    var away = vec2<f32>(0.0);
    var align = vec2<f32>(0.0);
    var align_count = 0u;
    for (var j = 0u; j < n; j++) {
        if (j == i) {
            continue;
        }
        let p = src.particles[j].pos;
        let d = distance(p, pos);
        if (d < params.rule1_distance) {
            mass += p;
            mass_count++;
        }
        if (d < params.rule2_distance) {
            away -= p - pos;
        }
        if (d < params.rule3_distance) {
            align += src.particles[j].vel;
            align_count++;
        }
    }
    if (mass_count > 0u) {
        mass = mass / f32(mass_count) - pos;
    }
    if (align_count > 0u) {
        align /= f32(align_count);
    }
    vel += mass * params.rule1_scale + away * params.rule2_scale + align * params.rule3_scale;
    vel = normalize(vel) * clamp(length(vel), 0.0, 0.1);
    pos += vel * params.delta_t;
    dst.particles[i] = Particle(pos, vel);
    if (i == 0u) {
        dst.count = n;
    }
}

// --- KERNEL: scale_all ---
// Multiplies every element of a struct-wrapped array (no other member: bound as the array).
// @grid threads(len(values))
struct Wrapped {
    items: array<f32>,
}
@group(0) @binding(0) var<storage, read_write> values: Wrapped;
@group(0) @binding(1) var<uniform> factor: f32;
@compute @workgroup_size(WG)
fn scale_all(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < arrayLength(&values.items)) {
        values.items[gid.x] *= factor;
    }
}
