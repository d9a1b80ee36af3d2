//! Parts of one allocation (`Buffer::part`): each binds, reads, writes, copies and clears only
//! its own elements; kernels over parts give the bits they give over separate buffers; the
//! per-dispatch aliasing rules for parts of one allocation hold.

mod common;

use common::{gpu, rng, uniform};
use kernels::infrastructure::{axpy, scale};
use kernels::optimizer::adamw_update;
use kernels::{Error, Gpu};

/// A poisoned allocation holding tensors of `lens` at `Gpu::part_layout`'s starts, and the parts.
fn parted(gpu: &Gpu, lens: &[usize]) -> (kernels::Buffer<f32>, Vec<kernels::Buffer<f32>>, Vec<usize>) {
    let (starts, total) = gpu.part_layout(lens, 4);
    let whole = gpu.filled(total, f32::NAN).unwrap();
    let parts = starts.iter().zip(lens).map(|(&s, &n)| whole.part(s..s + n).unwrap()).collect();
    (whole, parts, starts)
}

#[test]
fn layout_puts_every_start_on_the_alignment() {
    let Some(gpu) = gpu() else { return };
    let align = gpu.storage_alignment() as usize;
    let lens = [1usize, 0, 37, 1000, 5];
    for elem in [2usize, 4] {
        let (starts, total) = gpu.part_layout(&lens, elem);
        assert_eq!(starts[0], 0);
        for (i, w) in starts.windows(2).enumerate() {
            assert!(w[1] >= w[0] + lens[i], "tensor {i} overlaps the next");
        }
        assert!(starts.iter().all(|&s| (s * elem).is_multiple_of(align)), "{starts:?} for {elem}-byte elements");
        assert!(total >= starts[4] + lens[4] && (total * elem).is_multiple_of(align));
    }
}

#[test]
fn parts_read_write_copy_and_clear_only_their_elements() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng("parts_read_write_copy_and_clear_only_their_elements");
    let lens = [300usize, 17, 1024];
    let (whole, mut parts, starts) = parted(&gpu, &lens);
    let data: Vec<Vec<f32>> = lens.iter().map(|&n| uniform(&mut r, n, -1.0, 1.0)).collect();
    for (p, d) in parts.iter_mut().zip(&data) {
        p.write(&gpu, d).unwrap();
    }
    for (p, d) in parts.iter().zip(&data) {
        assert!(p.is_part() && p.byte_offset().is_multiple_of(gpu.storage_alignment()));
        assert_eq!(&p.read(&gpu).unwrap(), d);
        assert_eq!(p.read_range(&gpu, 3..9).unwrap(), d[3..9].to_vec());
    }
    // Placement in the allocation: each tensor at its start, the gaps untouched.
    let all = whole.read(&gpu).unwrap();
    let mut inside = vec![false; all.len()];
    for ((&s, d), &n) in starts.iter().zip(&data).zip(&lens) {
        assert_eq!(&all[s..s + n], &d[..]);
        inside[s..s + n].iter_mut().for_each(|x| *x = true);
    }
    assert!(all.iter().zip(&inside).all(|(v, &i)| i || v.is_nan()), "a write reached past its part");

    let b = gpu.batch();
    let (a, rest) = parts.split_at_mut(1);
    b.copy_range(&a[0], 0, &mut rest[0], 4, 12).unwrap();
    b.clear(&mut rest[1]).unwrap();
    b.submit().unwrap();
    let mut want1 = data[1].clone();
    want1[4..16].copy_from_slice(&data[0][..12]);
    assert_eq!(parts[1].read(&gpu).unwrap(), want1);
    assert_eq!(parts[2].read(&gpu).unwrap(), vec![0.0; lens[2]]);
    assert_eq!(parts[0].read(&gpu).unwrap(), data[0]);
    let all = whole.read(&gpu).unwrap();
    assert!(all.iter().zip(&inside).all(|(v, &i)| i || v.is_nan()), "a copy or clear reached past its part");
}

#[test]
fn kernels_over_parts_match_separate_buffers() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng("kernels_over_parts_match_separate_buffers");
    let n = 2500;
    // AdamW binds four writable parts of one allocation in one dispatch.
    let (whole, mut parts, starts) = parted(&gpu, &[n, n, n, n]);
    let init: Vec<Vec<f32>> = vec![
        uniform(&mut r, n, -1.0, 1.0),
        uniform(&mut r, n, -0.1, 0.1),
        uniform(&mut r, n, -0.01, 0.01),
        uniform(&mut r, n, 0.0, 1e-4),
    ];
    let mut separate: Vec<kernels::Buffer<f32>> = init.iter().map(|d| gpu.upload(d).unwrap()).collect();
    for (p, d) in parts.iter_mut().zip(&init) {
        p.write(&gpu, d).unwrap();
    }
    let stats = gpu.upload(&[0.5f32, 1.0, 0.0, 0.0]).unwrap();
    let h = adamw_update::Params::new(n as u32, 1e-3, 0.9, 0.95, 1e-8, 0.1, 0.1, 0.05);
    let [w, g, m, v] = &mut parts[..] else { unreachable!() };
    adamw_update(&gpu, w, g, m, v, &stats, h).unwrap();
    let [w, g, m, v] = &mut separate[..] else { unreachable!() };
    adamw_update(&gpu, w, g, m, v, &stats, h).unwrap();
    for (i, (p, s)) in parts.iter().zip(&separate).enumerate() {
        let (got, want) = (p.read(&gpu).unwrap(), s.read(&gpu).unwrap());
        assert!(common::same_bits(&got, &want), "tensor {i} differs from the separate buffers' update");
        assert!(got.iter().all(|x| x.is_finite()));
    }
    // The update changed the weights (the check above compares something that moved).
    assert!(parts[0].read(&gpu).unwrap() != init[0]);
    // A read-only part and a writable part of different allocations, and one kernel over the
    // whole allocation, which covers every part and the gaps.
    let (_, xs, _) = parted(&gpu, &[n]);
    let mut x = gpu.upload(&uniform(&mut r, n, -1.0, 1.0)).unwrap();
    let xv = x.read(&gpu).unwrap();
    let mut y = xs.into_iter().next().unwrap();
    y.write(&gpu, &vec![1.0; n]).unwrap();
    axpy(&gpu, &x, &mut y, axpy::Params::new(n as u32, 2.0)).unwrap();
    let want: Vec<f32> = xv.iter().map(|&a| 1.0 + 2.0 * a).collect();
    assert_eq!(y.read(&gpu).unwrap(), want);
    scale(&gpu, &mut x, scale::Params::new(n as u32, 0.5)).unwrap();
    let mut whole = whole;
    let total = whole.len();
    let before = whole.read(&gpu).unwrap();
    scale(&gpu, &mut whole, scale::Params::new(total as u32, -2.0)).unwrap();
    let after = whole.read(&gpu).unwrap();
    for &s in &starts {
        for i in s..s + n {
            assert_eq!(after[i], -2.0 * before[i]);
        }
    }
}

#[test]
fn parts_of_one_allocation_follow_the_usage_rules() {
    let Some(gpu) = gpu() else { return };
    let (whole, mut parts, starts) = parted(&gpu, &[64, 64]);
    let n = axpy::Params::new(64, 1.0);
    // Read-only beside writable, disjoint: graphics APIs reject the usage; so does the runtime.
    let (a, b) = parts.split_at_mut(1);
    let e = axpy(&gpu, &a[0], &mut b[0], n).unwrap_err();
    assert!(matches!(e, Error::Aliased { .. }), "{e:?}");
    // Overlapping: a part that covers another.
    let mut over = whole.part(starts[1]..starts[1] + 64).unwrap();
    let e = axpy(&gpu, &parts[1], &mut over, n).unwrap_err();
    assert!(matches!(e, Error::Aliased { .. }), "{e:?}");
    // A start off the alignment, and a range past the end.
    if gpu.storage_alignment() > 4 {
        assert!(matches!(whole.part(1..10), Err(Error::LengthMismatch { .. })));
    }
    assert!(matches!(whole.part(0..whole.len() + 1), Err(Error::LengthMismatch { .. })));
    // The context still works: the rejected calls ran nothing.
    let mut y = gpu.zeros::<f32>(64).unwrap();
    axpy(&gpu, &parts[0], &mut y, n).unwrap();
    assert!(y.read(&gpu).unwrap().iter().all(|v| v.is_nan()));
}
