//! The embedding kernels (`shaders/01_embedding.wgsl`) against float64 references: lookups with
//! out-of-range ids, more than 65535 rows, the f16 table, the key-major backward with repeated
//! ids (accumulation, determinism, more than 65535 workgroups), the trainer's entry point
//! `kernels::embed::backward` in both its forms on skewed ids against a per-element rounding
//! bound, and a finite-difference check of the backward against the GPU lookup.

mod common;
#[path = "reference/elementwise.rs"]
mod reference;

use common::{Rounded, TAIL, assert_close, assert_within, check_tail, gpu, has_f16, poisoned, rng, same_bits, uniform};
use kernels::embed;
use kernels::embedding::{embed_backward, embed_lookup, embed_lookup_w16};
use kernels::{Error, Gpu, f16};
use rand::Rng;
use rand::rngs::StdRng;

/// `rows` ids: mostly in `0..vocab`, about one in ten out of range (vocab, vocab + small, and
/// u32::MAX, which would wrap `id * dim` if the kernel indexed before testing).
fn random_ids(rng: &mut StdRng, rows: usize, vocab: usize) -> Vec<u32> {
    (0..rows)
        .map(|_| match rng.random_range(0..20) {
            0 => vocab as u32,
            1 => u32::MAX - rng.random_range(0..3u32),
            _ => rng.random_range(0..vocab as u32),
        })
        .collect()
}

fn run_lookup(gpu: &Gpu, ids: &[u32], table: &[f32], vocab: usize, dim: usize) -> Vec<f32> {
    let rows = ids.len();
    let ids_b = gpu.upload(ids).unwrap();
    let table_b = gpu.upload(table).unwrap();
    let mut out = poisoned(gpu, rows * dim);
    embed_lookup(gpu, &ids_b, &table_b, &mut out, embed_lookup::Params::new(rows as u32, dim as u32, vocab as u32))
        .unwrap();
    let got = out.read(gpu).unwrap();
    check_tail("embed_lookup", &got, rows * dim);
    got[..rows * dim].to_vec()
}

/// Runs `embed_backward` on a copy of `d_table0` and returns the whole buffer (tail included).
fn run_backward(gpu: &Gpu, d_out: &[f32], ids: &[u32], d_table0: &[f32], vocab: usize, dim: usize) -> Vec<f32> {
    let rows = ids.len();
    let d_out_b = gpu.upload(d_out).unwrap();
    let ids_b = gpu.upload(ids).unwrap();
    let mut padded = d_table0.to_vec();
    padded.extend([f32::NAN; TAIL]);
    let mut d_table = gpu.upload(&padded).unwrap();
    embed_backward(
        gpu,
        &d_out_b,
        &ids_b,
        &mut d_table,
        embed_backward::Params::new(rows as u32, dim as u32, vocab as u32),
    )
    .unwrap();
    let got = d_table.read(gpu).unwrap();
    check_tail("embed_backward", &got, vocab * dim);
    got
}

/// Lookup shapes (rows, dim, vocab): tiny, dims not multiples of 256, a dim past 1024, and more
/// than 65535 rows with a tiny dim.
const LOOKUP_SHAPES: [(usize, usize, usize); 5] =
    [(1, 1, 1), (7, 33, 10), (300, 257, 64), (129, 1100, 256), (70_003, 3, 50)];

#[test]
fn embed_lookup_matches_reference() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("embed_lookup");
    for (rows, dim, vocab) in LOOKUP_SHAPES {
        let ids = random_ids(&mut rng, rows, vocab);
        let table = uniform(&mut rng, vocab * dim, -1.0, 1.0);
        let got = run_lookup(&gpu, &ids, &table, vocab, dim);
        let want = reference::embed_lookup(&ids, &reference::widen(&table), vocab, dim);
        let what = format!("embed_lookup rows={rows} dim={dim} vocab={vocab}");
        assert_close(&what, &got, &want, 1e-5);
        // A lookup is a copy: exact, and exact zeros for out-of-range ids.
        assert!(got.iter().zip(&want).all(|(&g, &w)| g as f64 == w), "{what}: not an exact copy");
        for (r, &id) in ids.iter().enumerate() {
            if id as usize >= vocab {
                assert!(got[r * dim..(r + 1) * dim].iter().all(|&v| v == 0.0), "{what}: row {r} (id {id}) not zero");
            }
        }
    }
}

#[test]
fn embed_lookup_w16_matches_reference() {
    let Some(gpu) = gpu() else { return };
    if !has_f16(&gpu, "embed_lookup_w16") {
        return;
    }
    let mut rng = rng("embed_lookup_w16");
    for (rows, dim, vocab) in LOOKUP_SHAPES {
        let ids = random_ids(&mut rng, rows, vocab);
        let table = uniform(&mut rng, vocab * dim, -1.0, 1.0);
        let table16: Vec<f16> = table.iter().map(|&v| f16::from_f32(v)).collect();
        let ids_b = gpu.upload(&ids).unwrap();
        let table_b = gpu.upload(&table16).unwrap();
        let mut out = poisoned(&gpu, rows * dim);
        embed_lookup_w16(
            &gpu,
            &ids_b,
            &table_b,
            &mut out,
            embed_lookup_w16::Params::new(rows as u32, dim as u32, vocab as u32),
        )
        .unwrap();
        let got = out.read(&gpu).unwrap();
        let what = format!("embed_lookup_w16 rows={rows} dim={dim} vocab={vocab}");
        check_tail(&what, &got, rows * dim);
        let got = &got[..rows * dim];
        // Against the f32 table (the f16 rounding is the only error) …
        let want = reference::embed_lookup(&ids, &reference::widen(&table), vocab, dim);
        assert_close(&what, got, &want, 2e-3);
        // … and exactly the f16 values widened.
        let table16_64: Vec<f64> = table16.iter().map(|v| v.to_f64()).collect();
        let exact = reference::embed_lookup(&ids, &table16_64, vocab, dim);
        assert!(got.iter().zip(&exact).all(|(&g, &w)| g as f64 == w), "{what}: not the f16 values");
    }
}

#[test]
fn embed_backward_accumulates_matching_rows() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("embed_backward");
    // (rows, dim, vocab): tiny; many repeats (≈ 200 per id); two column chunks with a ragged
    // last one (dim 1100 > 1024); the trainer's vocabulary with ids ≥ V; more than 65535 rows
    // (274 steps of 256 ids per workgroup).
    for (rows, dim, vocab) in [(1, 1, 1), (1000, 37, 5), (513, 1100, 20), (300, 64, 256), (70_000, 3, 11)] {
        let mut ids = random_ids(&mut rng, rows, vocab);
        if rows > 1 {
            ids[rows - 1] = ids[0]; // at least one repeat, whatever the draw
        }
        let d_out = uniform(&mut rng, rows * dim, -1.0, 1.0);
        let d_table0 = uniform(&mut rng, vocab * dim, -1.0, 1.0);
        let got = run_backward(&gpu, &d_out, &ids, &d_table0, vocab, dim);
        let mut want = reference::widen(&d_table0);
        reference::embed_backward(&reference::widen(&d_out), &ids, &mut want, vocab, dim);
        let what = format!("embed_backward rows={rows} dim={dim} vocab={vocab}");
        assert_close(&what, &got[..vocab * dim], &want, 1e-5);

        // The same inputs give the same bits.
        let again = run_backward(&gpu, &d_out, &ids, &d_table0, vocab, dim);
        assert!(got.iter().zip(&again).all(|(a, b)| a.to_bits() == b.to_bits()), "{what}: not deterministic");
    }
}

#[test]
fn embed_backward_more_than_65535_workgroups() {
    // One workgroup per vocabulary row: 70001 of them needs the 2-D grid (flat_wg).
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("embed_backward_large_vocab");
    let (rows, dim, vocab) = (200, 2, 70_001);
    let mut ids = random_ids(&mut rng, rows, vocab);
    // Repeats, and the last vocabulary rows (served by the second grid row).
    for (r, id) in ids.iter_mut().take(20).enumerate() {
        *id = (vocab - 1 - r % 3) as u32;
    }
    let d_out = uniform(&mut rng, rows * dim, -1.0, 1.0);
    let d_table0 = uniform(&mut rng, vocab * dim, -1.0, 1.0);
    let got = run_backward(&gpu, &d_out, &ids, &d_table0, vocab, dim);
    let mut want = reference::widen(&d_table0);
    reference::embed_backward(&reference::widen(&d_out), &ids, &mut want, vocab, dim);
    assert_close("embed_backward vocab=70001", &got[..vocab * dim], &want, 1e-5);
}

/// dL/dtable from `embed_backward` against central differences of the GPU `embed_lookup`, with
/// L(table) = Σ G·embed_lookup(ids, table). L is linear in the table and a lookup copies values
/// exactly, so the difference quotient is exact up to float64 rounding of the sums; the step
/// h = 1e-2 (values of order 1) only has to survive the f32 rounding of table ± h, which the
/// quotient divides by the actual f32 step. The tolerance 1e-2 is the library's convention for
/// finite differences; the observed error is 0 to float64 rounding.
#[test]
fn embed_backward_matches_finite_differences_of_lookup() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("embed_fd");
    let (rows, dim, vocab) = (40, 4, 6);
    let mut ids = random_ids(&mut rng, rows, vocab);
    ids[1] = ids[0];
    ids[2] = ids[0];
    ids[3] = vocab as u32; // out of range: no gradient
    let table = uniform(&mut rng, vocab * dim, -1.0, 1.0);
    let g = uniform(&mut rng, rows * dim, -1.0, 1.0);
    let loss = |t: &[f32]| -> f64 {
        let out = run_lookup(&gpu, &ids, t, vocab, dim);
        out.iter().zip(&g).map(|(&o, &g)| o as f64 * g as f64).sum()
    };
    let h = 1e-2f32;
    let mut fd = Vec::new();
    for i in 0..vocab * dim {
        let (mut tp, mut tm) = (table.clone(), table.clone());
        tp[i] += h;
        tm[i] -= h;
        fd.push((loss(&tp) - loss(&tm)) / (tp[i] as f64 - tm[i] as f64));
    }
    let zeros = vec![0.0f32; vocab * dim];
    let got = run_backward(&gpu, &g, &ids, &zeros, vocab, dim);
    eprintln!("embed_backward vs finite differences: relative error {:e}", common::rel_err(&got[..vocab * dim], &fd));
    assert_close("embed_backward vs finite differences", &got[..vocab * dim], &fd, 1e-2);
}

#[test]
fn short_buffers_are_errors() {
    let Some(gpu) = gpu() else { return };
    let ids = gpu.upload(&[0u32, 1, 2]).unwrap();
    let table = gpu.upload(&[1.0f32; 8]).unwrap();
    // 3 rows × 4 columns need 12 outputs.
    let mut out = gpu.filled(11, f32::NAN).unwrap();
    let e = embed_lookup(&gpu, &ids, &table, &mut out, embed_lookup::Params::new(3, 4, 2)).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e:?}");
    assert!(e.to_string().contains("len(out) >= p.rows * p.dim"), "{e}");
    // A table shorter than vocab × dim.
    let mut out = gpu.filled(12, f32::NAN).unwrap();
    let e = embed_lookup(&gpu, &ids, &table, &mut out, embed_lookup::Params::new(3, 4, 3)).unwrap_err();
    assert!(e.to_string().contains("len(table) >= p.vocab * p.dim"), "{e}");
    assert!(out.read(&gpu).unwrap().iter().all(|v| v.is_nan()), "nothing ran");
    // The backward's gradient table.
    let d_out = gpu.upload(&[1.0f32; 12]).unwrap();
    let mut d_table = gpu.zeros::<f32>(7).unwrap();
    let e = embed_backward(&gpu, &d_out, &ids, &mut d_table, embed_backward::Params::new(3, 4, 2)).unwrap_err();
    assert!(e.to_string().contains("len(d_table) >= p.vocab * p.dim"), "{e}");
}

/// The lookups copy 8 output elements per invocation (2048 per workgroup), stepping the
/// (row, column) of each element from the first: dims that divide the workgroup of 256 or are
/// multiples of it (1, 64, 256, 512), dims just past it (257, 2049), and odd ones, each with
/// enough rows for several full chunks and a partial last one. Exact copies, f32 and f16.
#[test]
fn lookups_across_chunks_and_row_boundaries() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("embed_lookup chunks");
    let f16_ok = gpu.features().contains(kernels::wgpu::Features::SHADER_F16);
    for (rows, dim, vocab) in
        [(5000, 1, 9), (70, 64, 11), (20, 256, 7), (9, 512, 5), (17, 257, 6), (3, 2049, 4), (41, 77, 13)]
    {
        let ids = random_ids(&mut rng, rows, vocab);
        let table = uniform(&mut rng, vocab * dim, -1.0, 1.0);
        let what = format!("rows={rows} dim={dim} vocab={vocab}");
        let got = run_lookup(&gpu, &ids, &table, vocab, dim);
        let want = reference::embed_lookup(&ids, &reference::widen(&table), vocab, dim);
        assert!(got.iter().zip(&want).all(|(&g, &w)| g as f64 == w), "embed_lookup {what}: not an exact copy");
        if f16_ok {
            let table16: Vec<f16> = table.iter().map(|&v| f16::from_f32(v)).collect();
            let ids_b = gpu.upload(&ids).unwrap();
            let table_b = gpu.upload(&table16).unwrap();
            let mut out = poisoned(&gpu, rows * dim);
            let p = embed_lookup_w16::Params::new(rows as u32, dim as u32, vocab as u32);
            embed_lookup_w16(&gpu, &ids_b, &table_b, &mut out, p).unwrap();
            let got = out.read(&gpu).unwrap();
            check_tail(&what, &got, rows * dim);
            let wide: Vec<f64> = table16.iter().map(|v| v.to_f64()).collect();
            let want = reference::embed_lookup(&ids, &wide, vocab, dim);
            assert!(got.iter().zip(&want).all(|(&g, &w)| g as f64 == w), "embed_lookup_w16 {what}: not the f16 values");
        }
    }
}

/// The lookup under a 2-D grid gives the same output as under its own 1-D grid (which only
/// turns 2-D past 65535 chunks of 2048 outputs, beyond this adapter's 128 MiB bindings): an
/// explicit (2, 2, 1) grid through the untyped API, 4 workgroups for 3 chunks.
#[test]
fn lookup_on_a_2d_grid() {
    use kernels::__private::bytemuck::bytes_of;
    use kernels::{Arg, Call, Grid, Record};
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("embed_lookup 2-D");
    let (rows, dim, vocab) = (61, 77, 9);
    let ids = random_ids(&mut rng, rows, vocab);
    let table = uniform(&mut rng, vocab * dim, -1.0, 1.0);
    let want = run_lookup(&gpu, &ids, &table, vocab, dim);
    let ids_b = gpu.upload(&ids).unwrap();
    let table_b = gpu.upload(&table).unwrap();
    let out = poisoned(&gpu, rows * dim);
    let params = embed_lookup::Params::new(rows as u32, dim as u32, vocab as u32);
    let args = [
        Arg::storage(&ids_b, false),
        Arg::storage(&table_b, false),
        Arg::storage(&out, true),
        Arg::uniform(bytes_of(&params)),
    ];
    let call = Call { kernel: &embed_lookup::KERNEL, grid: Grid::Explicit([2, 2, 1]), args: &args, overrides: &[] };
    (&gpu).record(call).unwrap();
    let got = out.read(&gpu).unwrap();
    check_tail("embed_lookup on a 2-D grid", &got, rows * dim);
    assert_eq!(&got[..rows * dim], &want[..], "embed_lookup on a 2-D grid");
}

/// `rows` ids skewed as a tokenizer's are: half of them one hot id, about one in twenty out of
/// range (vocab, u32::MAX), the rest a Zipf-like draw (rank k about ∝ 1/(k+1)). Ids ≡ 3 (mod 7)
/// never occur, so their table rows must come back untouched.
fn skewed_ids(rng: &mut StdRng, rows: usize, vocab: usize) -> Vec<u32> {
    let never = |id: u32| vocab >= 4 && id % 7 == 3;
    let mut hot = rng.random_range(0..vocab as u32);
    if never(hot) {
        hot -= 1;
    }
    let top = (vocab as f64 + 1.0).ln();
    (0..rows)
        .map(|_| match rng.random_range(0..40) {
            0 => vocab as u32,
            1 => u32::MAX,
            2..=21 => hot,
            _ => {
                let id = ((rng.random::<f64>() * top).exp() as usize).clamp(1, vocab) as u32 - 1;
                if never(id) { id - 1 } else { id }
            }
        })
        .collect()
}

/// Runs `embed::backward` with `scratch` on a copy of `d_table0` (NaN tail) and returns the
/// table (tail checked).
fn run_embed(
    gpu: &Gpu,
    scratch: &mut embed::Scratch,
    d_out: &[f32],
    ids: &[u32],
    d_table0: &[f32],
    p: embed::Params,
) -> Vec<f32> {
    let d_out_b = gpu.upload(d_out).unwrap();
    let ids_b = gpu.upload(ids).unwrap();
    let mut padded = d_table0.to_vec();
    padded.extend([f32::NAN; TAIL]);
    let mut d_table = gpu.upload(&padded).unwrap();
    embed::backward(gpu, &d_out_b, &ids_b, &mut d_table, scratch, p).unwrap();
    let got = d_table.read(gpu).unwrap();
    check_tail("embed::backward", &got, d_table0.len());
    got[..d_table0.len()].to_vec()
}

/// The float64 sum of each element of d_table with its bound: the f32 result of any order of
/// summing m terms (d_table's value and the m − 1 matching dOut rows; the kernels add slices of
/// rows, then the slices, then into d_table, never more than m − 1 additions deep) lies within
/// γ(m − 1)·Σ|terms| of the exact sum, γ(k) = k·u / (1 − k·u), u = 2⁻²⁴, plus m smallest normals
/// for results flushed to zero.
fn embed_bound(d_out: &[f32], ids: &[u32], d_table0: &[f32], vocab: usize, dim: usize) -> Vec<Rounded> {
    let mut sum: Vec<f64> = d_table0.iter().map(|&v| v as f64).collect();
    let mut abs: Vec<f64> = d_table0.iter().map(|&v| (v as f64).abs()).collect();
    let mut terms = vec![1usize; vocab];
    for (r, &id) in ids.iter().enumerate() {
        if (id as usize) < vocab {
            let v = id as usize;
            terms[v] += 1;
            for c in 0..dim {
                let x = d_out[r * dim + c] as f64;
                sum[v * dim + c] += x;
                abs[v * dim + c] += x.abs();
            }
        }
    }
    let u = f64::from(f32::EPSILON) / 2.0;
    (0..vocab * dim)
        .map(|i| {
            let k = (terms[i / dim] - 1) as f64;
            let gamma = k * u / (1.0 - k * u);
            Rounded { v: sum[i], e: gamma * abs[i] + terms[i / dim] as f64 * f64::from(f32::MIN_POSITIVE) }
        })
        .collect()
}

/// `embed::backward` in both forms: the sliced one (small vocabularies: the bytes tokenizer's
/// 256 at the trainer's width, ragged slices, a dim not a multiple of 4, two column chunks, one
/// table row, two slices) and the one-pass one (a GPT-2-sized vocabulary, a single row), on
/// skewed ids (one id in half the rows, ids ≥ vocab), accumulating into a non-zero table:
/// every element within its rounding bound, the rows of ids that never occur bit for bit as they
/// were (-0.0 and NaN among them, which an added zero would change), the same bits from a second
/// run, and a scratch left dirty by another shape's run changing nothing.
#[test]
fn embed_backward_entry_point_on_skewed_ids() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("embed::backward");
    // (rows, dim, vocab, dispatches): the form each shape must take.
    let shapes: [(usize, usize, usize, usize); 7] = [
        (4096, 768, 256, 2),  // 16 slices of 256 rows: the trainer's table at a quarter its rows
        (1001, 100, 256, 2),  // 4 slices of 251 rows, the last 248; a dim not a multiple of 256
        (700, 1100, 256, 2),  // two column chunks, the second ragged; 3 slices
        (2003, 67, 3000, 2),  // 2 slices (3000 of the 4096 workgroups aimed at); dim % 4 = 3
        (2000, 5, 1, 2),      // one table row, 8 slices
        (513, 24, 50_304, 1), // GPT-2's vocabulary: one pass
        (1, 3, 1, 1),         // one row
    ];
    // One scratch for all the shapes, so stale partial sums and counts of the previous shape
    // lie in it.
    let params = shapes.map(|(r, d, v, _)| embed::Params::new(r as u32, d as u32, v as u32));
    let mut scratch = embed::Scratch::for_shapes(&gpu, params).unwrap();
    for (rows, dim, vocab, dispatches) in shapes {
        let p = embed::Params::new(rows as u32, dim as u32, vocab as u32);
        let what = format!("embed::backward rows={rows} dim={dim} vocab={vocab}");
        assert_eq!(p.dispatches(), dispatches, "{what}: slices {:?}", p.slice_rows());
        assert!(scratch.fits(p), "{what}");
        let ids = skewed_ids(&mut rng, rows, vocab);
        let d_out = uniform(&mut rng, rows * dim, -1.0, 1.0);
        let mut d_table0 = uniform(&mut rng, vocab * dim, -1.0, 1.0);
        let mut occurs = vec![false; vocab];
        ids.iter().filter(|&&id| (id as usize) < vocab).for_each(|&id| occurs[id as usize] = true);
        for v in (0..vocab).filter(|&v| !occurs[v]) {
            let fill = if v % 2 == 0 { -0.0 } else { f32::NAN };
            d_table0[v * dim..(v + 1) * dim].fill(fill);
        }
        let got = run_embed(&gpu, &mut scratch, &d_out, &ids, &d_table0, p);
        for v in (0..vocab).filter(|&v| !occurs[v]) {
            let row = v * dim..(v + 1) * dim;
            assert!(same_bits(&got[row.clone()], &d_table0[row]), "{what}: row {v} (no id) was written");
        }
        let keep: Vec<usize> = (0..vocab * dim).filter(|&i| occurs[i / dim]).collect();
        let bound = embed_bound(&d_out, &ids, &d_table0, vocab, dim);
        let got_kept: Vec<f32> = keep.iter().map(|&i| got[i]).collect();
        let bound_kept: Vec<Rounded> = keep.iter().map(|&i| bound[i]).collect();
        assert_within(&what, &got_kept, &bound_kept);
        let again = run_embed(&gpu, &mut scratch, &d_out, &ids, &d_table0, p);
        assert!(same_bits(&got, &again), "{what}: not deterministic");
    }
}

/// The sliced form's row-major cut: a slice boundary inside a step of 1024 ids and inside a
/// run of equal ids gives the same sums as the one-pass kernel, within both bounds; and a
/// scratch too small for the shape is an error before anything runs.
#[test]
fn embed_backward_slices_against_one_pass() {
    let Some(gpu) = gpu() else { return };
    let mut rng = rng("embed::backward slices");
    let (rows, dim, vocab) = (3000usize, 33usize, 40usize);
    let p = embed::Params::new(rows as u32, dim as u32, vocab as u32);
    assert!(p.slices() > 2, "slices {}", p.slices());
    let mut ids = skewed_ids(&mut rng, rows, vocab);
    // A run of one id across the first slice boundary.
    let cut = p.slice_rows().unwrap() as usize;
    ids[cut - 5..cut + 5].fill(1);
    let d_out = uniform(&mut rng, rows * dim, -1.0, 1.0);
    let d_table0 = uniform(&mut rng, vocab * dim, -1.0, 1.0);
    let mut scratch = embed::Scratch::new(&gpu, p).unwrap();
    let sliced = run_embed(&gpu, &mut scratch, &d_out, &ids, &d_table0, p);
    let one_pass = run_backward(&gpu, &d_out, &ids, &d_table0, vocab, dim);
    let bound = embed_bound(&d_out, &ids, &d_table0, vocab, dim);
    assert_within("sliced", &sliced, &bound);
    assert_within("one pass", &one_pass[..vocab * dim], &bound);

    // A scratch made for a one-pass shape holds one element.
    let mut small = embed::Scratch::new(&gpu, embed::Params::new(1, 1, 1)).unwrap();
    let d_out_b = gpu.upload(&d_out).unwrap();
    let ids_b = gpu.upload(&ids).unwrap();
    let mut d_table = gpu.upload(&d_table0).unwrap();
    let e = embed::backward(&gpu, &d_out_b, &ids_b, &mut d_table, &mut small, p).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e:?}");
    assert!(same_bits(&d_table.read(&gpu).unwrap(), &d_table0), "nothing ran");
}
