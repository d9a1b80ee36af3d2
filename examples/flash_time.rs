//! Times flash attention's forward and backward once per form on the default adapter (a quick
//! comparison while tuning; `benches/attention.rs` is the benchmark).
use kernels::flash_attention::{self, Params};
fn main() {
    let gpu = kernels::Gpu::new().unwrap();
    let (b, s, h, dh) = (1u32, 1024u32, 2u32, 64u32);
    let n = (b * s * h * dh) as usize;
    let r = |seed: u32| {
        (0..n)
            .map(|i| ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32 / 1000.0 - 0.5)
            .collect::<Vec<f32>>()
    };
    let up = |v: Vec<f32>| gpu.upload(&v).unwrap();
    let (q, k, v, d_o) = (up(r(1)), up(r(2)), up(r(3)), up(r(4)));
    let (mut o, mut lse, mut delta) =
        (gpu.zeros(n).unwrap(), gpu.zeros((b * h * s) as usize).unwrap(), gpu.zeros((b * h * s) as usize).unwrap());
    let (mut dq, mut dk, mut dvv) = (gpu.zeros(n).unwrap(), gpu.zeros(n).unwrap(), gpu.zeros(n).unwrap());
    let p = Params::new(b, s, h, h, dh, 0.125);
    for _ in 0..2 {
        let bt = gpu.profiled_batch(8).unwrap();
        flash_attention::forward(&bt, &q, &k, &v, &mut o, &mut lse, p).unwrap();
        flash_attention::backward(&bt, &q, &k, &v, &o, &d_o, &lse, &mut delta, &mut dq, &mut dk, &mut dvv, p).unwrap();
        let prof = bt.submit_profiled().unwrap();
        let t: Vec<String> = prof
            .dispatches
            .iter()
            .map(|d| format!("{} {:.0} ms", d.kernel.name, (d.end_ns - d.start_ns) / 1e6))
            .collect();
        println!("{}", t.join(", "));
    }
}
