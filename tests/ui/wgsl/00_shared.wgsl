// Shared preamble of the compile-fail fixtures.
const WG: u32 = 64u;

fn twice(x: f32) -> f32 {
    return 2.0 * x;
}
