//! `--profile`: the GPU time of every dispatch of one training step, by kernel and by class.

use super::Failure;
use crate::trainer::Trainer;

/// The class of a kernel (`module::kernel`) in a step's profile: the linear layers' matrix
/// products, attention (every kernel whose name says so: scores, softmax, P·V and their
/// gradients, and the flash kernels), and the memory-bound rest (norms, casts, element-wise,
/// loss, optimizer, the split products' part sums).
pub fn class_of(qualified: &str) -> &'static str {
    let (module, kernel) = qualified.split_once("::").unwrap_or(("", qualified));
    if kernel.contains("attention") || kernel.starts_with("flash_") {
        "attention"
    } else if matches!(module, "linear")
        && (kernel.starts_with("matmul") || kernel.starts_with("gemm"))
        && !kernel.starts_with("matmul_parts_add")
    {
        "products"
    } else {
        "memory-bound"
    }
}

/// Steps of the warm-up before the profiled one: four, then more (four at a time) until the GPU
/// has been busy for `WARM_UP_S` (a large GPU's SM clock falls from its peak to a fraction of it between
/// short bursts of work, and a profile taken after one step measures that), at most
/// `WARM_UP_MAX_STEPS`.
const WARM_UP_S: f64 = 1.5;
const WARM_UP_MAX_STEPS: usize = 64;

/// Runs steps to warm up (see [`WARM_UP_S`]), then a profiled one, and prints where the time
/// went. They all change the weights: profiling is for measurement, not for a run to keep
/// (nothing is saved).
pub(super) fn run(mut trainer: Trainer) -> Result<(), Failure> {
    let t = trainer.train.clone();
    let seq_len = trainer.model.cfg.seq_len;
    let (x, y) = trainer.corpus.train_batch(t.seed, trainer.step, t.batch, seq_len)?;
    let start = std::time::Instant::now();
    for warm in 1..=WARM_UP_MAX_STEPS {
        trainer.model.train_step(&x, &y, t.batch, &t, trainer.step)?;
        // Waiting every few steps keeps the queue short, so the clock reads the GPU's progress.
        if warm % 4 == 0 || warm == WARM_UP_MAX_STEPS {
            trainer.model.gpu().wait().map_err(crate::Error::from)?;
            if start.elapsed().as_secs_f64() >= WARM_UP_S {
                break;
            }
        }
    }
    let p = trainer.model.profile_step(&x, &y, t.batch, &t, trainer.step)?;
    let span = p.span_ns();
    let mut report = format!(
        "one step ({:?} precision): {} dispatches, {:.3} ms of GPU time from first to last, {:.1}% idle between dispatches",
        trainer.model.precision,
        p.dispatches.len(),
        span / 1e6,
        100.0 * p.idle_fraction()
    );
    let by_kernel = p.by_kernel();
    let mut classes: Vec<(&str, f64, usize)> =
        ["products", "attention", "memory-bound"].iter().map(|c| (*c, 0.0, 0)).collect();
    for (name, ns, count) in &by_kernel {
        if let Some(c) = classes.iter_mut().find(|c| c.0 == class_of(name)) {
            c.1 += ns;
            c.2 += count;
        }
    }
    let idle = (span - p.busy_ns()).max(0.0);
    report += "\n  by class:";
    for (class, ns, count) in classes.iter().map(|&(c, ns, n)| (c, ns, n)).chain([("idle", idle, 0)]) {
        let pct = if span > 0.0 { 100.0 * ns / span } else { 0.0 };
        report += &format!("\n  {class:14} {:9.3} ms  {pct:5.1}%  ({count} dispatches)", ns / 1e6);
    }
    // Every kernel, not the first few: the tail of small kernels is where dispatch count and
    // memory-bound time hide.
    report += "\n  by kernel:";
    for (name, ns, count) in &by_kernel {
        report += &format!("\n  {name:44} {count:5} × {:9.3} ms = {:8.3} ms", ns / *count as f64 / 1e6, ns / 1e6);
    }
    super::output(report)
}

#[cfg(test)]
mod tests {
    use super::class_of;

    #[test]
    fn kernels_fall_into_their_classes() {
        assert_eq!(class_of("linear::matmul_t"), "products");
        assert_eq!(class_of("linear::gemm16"), "products");
        assert_eq!(class_of("linear::gemm16_residual"), "products");
        // A product with its epilogue counts as a product, the epilogue's time included.
        assert_eq!(class_of("linear::gemm16_swiglu"), "products");
        assert_eq!(class_of("linear::gemm16_rope_qkv"), "products");
        assert_eq!(class_of("linear::matmul_t_pres"), "products");
        assert_eq!(class_of("linear::matmul_at_pres_split"), "products");
        assert_eq!(class_of("linear::precise_split"), "memory-bound");
        assert_eq!(class_of("linear::matmul_parts_add"), "memory-bound");
        assert_eq!(class_of("linear::matmul_parts_add4"), "memory-bound");
        assert_eq!(class_of("cast::cast_f16x4"), "memory-bound");
        assert_eq!(class_of("attention::attention_fast_scores"), "attention");
        assert_eq!(class_of("backward_attention::attention_backward_dq"), "attention");
        assert_eq!(class_of("attention::attention_scores_f16"), "attention");
        assert_eq!(class_of("attention::flash_forward16"), "attention");
        assert_eq!(class_of("backward_attention::flash_backward_dkdv"), "attention");
        assert_eq!(class_of("norm::rmsnorm_forward"), "memory-bound");
        assert_eq!(class_of("optimizer::adamw_mixed"), "memory-bound");
    }
}
