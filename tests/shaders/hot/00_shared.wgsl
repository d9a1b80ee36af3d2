// The shared preamble of the hot-reload tests' kernel file (tests/hot_reload.rs edits copies).
//#include "lib/bias.wgsl"

const WG: u32 = 64u;
