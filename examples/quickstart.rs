//! Prints the adapter, runs the infrastructure kernels on a million values and checks them
//! against the CPU. `cargo run --example quickstart`
use kernels::infrastructure::{axpy, clamp_inplace, copy, fill_const, fill_zero, scale};
use kernels::{Gpu, ops};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gpu = Gpu::new()?;
    println!("adapter: {}", gpu.report());
    let n = 1_000_000usize;
    // A fixed pseudo-random input (xorshift), so the example needs no crates beyond kernels.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    };
    let xs: Vec<f32> = (0..n).map(|_| next()).collect();
    let ys: Vec<f32> = (0..n).map(|_| next()).collect();

    let warm = gpu.warm_up(kernels::all_kernels())?;
    println!("pipelines: {} built in {:.2} s", warm.built, warm.seconds);

    let x = gpu.upload(&xs)?;
    let mut y = gpu.upload(&ys)?;
    let mut z = gpu.filled(n, f32::NAN)?;
    let batch = gpu.batch();
    let nn = n as u32;
    axpy(&batch, &x, &mut y, axpy::Params::new(nn, 0.5))?;
    scale(&batch, &mut y, scale::Params::new(nn, 2.0))?;
    clamp_inplace(&batch, &mut y, clamp_inplace::Params::new(nn, -1.0, 1.0))?;
    copy(&batch, &y, &mut z, nn)?;
    batch.submit()?;
    let got = z.read(&gpu)?;
    let want: Vec<f32> = xs.iter().zip(&ys).map(|(x, y)| ((y + 0.5 * x) * 2.0).clamp(-1.0, 1.0)).collect();
    let max_err = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    println!("axpy → scale → clamp → copy on {n} values: max |gpu − cpu| = {max_err:e}");

    let sum_gpu = ops::sum(&gpu, &x)?;
    let sum_cpu: f64 = xs.iter().map(|&v| v as f64).sum();
    let max_gpu = ops::max(&gpu, &x)?;
    let max_cpu = xs.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    println!("sum: gpu {sum_gpu:.4}, cpu {sum_cpu:.4}; max: gpu {max_gpu}, cpu {max_cpu}");

    fill_const(&gpu, &mut z, fill_const::Params::new(nn, 3.0))?;
    let threes = z.read(&gpu)?.iter().all(|&v| v == 3.0);
    fill_zero(&gpu, &mut z, nn)?;
    let zeros = z.read(&gpu)?.iter().all(|&v| v == 0.0);

    let ok = max_err <= 1e-6
        && ((sum_gpu as f64 - sum_cpu).abs() <= 1e-3 * sum_cpu.abs().max(1.0))
        && max_gpu == max_cpu
        && threes
        && zeros;
    if ok {
        println!("all checks passed");
        Ok(())
    } else {
        Err("a GPU result differs from the CPU".into())
    }
}
