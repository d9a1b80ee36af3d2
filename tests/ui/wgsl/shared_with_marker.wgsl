// A shared preamble must not hold markers. This comment mentions // --- KERNEL: x --- and is fine.
const WG: u32 = 64u;
// --- KERNEL: oops ---
