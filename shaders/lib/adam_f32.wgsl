// The element walk of the f32-state AdamW kernels (`optimizer::adamw_update`,
// `optimizer::adamw_update_absmax`, 12_optimizer.wgsl): `lib/elementwise.wgsl`'s `ew_eight` and
// `ew_one` over bindings `p`, `g`, `m`, `v` and the clip scale `stats[1]`, all loads of a group
// issued before its stores, the step from `lib/adam.wgsl`'s `adam4`. One walk, so the two
// kernels take the same step bit for bit.
//
// Hook of the including kernel: fn put1(i: u32, x: f32, mi: f32, vi: f32, w: f32, old: f32)
// element i's stores, given its gradient x, its new moments and parameter (meaningless where x
// is not finite) and the parameter it had.

fn put4(i: vec4<u32>, x: vec4<f32>, r: AdamStep, old: vec4<f32>) {
    put1(i.x, x.x, r.m.x, r.v.x, r.p.x, old.x);
    put1(i.y, x.y, r.m.y, r.v.y, r.p.y, old.y);
    put1(i.z, x.z, r.m.z, r.v.z, r.p.z, old.z);
    put1(i.w, x.w, r.m.w, r.v.w, r.p.w, old.w);
}

fn ew_eight(lo: vec4<u32>, hi: vec4<u32>) {
    let clip = stats[1];
    // All 32 loads first, then the stores.
    let xa = vec4<f32>(g[lo.x], g[lo.y], g[lo.z], g[lo.w]);
    let xb = vec4<f32>(g[hi.x], g[hi.y], g[hi.z], g[hi.w]);
    let ma = vec4<f32>(m[lo.x], m[lo.y], m[lo.z], m[lo.w]);
    let mb = vec4<f32>(m[hi.x], m[hi.y], m[hi.z], m[hi.w]);
    let va = vec4<f32>(v[lo.x], v[lo.y], v[lo.z], v[lo.w]);
    let vb = vec4<f32>(v[hi.x], v[hi.y], v[hi.z], v[hi.w]);
    let wa = vec4<f32>(p[lo.x], p[lo.y], p[lo.z], p[lo.w]);
    let wb = vec4<f32>(p[hi.x], p[hi.y], p[hi.z], p[hi.w]);
    put4(lo, xa, adam4(xa, ma, va, wa, clip), wa);
    put4(hi, xb, adam4(xb, mb, vb, wb, clip), wb);
}

fn ew_one(j: u32) {
    let x = g[j];
    let w = p[j];
    let r = adam4(vec4<f32>(x), vec4<f32>(m[j]), vec4<f32>(v[j]), vec4<f32>(w), stats[1]);
    put1(j, x, r.m.x, r.v.x, r.p.x, w);
}
