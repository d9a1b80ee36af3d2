//! A training run (new or resumed): the loop with its progress bar, validation, the checkpoint,
//! the loss curve and a sample at the end.

use super::{Args, Failure, Say, curve_path, model_config, train_config, usage};
use crate::data::Corpus;
use crate::plot::loss_svg;
use crate::trainer::Trainer;
use indicatif::{ProgressBar, ProgressStyle};
use kernels::Gpu;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// A new run from the flags' model and seed; refuses to replace an existing checkpoint unless
/// `--overwrite`.
pub(super) fn start(args: &Args, gpu: &Gpu, corpus: Corpus) -> Result<Trainer, Failure> {
    if args.checkpoint.exists() && !args.overwrite {
        return Err(usage(format!(
            "{} exists: pass --resume to continue that run, --overwrite to replace it, or another --checkpoint",
            args.checkpoint.display()
        )));
    }
    Ok(Trainer::new(gpu, &model_config(args), &train_config(args), corpus)?)
}

/// One line about the model and the data.
pub(super) fn describe(trainer: &Trainer, say: &Say) {
    let cfg = &trainer.model.cfg;
    say.line(format!(
        "model: {} layers, width {}, {} heads ({} kv), ffn {}, context {}; {:.2}M parameters; {:?} attention; data: {} ({} bytes)",
        cfg.layers,
        cfg.dim,
        cfg.heads,
        cfg.kv_heads,
        cfg.ffn_hidden,
        cfg.seq_len,
        cfg.parameters() as f64 / 1e6,
        trainer.model.attention,
        trainer.corpus.source,
        trainer.corpus.len()
    ));
}

/// Trains up to `--steps`, then saves the checkpoint and the loss curve and prints a sample.
/// `stop` (Ctrl-C) ends the run after the current step, with a checkpoint and exit code 130.
pub(super) fn run(args: &Args, mut trainer: Trainer, stop: &AtomicBool, say: &Say) -> Result<(), Failure> {
    let train = trainer.train.clone();
    let cfg = trainer.model.cfg.clone();
    let total = train.steps as u64;
    let eval_every = args.eval_every.unwrap_or((train.steps / 5).max(1)) as u64;
    let bar = if args.quiet { ProgressBar::hidden() } else { ProgressBar::new(total) };
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} steps | {msg} | ETA {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_position(trainer.step.min(total));
    let tokens_per_step = (train.batch * cfg.seq_len) as f64;
    let mut last_loss = trainer.train_history.last().map(|h| h.1);
    let mut last_val = trainer.val_history.last().map(|h| h.1);
    let started = Instant::now();
    let first_step = trainer.step;
    let mut interrupted = false;
    while trainer.step < total {
        if stop.load(Ordering::Relaxed) {
            interrupted = true;
            break;
        }
        let log = (trainer.step + 1).is_multiple_of(args.log_every as u64) || trainer.step + 1 == total;
        if let Some(l) = trainer.step(log)? {
            last_loss = Some(l);
            if !l.is_finite() {
                bar.abandon();
                trainer.save(&args.checkpoint)?;
                return Err(Failure {
                    code: 1,
                    message: format!(
                        "the loss became {l} at step {}: try a lower --lr (checkpoint saved)",
                        trainer.step
                    ),
                });
            }
        }
        if trainer.step.is_multiple_of(eval_every) || trainer.step == total {
            last_val = Some(trainer.validate(args.eval_batches)?);
            // No training loss read back yet (it is read every --log-every steps): a dash.
            let train = last_loss.map_or("-".into(), |l| format!("{l:.4}"));
            let line = format!(
                "step {:>6}  train loss {train:>6}  validation loss {:.4}",
                trainer.step,
                last_val.unwrap_or(f32::NAN)
            );
            // Printed even when the bar is hidden (not a terminal, or --quiet).
            bar.suspend(|| eprintln!("{line}"));
        }
        let elapsed = started.elapsed().as_secs_f64().max(1e-9);
        let tps = (trainer.step - first_step) as f64 * tokens_per_step / elapsed;
        bar.set_message(format!(
            "loss {} | val {} | {:.0} tokens/s",
            last_loss.map_or("-".into(), |l| format!("{l:.3}")),
            last_val.map_or("-".into(), |l| format!("{l:.3}")),
            tps
        ));
        bar.set_position(trainer.step);
    }
    bar.finish();
    trainer.save(&args.checkpoint)?;
    let svg = loss_svg(
        &trainer.train_history,
        &trainer.val_history,
        &format!("{} layers × {} wide, {} steps", cfg.layers, cfg.dim, trainer.step),
    );
    let curve = curve_path(&args.checkpoint);
    std::fs::write(&curve, svg)
        .map_err(|e| Failure { code: 1, message: format!("cannot write {}: {e}", curve.display()) })?;
    let elapsed = started.elapsed().as_secs_f64();
    say.line(format!(
        "saved {} (step {}) and {}; {:.1} s, {:.0} tokens/s",
        args.checkpoint.display(),
        trainer.step,
        curve.display(),
        elapsed,
        (trainer.step - first_step) as f64 * tokens_per_step / elapsed.max(1e-9)
    ));
    if interrupted {
        return Err(Failure {
            code: 130,
            message: format!("interrupted at step {}: checkpoint saved; --resume continues", trainer.step),
        });
    }
    let sample = trainer.generate(b"\n", args.sample_bytes.min(400), args.temperature, args.top_k, args.seed)?;
    println!("--- sample ---\n{}\n--------------", String::from_utf8_lossy(&sample));
    Ok(())
}
