// The walk of the f16x4-row kernels (`lib/f16x4.wgsl`) over the vec4s of a `[rows, cols]` matrix
// (cq = ⌈cols/4⌉ vec4s per row, the f16x4 row layout; f32 inputs plain row-major).
//
// Workgroup w owns the VEC_CHUNK = 1024 vec4s [1024·w, 1024·(w+1)); invocation tid takes
// e = 1024·w + tid + 256·k, k = 0..3 (in each step consecutive invocations on consecutive
// vec4s). Grid `workgroups(⌈rows·cq/1024⌉)`, 2-D past the device's limit. When cols % 4 == 0
// (no padding: vec4 e holds elements 4e..4e+3) and all four are inside, the kernel's
// `v4_four` takes them at once, every load before any store; otherwise each vec4 below rows·cq
// goes through `v4_one` with its row, first column and number of real columns.
//
// Provides VEC_CHUNK and `vec4_rows(wid, nwg, tid, rows, cols)`. Hooks:
//   fn v4_four(e: vec4<u32>)                 vec4s e.x … e.w, elements 4·e … 4·e + 3
//   fn v4_one(e: u32, i: u32, n: u32)        vec4 e, its first element i, n ∈ 1..4 real columns
//                                            (the other 4 − n are padding)

const VEC_PER: u32 = 4u;
const VEC_CHUNK: u32 = 1024u;
const_assert VEC_CHUNK == VEC_PER * WG;

fn vec4_tail(e: u32, cq: u32, cols: u32, total: u32) {
    if (e < total) {
        let r = e / cq;
        let c = (e - r * cq) * 4u;
        v4_one(e, r * cols + c, min(cols - c, 4u));
    }
}

fn vec4_rows(wid: vec3<u32>, nwg: vec3<u32>, tid: u32, rows: u32, cols: u32) {
    let cq = (cols + 3u) / 4u;
    let total = rows * cq;
    let e = vec4<u32>(flat_wg(wid, nwg) * VEC_CHUNK + tid) + vec4<u32>(0u, WG, 2u * WG, 3u * WG);
    if (cols % 4u == 0u && e.w < total) {
        v4_four(e);
    } else {
        vec4_tail(e.x, cq, cols, total);
        vec4_tail(e.y, cq, cols, total);
        vec4_tail(e.z, cq, cols, total);
        vec4_tail(e.w, cq, cols, total);
    }
}
