// The fixed-order sum of a split product's parts at one output element, shared by
// `matmul_parts_add` and `matmul_parts_add4` in `03_linear.wgsl` (so both give the same bits).
//
// Provides `parts_sum(at, n, l)`: parts[at] + parts[at + l] + … + parts[at + (n − 1)·l] (n ≥ 1),
// added in part order. The first eight parts' loads are issued before any is added, so they are
// in flight together; no addition for a part that is absent (an added 0 could turn a −0 sum
// into +0). Expects the binding `parts` (f32).

fn parts_sum(at: u32, n: u32, l: u32) -> f32 {
    let v0 = parts[at];
    var v1 = 0.0;
    var v2 = 0.0;
    var v3 = 0.0;
    var v4 = 0.0;
    var v5 = 0.0;
    var v6 = 0.0;
    var v7 = 0.0;
    if (n > 1u) { v1 = parts[at + l]; }
    if (n > 2u) { v2 = parts[at + 2u * l]; }
    if (n > 3u) { v3 = parts[at + 3u * l]; }
    if (n > 4u) { v4 = parts[at + 4u * l]; }
    if (n > 5u) { v5 = parts[at + 5u * l]; }
    if (n > 6u) { v6 = parts[at + 6u * l]; }
    if (n > 7u) { v7 = parts[at + 7u * l]; }
    var sum = v0;
    if (n > 1u) { sum += v1; }
    if (n > 2u) { sum += v2; }
    if (n > 3u) { sum += v3; }
    if (n > 4u) { sum += v4; }
    if (n > 5u) { sum += v5; }
    if (n > 6u) { sum += v6; }
    if (n > 7u) { sum += v7; }
    for (var q = 8u; q < n; q++) {
        sum += parts[at + q * l];
    }
    return sum;
}
