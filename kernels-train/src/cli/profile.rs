//! `--profile`: the GPU time of every dispatch of one training step.

use super::Failure;
use crate::trainer::Trainer;

/// Runs one step to warm up, then a profiled one, and prints where the time went. Both change
/// the weights: profiling is for measurement, not for a run to keep (nothing is saved).
pub(super) fn run(mut trainer: Trainer) -> Result<(), Failure> {
    let t = trainer.train.clone();
    let seq_len = trainer.model.cfg.seq_len;
    let (x, y) = trainer.corpus.train_batch(t.seed, trainer.step, t.batch, seq_len);
    trainer.model.train_step(&x, &y, t.batch, &t, trainer.step)?;
    let p = trainer.model.profile_step(&x, &y, t.batch, &t, trainer.step)?;
    let mut report = format!(
        "one step: {} dispatches, {:.3} ms of GPU time from first to last, {:.1}% idle between dispatches",
        p.dispatches.len(),
        p.span_ns() / 1e6,
        100.0 * p.idle_fraction()
    );
    for (name, ns, count) in p.by_kernel().iter().take(15) {
        report += &format!("\n  {name:44} {count:5} × {:9.3} ms = {:8.3} ms", ns / *count as f64 / 1e6, ns / 1e6);
    }
    super::output(report)
}
