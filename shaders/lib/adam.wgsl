// The AdamW update of four elements, shared by `optimizer::adamw_update` (12_optimizer.wgsl) and
// `mixed::adamw_mixed` (13_mixed.wgsl), so both take exactly the same step.
//
// Provides `AdamStep` and `adam4`. Hook: a uniform `h` with fields `lr`, `beta1`, `beta2`, `eps`,
// `weight_decay`, `bias1` and `bias2` (1 − β1^t and 1 − β2^t of the step about to be taken).

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
    let gc = x * scale;
    let m1 = h.beta1 * mi + (1.0 - h.beta1) * gc;
    let v1 = h.beta2 * vi + (1.0 - h.beta2) * (gc * gc);
    let m_hat = m1 / h.bias1;
    let v_hat = v1 / h.bias2;
    return AdamStep(m1, v1, w - h.lr * (m_hat / (sqrt(v_hat) + h.eps) + h.weight_decay * w));
}
