// The f16 copy of an output gradient, written by the kernel that computes the gradient instead
// of by a separate `cast::cast_grad_f16x4` over the f32 values (mixed precision's loss scaling):
// the same rounding (`to_f16x4` of `lib/f16x4.wgsl`: beyond ±65504 clamped, NaN kept) and the
// same overflow rule (any value that is NaN, ±Inf or beyond ±65504 sets `flag[0]` to 1, never
// clears it), so the halves and the flag are what the separate cast would give from the f32
// values the kernel computes.
//
// Provides `grad16(v)`. Expects `lib/f16x4.wgsl` (its `overflows16` is the rule) included
// before it, and the binding
//   var<storage, read_write> flag: array<atomic<u32>>   the loss scaler's overflow flag

// v rounded to f16 (padding lanes must be 0 already), raising the flag when any lane overflows.
fn grad16(v: vec4<f32>) -> vec4<f16> {
    if (overflows16(v)) {
        atomicOr(&flag[0], 1u);
    }
    return to_f16x4(v);
}
