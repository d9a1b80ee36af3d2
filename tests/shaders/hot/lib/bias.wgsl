// Included by the shared preamble: an edit here changes every kernel that calls it.
fn bias(v: f32) -> f32 {
    return v + 1.0;
}
