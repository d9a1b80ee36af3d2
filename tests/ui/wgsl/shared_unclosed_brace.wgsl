// A shared preamble whose last function lost its closing brace.
const WG: u32 = 64u;

fn twice(x: f32) -> f32 {
    return 2.0 * x;
