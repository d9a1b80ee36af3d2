// Shared preamble of the WGSL-feature test files.
const WG: u32 = 64u;
