// The element-wise kernels' walk over a flat array, written once (00_infrastructure,
// 01_embedding's lookups, 06_activation, 08_cast, 09_backward_ffn, 12_optimizer's
// `adamw_update`).
//
// Memory-bound kernels need many bytes in flight to cover the memory latency, so every
// invocation handles several elements and issues all its loads before it uses any: workgroup
// `w` owns the EW_CHUNK = 2048 elements `[w·2048, (w+1)·2048)`, invocation `tid` handles
// `w·2048 + tid + k·256` for k = 0..7 (in each of the 8 steps consecutive invocations touch
// consecutive elements: coalesced). Grid `workgroups(⌈n/2048⌉)`, 2-D past the device's limit
// (`flat_wg` recovers `w`). An invocation whose 8 elements are all below `n` handles them at
// once (its loads unrolled by hand into two vec4s of offsets); the last workgroup's invocations
// take a guarded loop instead, so nothing past `n` is read or written.
//
// Provides the constants and `elementwise(wid, nwg, tid, n)`.
// Hooks the including kernel defines:
//   fn ew_eight(lo: vec4<u32>, hi: vec4<u32>)   the 8 elements lo.x … lo.w, hi.x … hi.w, all
//                                               below n: every load before any store
//   fn ew_one(j: u32)                           element j < n alone

// Elements per invocation (EW_PER) and per workgroup (EW_CHUNK).
const EW_PER: u32 = 8u;
const EW_CHUNK: u32 = 2048u;
const_assert EW_CHUNK == WG * EW_PER;
// Offsets of an invocation's elements from its first: steps 0..3 and 4..7.
const EW_LO: vec4<u32> = vec4<u32>(0u, WG, 2u * WG, 3u * WG);
const EW_HI: vec4<u32> = vec4<u32>(4u * WG, 5u * WG, 6u * WG, 7u * WG);

// The elements of invocation `tid` of workgroup `flat_wg(wid, nwg)` below n.
fn elementwise(wid: vec3<u32>, nwg: vec3<u32>, tid: u32, n: u32) {
    let i = flat_wg(wid, nwg) * EW_CHUNK + tid;
    let lo = i + EW_LO;
    let hi = i + EW_HI;
    if (hi.w < n) {
        ew_eight(lo, hi);
    } else {
        for (var k = 0u; k < EW_PER; k++) {
            let j = i + k * WG;
            if (j < n) {
                ew_one(j);
            }
        }
    }
}
