//! The embedding kernels (`shaders/01_embedding.wgsl`) against float64 references: lookups with
//! out-of-range ids, more than 65535 rows, the f16 table, the key-major backward with repeated
//! ids (accumulation, determinism, more than 65535 workgroups) and a finite-difference check of
//! the backward against the GPU lookup.

mod common;
#[path = "reference/elementwise.rs"]
mod reference;

use common::{TAIL, assert_close, check_tail, gpu, has_f16, poisoned, rng, uniform};
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
