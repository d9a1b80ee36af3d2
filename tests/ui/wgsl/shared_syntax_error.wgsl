// A shared preamble with a syntax error on line 4.
const WG: u32 = 64u;

fn twice(x: f32) -> f32 { return 2.0 * x }
