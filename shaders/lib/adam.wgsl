// The AdamW update of four elements, shared by `optimizer::adamw_update` (12_optimizer.wgsl) and
// `optimizer::adamw_mixed` (12_optimizer.wgsl, which computes the bias corrections itself), so both take
// exactly the same step.
//
// Provides `AdamStep`, `adam4` and `adam4_bias`. Hook: a uniform `h` with fields `lr`, `beta1`,
// `beta2`, `eps`, `weight_decay`, and for `adam4` also `bias1` and `bias2` (1 − β1^t and 1 − β2^t
// of the step about to be taken; an included declaration that is not used is left out, so a
// kernel that calls only `adam4_bias` needs no such fields).

// The new moments and parameters of four elements.
struct AdamStep {
    m: vec4<f32>,
    v: vec4<f32>,
    p: vec4<f32>,
}

// The update of four elements with raw gradients x scaled by `scale` (the clip factor, and in
// mixed precision 1 / loss scale), moments mi, vi, parameters w (component by component the
// scalar formula of 12_optimizer.wgsl's header; meaningless where x is not finite).
fn adam4(x: vec4<f32>, mi: vec4<f32>, vi: vec4<f32>, w: vec4<f32>, scale: f32) -> AdamStep {
    return adam4_bias(x, mi, vi, w, scale, h.bias1, h.bias2);
}

// `adam4` with the bias corrections 1 − β1^t and 1 − β2^t given as arguments.
fn adam4_bias(x: vec4<f32>, mi: vec4<f32>, vi: vec4<f32>, w: vec4<f32>, scale: f32, bias1: f32, bias2: f32) -> AdamStep {
    let gc = x * scale;
    let m1 = h.beta1 * mi + (1.0 - h.beta1) * gc;
    let v1 = h.beta2 * vi + (1.0 - h.beta2) * (gc * gc);
    let m_hat = m1 / bias1;
    let v_hat = v1 / bias2;
    return AdamStep(m1, v1, w - h.lr * (m_hat / (sqrt(v_hat) + h.eps) + h.weight_decay * w));
}
