// The f16-operand form of the fast attention path (`kernels::fast_attention::forward16` /
// `backward16`): its products run on tensor cores through `linear16::attention_scores16`,
// `attention_pv16` and `attention_ptx16`; the softmax and Δ are the f32 kernels of the fast path.
// This file holds the one step between them that is neither: the backward's dS epilogue, after
// `attention_scores16` has written dP = dO·Vᵀ (f16 operands, f32 sums) into a second S×S
// workspace.
//
// Layouts: P, dP, dS `[B, H, S, S]` f32 with the fast path's row contract (row (b, h, s) at
// `((b·H + h)·S + s)·S`; keys 0..=s hold values, s < j < min(S, 64·(⌊s/64⌋+1)) — the rest of the
// row's 64-key tile, which the products read — hold zeros; entries further right are never
// read or written); Δ `[B, H, S]`.

// The causal tile of the fast path (64 keys).
const TILE: u32 = 64u;
// The largest finite f16.
const F16_MAX: f32 = 65504.0;

// --- KERNEL: attention16_ds ---
// dS = P ⊙ (dP − Δ), over dP: `probs` `[B, H, S, S]` holding P (as
// `attention_fast_softmax` left it), `ds` `[B, H, S, S]` holding dP = dO·Vᵀ (as
// `linear16::attention_scores16` writes it with scale 1: the tiles up to the diagonal, diagonal
// tiles whole), `delta` `[B, H, S]` (Δ = rowsum(dO ⊙ O), `attention_fast_delta`). Row (b, h, s):
// ds[j] ← P[j]·(dP[j] − Δ) for j ≤ s, 0 for s < j < min(S, 64·(⌊s/64⌋+1)) (written as 0 whatever
// dP holds there, so the products read zeros past the diagonal). The products round dS to f16
// (clamping it to ±65504) as they load it, so the overflow check of loss scaling is made here:
// any dS that is NaN, ±Inf or beyond ±65504 sets `flag[0]` to 1 (never clears it), as
// `mixed::cast_grad_f16x4` does for the gradients it casts. Overwrites those entries of `ds`;
// `probs` is only read. Grid: one workgroup per row, `workgroups(B·H·S)`, 1-D (2-D past the
// device's limit); the row strided over the 256 invocations.
// @grid workgroups(p.batch * p.heads * p.seq)
// @requires len(probs) >= p.batch * p.heads * p.seq * p.seq
// @requires len(ds) >= p.batch * p.heads * p.seq * p.seq
// @requires len(delta) >= p.batch * p.heads * p.seq
// @requires len(flag) >= 1
struct Params {
    batch: u32,
    seq: u32,
    heads: u32,
}
@group(0) @binding(0) var<storage, read> probs: array<f32>;
@group(0) @binding(1) var<storage, read> delta: array<f32>;
@group(0) @binding(2) var<storage, read_write> ds: array<f32>;
@group(0) @binding(3) var<storage, read_write> flag: array<atomic<u32>>;
@group(0) @binding(4) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn attention16_ds(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let seq = p.seq;
    let w = flat_wg(wid, nwg);
    if (w >= p.batch * p.heads * seq) {
        return;
    }
    // Row w = (b·H + h)·S + s: Δ's index too.
    let s = w % seq;
    let base = w * seq;
    let tile_end = min(seq, (s / TILE + 1u) * TILE);
    let dr = delta[w];
    var bad = false;
    for (var j = tid; j < tile_end; j += WG) {
        var v = 0.0;
        if (j <= s) {
            v = probs[base + j] * (ds[base + j] - dr);
        }
        ds[base + j] = v;
        // NaN and ±Inf have the exponent bits all ones (`v != v` may be folded away); NaN fails
        // the comparison, so both tests are needed.
        bad = bad || !is_finite(v) || abs(v) > F16_MAX;
    }
    if (bad) {
        atomicOr(&flag[0], 1u);
    }
}
