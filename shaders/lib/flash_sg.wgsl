// The subgroup-row form of the tensor-core flash kernels (head dim ≤ 64): each of four
// subgroups of 32 owns 16 of the workgroup's 64 rows (queries in the forward and the
// query-major backward, keys in the key-major one) and does everything for them itself; the
// workgroup shares only the walked operands, staged in steps of 32 rows. This file has the
// staging, the products and the stores they share; `lib/flash_sg_fwd.wgsl` has the forward
// (`flash_forward16_tc`), `lib/flash_sg_bwd.wgsl` the two backward passes
// (`flash_backward_dkdv16_tc`, `flash_backward_dq16_tc`).
//
// Why this form: on the NVIDIA driver a workgroup barrier costs about 260 cycles (a loop of
// barriers alone, H100), and a walk whose scores, probabilities and results cross between
// subgroups needs several a step. Here a row's scores, its P and dS and its results stay in its
// subgroup: they go through the subgroup's own region of workgroup memory behind subgroup
// barriers, and a step passes one workgroup barrier, which publishes the step's staged rows
// (loaded into registers one step ahead, stored into the other of two buffers) and tells every
// subgroup that the buffer it is about to fill has been read.
//
// A lane owns row r = lane / 2 of its subgroup's 16 and the 16 columns 16·(lane % 2) … of a
// step's 32. Sums run in fixed orders: the bits repeat run to run.
//
// Hooks of the including kernel: `lib/flash.wgsl` (the head, operands, FL_T), `lib/f16x4.wgsl`
// (f16's limit and loss scaling's overflow rule), `fl_vec(op, i)` and
// `fl_store(second, row, col, x)` (`lib/flash_*16_io.wgsl`), and the constants FS_LDR (floats
// per row of a subgroup's f32 region, ≥ 32 for a step's columns) and FS_HLEN (vec4<f16>s of the
// f16 regions: 640 a block per subgroup, 1280 two).

// Subgroups of 32 per workgroup, 16 rows each, and the invocations they make.
const FS_SG: u32 = 4u;
const FS_WG: u32 = 128u;
// vec4<f16>s per staged row: 64 halves and 8 of padding (rows 144 bytes apart, so the eight
// rows a fragment load reads at once fall on distinct banks).
const FS_LD: u32 = 18u;
// Walked rows per step; one operand's rows, and a step buffer (two operands).
const FS_STEP: u32 = 32u;
const FS_HALF: u32 = FS_STEP * FS_LD;
const FS_BUF: u32 = 2u * FS_HALF;
// vec4<f16>s per row of a 16 × 32 f16 block (32 halves and 8 of padding).
const FS_LDH: u32 = 10u;

// Two step buffers; before the walk, the workgroup's own 64 rows of two operands.
var<workgroup> fs_kv: array<vec4<f16>, 2304>;
// Each subgroup's 16 rows of FS_LDR floats, held as vec4s: a lane reads its row's 16 floats as
// four 16-byte loads, and with rows 9 vec4s apart (FS_LDR = 36) the eight lanes of a quarter
// subgroup fall on distinct banks (scalar loads of the same floats would meet 4-way
// conflicts); and its f16 blocks.
var<workgroup> fs_r: array<vec4<f32>, 16u * FS_LDR>;
var<workgroup> fs_h: array<vec4<f16>, FS_HLEN>;
const_assert 2u * FS_BUF == 2304u && 2u * 64u * FS_LD == 2304u && FS_SG * 32u == FS_WG;
const_assert FS_LDR % 4u == 0u;

// The next step's rows, loaded a step ahead: vec4 tid + 128e of each operand's 32 rows.
var<private> fs_p0: vec4<f16>;
var<private> fs_p1: vec4<f16>;
var<private> fs_p2: vec4<f16>;
var<private> fs_p3: vec4<f16>;
var<private> fs_p4: vec4<f16>;
var<private> fs_p5: vec4<f16>;
var<private> fs_p6: vec4<f16>;
var<private> fs_p7: vec4<f16>;

// Vec4 d4 of row `row` of operand `op` of batch b, head `head` (a query head for Q and dO, a
// kv head for K and V); zeros past the sequence or the head dim.
fn fs_load(op: u32, b: u32, head: u32, row: u32, d4: u32) -> vec4<f16> {
    let dq = fl_head_dim() / 4u;
    let heads = select(p.heads, p.kv_heads, op == FL_K || op == FL_V);
    let ok = row < p.seq && d4 < dq;
    return select(vec4<f16>(), fl_vec(op, select(0u, ((b * p.seq + row) * heads + head) * dq + d4, ok)), ok);
}

// Rows r0 … r0 + 31 of operands `oa` and `ob` into the registers.
fn fs_fetch(tid: u32, oa: u32, ob: u32, b: u32, head: u32, r0: u32) {
    let c = tid % 16u;
    let r = r0 + tid / 16u;
    fs_p0 = fs_load(oa, b, head, r, c);
    fs_p1 = fs_load(oa, b, head, r + 8u, c);
    fs_p2 = fs_load(oa, b, head, r + 16u, c);
    fs_p3 = fs_load(oa, b, head, r + 24u, c);
    fs_p4 = fs_load(ob, b, head, r, c);
    fs_p5 = fs_load(ob, b, head, r + 8u, c);
    fs_p6 = fs_load(ob, b, head, r + 16u, c);
    fs_p7 = fs_load(ob, b, head, r + 24u, c);
}

// The registers into step buffer `buf` (the first operand's rows, then the second's).
fn fs_stage(tid: u32, buf: u32) {
    let at = buf * FS_BUF + (tid / 16u) * FS_LD + tid % 16u;
    fs_kv[at] = fs_p0;
    fs_kv[at + 8u * FS_LD] = fs_p1;
    fs_kv[at + 16u * FS_LD] = fs_p2;
    fs_kv[at + 24u * FS_LD] = fs_p3;
    fs_kv[at + FS_HALF] = fs_p4;
    fs_kv[at + FS_HALF + 8u * FS_LD] = fs_p5;
    fs_kv[at + FS_HALF + 16u * FS_LD] = fs_p6;
    fs_kv[at + FS_HALF + 24u * FS_LD] = fs_p7;
}

// The workgroup's own rows r0 … r0 + 63 of `oa`, and of `ob` after them.
fn fs_own(tid: u32, oa: u32, ob: u32, b: u32, head: u32, r0: u32) {
    for (var e = tid; e < 64u * 16u; e += FS_WG) {
        let at = (e / 16u) * FS_LD + e % 16u;
        fs_kv[at] = fs_load(oa, b, head, r0 + e / 16u, e % 16u);
        fs_kv[64u * FS_LD + at] = fs_load(ob, b, head, r0 + e / 16u, e % 16u);
    }
}

// The subgroup's rows m0 … m0 + 15 of the own operand at `base`, as A fragments of 16 dims.
fn fs_frags(base: u32, m0: u32) -> array<coop_mat16x16<f16, A>, 4> {
    let at = base + m0 * FS_LD;
    return array<coop_mat16x16<f16, A>, 4>(
        coopLoadT<coop_mat16x16<f16, A>>(&fs_kv[at], FS_LD),
        coopLoadT<coop_mat16x16<f16, A>>(&fs_kv[at + 4u], FS_LD),
        coopLoadT<coop_mat16x16<f16, A>>(&fs_kv[at + 8u], FS_LD),
        coopLoadT<coop_mat16x16<f16, A>>(&fs_kv[at + 12u], FS_LD),
    );
}

// The products, each in its own function (naga checks cooperative-matrix operations where they
// are written, and takes an early `return` on the workgroup id for non-uniform control flow).

// X·Yᵀ over the 64 dims: X the 16 own rows (fragments), Y the 16 staged rows at `at`.
fn fs_xyt(x: array<coop_mat16x16<f16, A>, 4>, at: u32) -> coop_mat16x16<f32, C> {
    var c = coop_mat16x16<f32, C>();
    c = coopMultiplyAdd(x[0], coopLoad<coop_mat16x16<f16, B>>(&fs_kv[at], FS_LD), c);
    c = coopMultiplyAdd(x[1], coopLoad<coop_mat16x16<f16, B>>(&fs_kv[at + 4u], FS_LD), c);
    c = coopMultiplyAdd(x[2], coopLoad<coop_mat16x16<f16, B>>(&fs_kv[at + 8u], FS_LD), c);
    c = coopMultiplyAdd(x[3], coopLoad<coop_mat16x16<f16, B>>(&fs_kv[at + 12u], FS_LD), c);
    return c;
}

// acc + H·Y over a step's 32 rows: H the subgroup's 16 × 32 f16 block at `hb`, Y the staged
// rows at `yb`, dims n0 … n0 + 15.
fn fs_hy(acc: coop_mat16x16<f32, C>, hb: u32, yb: u32, n0: u32) -> coop_mat16x16<f32, C> {
    let a0 = coopLoadT<coop_mat16x16<f16, A>>(&fs_h[hb], FS_LDH);
    let a1 = coopLoadT<coop_mat16x16<f16, A>>(&fs_h[hb + 4u], FS_LDH);
    var c = coopMultiplyAdd(a0, coopLoadT<coop_mat16x16<f16, B>>(&fs_kv[yb + n0 / 4u], FS_LD), acc);
    c = coopMultiplyAdd(a1, coopLoadT<coop_mat16x16<f16, B>>(&fs_kv[yb + 16u * FS_LD + n0 / 4u], FS_LD), c);
    return c;
}

// A tile into the f32 region at float `at` (a multiple of 4; rows FS_LDR floats apart).
fn fs_put(c: coop_mat16x16<f32, C>, at: u32) {
    let i = at / 4u;
    let ld = FS_LDR / 4u;
    coopStoreT(c, &fs_r[i], ld);
}

// 16 floats of the region from float `at` (a multiple of 4).
fn fs_r16(at: u32) -> array<vec4<f32>, 4> {
    let i = at / 4u;
    return array<vec4<f32>, 4>(fs_r[i], fs_r[i + 1u], fs_r[i + 2u], fs_r[i + 3u]);
}

// 16 values rounded to f16 into the f16 block at `at` (a dS beyond ±65504 is clamped; the
// flag records it).
fn fs_put_h(at: u32, v: array<vec4<f32>, 4>) {
    let lim = vec4<f32>(F16_LIMIT);
    fs_h[at] = vec4<f16>(clamp(v[0], -lim, lim));
    fs_h[at + 1u] = vec4<f16>(clamp(v[1], -lim, lim));
    fs_h[at + 2u] = vec4<f16>(clamp(v[2], -lim, lim));
    fs_h[at + 3u] = vec4<f16>(clamp(v[3], -lim, lim));
}

// Which of the lane's 16 pairs (row `row`, columns c0 … c0 + 15) are causal: column ≤ row when
// `keys_are_columns` (a query row over keys), else column ≥ row (a key row over queries); both
// in the sequence.
fn fs_mask(row: u32, c0: u32, keys_are_columns: bool) -> array<vec4<bool>, 4> {
    let ok = vec4<bool>(row < p.seq);
    let c = vec4<u32>(c0) + vec4<u32>(0u, 1u, 2u, 3u);
    let r = vec4<u32>(row);
    let s = vec4<u32>(p.seq);
    let c4 = c + vec4<u32>(4u);
    let c8 = c + vec4<u32>(8u);
    let c12 = c + vec4<u32>(12u);
    return array<vec4<bool>, 4>(
        select(c >= r, c <= r, keys_are_columns) & ok & (c < s),
        select(c4 >= r, c4 <= r, keys_are_columns) & ok & (c4 < s),
        select(c8 >= r, c8 <= r, keys_are_columns) & ok & (c8 < s),
        select(c12 >= r, c12 <= r, keys_are_columns) & ok & (c12 < s),
    );
}

// Two tiles of 16 columns (the output's dims 16·t0 … 16·t0 + 31, times f) of the subgroup's
// rows r0 … r0 + 15 to global memory through its region: each lane writes its row's 16.
fn fs_emit2(c0: coop_mat16x16<f32, C>, c1: coop_mat16x16<f32, C>, rb: u32, lane: u32, second: bool, r0: u32, t0: u32, dh: u32) {
    fs_put(c0, rb);
    fs_put(c1, rb + 16u);
    subgroupBarrier();
    let r = lane / 2u;
    let h = lane % 2u;
    let v = fs_r16(rb + r * FS_LDR + 16u * h);
    if (r0 + r < p.seq) {
        let col = 16u * t0 + 16u * h;
        fl_write4(second, r0 + r, col, dh, v[0]);
        fl_write4(second, r0 + r, col + 4u, dh, v[1]);
        fl_write4(second, r0 + r, col + 8u, dh, v[2]);
        fl_write4(second, r0 + r, col + 12u, dh, v[3]);
    }
    subgroupBarrier();
}

// Whether some of the 16 values is NaN, ±Inf or beyond f16's range (loss scaling's rule).
fn fs_bad(v: array<vec4<f32>, 4>) -> bool {
    return overflows16(v[0]) | overflows16(v[1]) | overflows16(v[2]) | overflows16(v[3]);
}

// Where the workgroup is not four subgroups of 32 the rows have no owner: the kernels are
// recorded only where it is (`flash_attention`'s forms), and a direct call gets NaN in the
// workgroup's rows of its outputs rather than plausible numbers.
fn fs_poison(tid: u32, second: bool, r0: u32) {
    let nan = bitcast<f32>(0x7fc00000u);
    let dh = fl_head_dim();
    for (var e = tid; e < FL_T * dh; e += FS_WG) {
        if (r0 + e / dh < p.seq) {
            fl_store(second, r0 + e / dh, e % dh, nan);
        }
    }
}
