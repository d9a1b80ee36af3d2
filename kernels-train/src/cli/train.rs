//! A training run (new or resumed): the loop with its progress bar, validation, periodic
//! checkpoints, the stop on a signal or a diverged loss, the checkpoint and loss curve at the
//! end, and a sample.

use super::input::Input;
use super::signals::name as signal_name;
use super::{
    Args, Failure, Say, Setup, Stop, corpus_unless_stopped, exit, model_config, stopped_before_training, unless_stopped,
};
use crate::Error;
use crate::checkpoint::Destination;
use crate::metrics;
use crate::plot::loss_svg;
use crate::tokenizer::{Tokenizer, TokenizerChoice};
use crate::trainer::Trainer;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A new run's model shape and corpus from the flags. A `bpe:N` tokenizer is trained on the
/// text here (with a spinner on stderr); shards take the tokenizer they were made with
/// (`--tokenizer`, or the `tokenizer.json` `--tokenize-to` left in their directory; bytes
/// otherwise). A tokenizer other than bytes is written beside the checkpoint (`dest`, if any) as
/// `NAME.tokenizer.json`, and the text is tokenized. Training the BPE and tokenizing watch
/// `stop`: a signal during either ends the run at once.
pub(super) fn prepare(
    args: &Args,
    data: Input,
    val: Option<Input>,
    dest: Option<&Destination>,
    stop: &Stop,
    say: &Say,
) -> Result<Setup, Failure> {
    let source = data.source().to_string();
    let (tokenizer, data) = match (args.tokenizer.clone(), data) {
        (None, data @ Input::Shards(..)) => (data.directory_tokenizer()?.unwrap_or_else(Tokenizer::bytes), data),
        (None | Some(TokenizerChoice::Bytes), data) => (Tokenizer::bytes(), data),
        (Some(TokenizerChoice::File(path)), data) => (Tokenizer::open(&path)?, data),
        (Some(TokenizerChoice::Bpe(n)), Input::Shards(..)) => {
            return Err(super::usage(format!(
                "--tokenizer bpe:{n} trains a BPE on text, and {source} is token shards: pass the tokenizer.json they were made with"
            )));
        }
        (Some(TokenizerChoice::Bpe(n)), Input::Text(text, shown)) => {
            if let Err(e) = std::str::from_utf8(&text) {
                return Err(Error::Data(format!(
                    "{source} is not UTF-8 ({e}): a BPE is trained on text; use --tokenizer bytes"
                ))
                .into());
            }
            say.line(format!("training a byte-level BPE of {n} tokens on {source}"));
            let spinner = if args.quiet { ProgressBar::hidden() } else { ProgressBar::new_spinner() };
            spinner.set_message(format!("training a BPE of {n} tokens"));
            spinner.enable_steady_tick(Duration::from_millis(120));
            let started = Instant::now();
            // The text goes to the worker and comes back with the tokenizer: no copy of it.
            let trained = unless_stopped(stop, args, "a BPE was trained", move || {
                // Checked above: UTF-8.
                let t = Tokenizer::train_bpe(std::str::from_utf8(&text).unwrap_or_default(), n);
                (t, text)
            });
            spinner.finish_and_clear();
            let (t, text) = trained?;
            let t = t?;
            say.line(format!("BPE trained: {} in {:.1} s", t.describe(), started.elapsed().as_secs_f64()));
            (t, Input::Text(text, shown))
        }
    };
    if let (Some(dest), Some(json)) = (dest, tokenizer.json()) {
        // A copy for other tools (the checkpoint records its own): not writing it is no reason
        // to stop, like the loss curve. A directory in its place was refused before this.
        match dest.write_tokenizer(json) {
            Ok(to) => say.line(format!("tokenizer: {}", to.display())),
            Err(e) => crate::note(format!("warning: the tokenizer's copy beside the checkpoint was not written: {e}")),
        }
    }
    let started = Instant::now();
    let text_bytes = match &data {
        Input::Text(t, _) if !tokenizer.is_bytes() => Some(t.len()),
        _ => None,
    };
    let corpus = corpus_unless_stopped(stop, args, data, val, tokenizer)?;
    if let Some(bytes) = text_bytes {
        say.line(format!(
            "tokenized {bytes} bytes into {} tokens in {:.1} s",
            corpus.len(),
            started.elapsed().as_secs_f64()
        ));
    }
    let cfg = model_config(args).with_vocab(corpus.tokenizer().model_vocab());
    Ok(Setup::New(cfg, corpus))
}

/// One line about the model and the data.
pub(super) fn describe(trainer: &Trainer, say: &Say) {
    let cfg = &trainer.model.cfg;
    say.line(format!(
        "model: {} layers, width {}, {} heads ({} kv), ffn {}, context {}, vocabulary {}; {:.2}M parameters; {:?} attention; data: {} ({} tokens: {})",
        cfg.layers,
        cfg.dim,
        cfg.heads,
        cfg.kv_heads,
        cfg.ffn_hidden,
        cfg.seq_len,
        cfg.vocab,
        cfg.parameters() as f64 / 1e6,
        trainer.model.attention,
        trainer.corpus.source,
        trainer.corpus.len(),
        trainer.corpus.tokenizer().describe()
    ));
    let eight = trainer.model.optimizer() == crate::optim::OptimizerKind::AdamW8bit;
    let precision = match trainer.train.precision {
        crate::precision::Precision::Auto if eight => crate::precision::Precision::F32,
        p => p,
    };
    say.line(precision.describe(trainer.model.gpu()));
    if let Some((copies, transposed)) = trainer.model.weight_copies_bytes() {
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        say.line(if transposed > 0 {
            format!(
                "weights' f16 copies: {:.1} MiB, and {:.1} MiB of transposed copies for the input gradients",
                mib(copies),
                mib(transposed)
            )
        } else {
            format!("weights' f16 copies: {:.1} MiB", mib(copies))
        });
    }
    let bytes = trainer.model.optimizer_state_bytes();
    say.line(format!(
        "optimizer: {}, {:.1} MiB of state ({:.2} bytes a parameter){}",
        trainer.model.optimizer().name(),
        bytes as f64 / (1u64 << 20) as f64,
        bytes as f64 / cfg.parameters() as f64,
        if eight && trainer.train.precision == crate::precision::Precision::Auto {
            "; f32 precision, the one it runs in"
        } else {
            ""
        }
    ));
}

/// The rate of the training steps alone, as PyTorch users time theirs after warm-up: wall time
/// between the first and the last point where the GPU had finished every step recorded (a step
/// whose loss is read), less the validations and periodic saves between them, each timed from a
/// drained GPU so that it holds none of the training's work. The first such point comes after at
/// least one step, so start-up and first-use costs fall before it.
#[derive(Default)]
struct Steady {
    /// (step, seconds of training) at the first synchronised point after the first step.
    first: Option<(u64, f64)>,
    /// The same at the latest one.
    last: Option<(u64, f64)>,
    /// Seconds spent in validations and saves so far.
    paused: f64,
}

impl Steady {
    /// A step's loss was read at `step`: every step up to it has run.
    fn synced(&mut self, step: u64, started: Instant) {
        let at = (step, started.elapsed().as_secs_f64() - self.paused);
        self.first.get_or_insert(at);
        self.last = Some(at);
    }

    /// Drains the GPU (the training work is counted, not paused) and starts a pause.
    fn pause(&self, trainer: &Trainer) -> Result<Instant, Error> {
        trainer.model.gpu().wait()?;
        Ok(Instant::now())
    }

    fn resume(&mut self, since: Instant) {
        self.paused += since.elapsed().as_secs_f64();
    }

    /// (from step, to step, tokens/s) where at least one step lies between two points.
    fn rate(&self, tokens_per_step: f64) -> Option<(u64, u64, f64)> {
        let ((s0, t0), (s1, t1)) = (self.first?, self.last?);
        (s1 > s0 && t1 > t0).then(|| (s0, s1, (s1 - s0) as f64 * tokens_per_step / (t1 - t0)))
    }
}

/// The checkpoint's state as this run knows it: the step of the last good checkpoint at the
/// destination (the resumed one, or the last save), if any.
struct Saves<'a> {
    /// Rank 0's destination; `None` on the other ranks of a data-parallel run, which write
    /// nothing.
    dest: Option<&'a Destination>,
    /// The checkpoint's path (rank 0 writes it).
    path: &'a std::path::Path,
    good: Option<u64>,
    /// Step and time of the last save (or of the start).
    last: (u64, Instant),
    /// The step this process last saved.
    saved: Option<u64>,
}

impl Saves<'_> {
    /// Saves the checkpoint and the loss curve. A diverged state is written to the diverged
    /// file instead (the checkpoint is left as it was) and returned as [`Error::Diverged`],
    /// with a message that says what is where; a failed write is an [`Error::Save`].
    fn save(&mut self, trainer: &mut Trainer, say: &Say) -> Result<(), Error> {
        self.last = (trainer.step, Instant::now());
        let Some(dest) = self.dest else {
            // Another rank: rank 0 writes the state every rank holds.
            self.good = Some(trainer.step);
            self.saved = Some(trainer.step);
            return Ok(());
        };
        let ck = trainer.checkpoint()?;
        if let Some(why) = trainer.divergence(&ck)? {
            return Err(self.diverged(&ck, why));
        }
        dest.save(&ck)?;
        self.good = Some(trainer.step);
        self.saved = Some(trainer.step);
        let cfg = &trainer.model.cfg;
        let title = format!("{} layers × {} wide, {} steps", cfg.layers, cfg.dim, trainer.step);
        // The curve is the log's; a log that cannot be read leaves the checkpoint's history.
        let logged = metrics::read(&metrics::metrics_path(dest.path())).map(|r| metrics::curves(&r));
        let (train, val) = match logged {
            Ok((t, v)) if !t.is_empty() || !v.is_empty() => (t, v),
            _ => (trainer.train_history.clone(), trainer.val_history.clone()),
        };
        if let Err(e) = dest.write_curve(&loss_svg(&train, &val, &title)) {
            say.line(format!("warning: the loss curve was not written: {e}"));
        }
        Ok(())
    }

    /// Writes a diverged state beside the checkpoint (never over it); the error says what is
    /// where.
    fn diverged(&self, ck: &crate::checkpoint::Checkpoint, why: String) -> Error {
        let record = match self.dest.map(|d| d.save_diverged(ck)) {
            Some(Ok(to)) => format!("the diverged state is in {} (to inspect, not to resume)", to.display()),
            Some(Err(e)) => format!("the diverged state was not kept either ({e})"),
            None => "rank 0 keeps the diverged state".to_string(),
        };
        Error::Diverged(format!("{why} (try a lower --lr); {}; {record}", self.kept()))
    }

    /// What the checkpoint path holds now.
    fn kept(&self) -> String {
        let path = self.path.display();
        match self.good {
            Some(step) => format!("the last good checkpoint, {path} (step {step}), is kept"),
            None => format!("no checkpoint of this run was saved ({path} is as it was)"),
        }
    }

    /// A save that had to succeed failed: the state goes to the temporary directory instead,
    /// if it can, and the message says where everything is.
    fn rescue(&self, trainer: &mut Trainer, e: Error) -> Failure {
        let stem = self.path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let to: PathBuf =
            std::env::temp_dir().join(format!("{stem}.step{}.rescue-{}.safetensors", trainer.step, std::process::id()));
        let message = match trainer.save(&to) {
            Ok(()) => format!(
                "{e}. The run's state (step {}) was written to {} instead: move it to {} and pass --resume; {}",
                trainer.step,
                to.display(),
                self.path.display(),
                self.kept()
            ),
            Err(e2) => format!(
                "{e}; writing it to {} failed too ({e2}): the state of step {} is lost; {}",
                to.display(),
                trainer.step,
                self.kept()
            ),
        };
        Failure { code: exit::SAVE_FAILED, message }
    }
}

/// Trains up to `--steps`, saving a checkpoint every `--checkpoint-every` steps and every
/// `--checkpoint-minutes` minutes, then saves the checkpoint and the loss curve and prints a
/// sample. A signal in `stop` ends the run after the current step, with a checkpoint and exit
/// code 128 + the signal; a loss that becomes NaN or infinite ends it with the diverged state
/// beside the checkpoint, never over it (exit code 3).
///
/// In a data-parallel run every rank runs this loop in step; rank 0 alone writes (checkpoints,
/// the metrics log, the loss curve, the sample) and decides when to save, a signal on any rank
/// stops every rank after the same step, and the weights are checked identical every
/// `--check-weights-every` steps. A rank that dies or hangs ends the others with an error that
/// says so and which checkpoint is kept.
pub(super) fn run(
    args: &Args,
    trainer: Trainer,
    dest: Option<&Destination>,
    stop: &Stop,
    say: &Say,
) -> Result<(), Failure> {
    let resumed = args.resume.then_some(trainer.step);
    let mut saves =
        Saves { dest, path: &args.checkpoint, good: resumed, last: (trainer.step, Instant::now()), saved: None };
    train_loop(args, trainer, &mut saves, stop, say).map_err(|mut f| {
        if f.code == exit::RANKS {
            f.message = format!("{}; {}", f.message, saves.kept());
        }
        f
    })
}

/// What every rank learns at the start of a step: a stop asked for on any rank (this rank's
/// signal first), and whether rank 0 saves after the step (`due` there).
fn agree(trainer: &mut Trainer, local: Option<i32>, due: bool) -> Result<(Option<i32>, bool), Error> {
    let r = trainer.rank();
    if r.world == 1 {
        return Ok((local, due));
    }
    let mut v = vec![0.0; 66];
    if let Some(s) = local {
        v[s.clamp(0, 64) as usize] = 1.0;
    }
    v[65] = f64::from(u8::from(due && r.writes()));
    let step = trainer.step;
    trainer.collective().sum_f64(&mut v).map_err(|e| match e {
        Error::Dist(m) => Error::Dist(format!("step {step}: {m}")),
        e => e,
    })?;
    Ok((local.or_else(|| v[..65].iter().position(|&n| n > 0.0).map(|s| s as i32)), v[65] > 0.0))
}

/// Whether rank 0's save went well enough to go on (every rank learns it): a failed periodic
/// write is a warning there, anything else ends every rank.
fn save_agreed(trainer: &mut Trainer, fatal: bool) -> Result<(), Error> {
    let step = trainer.step;
    if trainer.all_ranks(!fatal)? || fatal {
        return Ok(());
    }
    Err(Error::Dist(format!("rank 0 ended at step {step} while saving the checkpoint (its message says why)")))
}

fn train_loop(args: &Args, mut trainer: Trainer, saves: &mut Saves, stop: &Stop, say: &Say) -> Result<(), Failure> {
    let train = trainer.train.clone();
    let cfg = trainer.model.cfg.clone();
    let total = train.steps as u64;
    let eval_every = args.eval_every.unwrap_or((train.steps / 5).max(1)) as u64;
    let every_steps = args.checkpoint_every.map(|n| n as u64);
    let every_time = super::args::checkpoint_interval(args).map_err(super::usage)?;
    let _training = super::signals::Training::begin();
    // The metrics log is (re)written as it opens: not for a run stopped before it trains.
    if let Some(signal) = stop.requested() {
        return Err(stopped_before_training(signal, args, "before the first step"));
    }
    let rank = trainer.rank();
    let history = (&trainer.train_history, &trainer.val_history);
    let mut metrics_log = saves.dest.map(|dest| {
        let (log, warning) = metrics::Log::open(&metrics::metrics_path(dest.path()), trainer.step, Some(history));
        if let Some(w) = warning {
            say.line(format!("warning: {w}"));
        }
        log
    });
    let append = |log: &mut Option<metrics::Log>, record: &metrics::Record| log.as_mut().and_then(|l| l.append(record));
    let bar = if args.quiet || !rank.writes() { ProgressBar::hidden() } else { ProgressBar::new(total) };
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} steps | {msg} | ETA {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_position(trainer.step.min(total));
    let tokens_per_step = (rank.world * train.batch * cfg.seq_len) as f64;
    let mut last_loss = trainer.train_history.last().map(|h| h.1);
    let mut last_val = trainer.val_history.last().map(|h| h.1);
    let started = Instant::now();
    let first_step = trainer.step;
    saves.last = (trainer.step, started);
    let mut steady = Steady::default();
    let mut stopped_by = None;
    let mut due = false;
    while trainer.step < total {
        // Whether to save after the last step and whether to stop are agreed by every rank.
        let (signal, save_now) = agree(&mut trainer, stop.requested(), due)?;
        if save_now && trainer.step < total {
            let paused = steady.pause(&trainer)?;
            let fatal = match saves.save(&mut trainer, say) {
                Ok(()) => false,
                Err(e @ Error::Save(_)) => {
                    bar.suspend(|| {
                        crate::note(format!(
                            "warning: no periodic checkpoint at step {}: {e}; training goes on and tries again at the next one ({})",
                            trainer.step,
                            saves.kept()
                        ))
                    });
                    false
                }
                Err(e) => {
                    bar.abandon();
                    let _ = save_agreed(&mut trainer, true);
                    return Err(e.into());
                }
            };
            save_agreed(&mut trainer, fatal)?;
            steady.resume(paused);
        }
        if let Some(signal) = signal {
            stopped_by = Some(signal);
            break;
        }
        if rank.world > 1
            && trainer.step > first_step
            && (trainer.step - first_step).is_multiple_of(args.check_weights_every as u64)
        {
            trainer.check_replicas()?;
        }
        let log = (trainer.step + 1).is_multiple_of(args.log_every as u64) || trainer.step + 1 == total;
        let mut record = metrics::Record {
            step: trainer.step + 1,
            lr: Some(train.lr_at(trainer.step as usize)),
            ..Default::default()
        };
        let loss = match trainer.step(log) {
            Ok(l) => l,
            Err(e @ Error::Data(_)) => {
                // The batch could not be read (a shard changed under the run): the step did not
                // run, so the state is whole; keep it before stopping.
                bar.abandon();
                let kept = match saves.save(&mut trainer, say) {
                    Ok(()) => format!("the state of step {} is saved in {}", trainer.step, saves.path.display()),
                    Err(e2) => format!("saving the state failed too ({e2})"),
                };
                return Err(Failure { code: exit::USAGE, message: format!("{e}; {kept}") });
            }
            Err(e) => return Err(e.into()),
        };
        if let Some(l) = loss {
            steady.synced(trainer.step, started);
            last_loss = Some(l);
            record.loss = Some(l);
            if !l.is_finite() {
                bar.abandon();
                append(&mut metrics_log, &record);
                let ck = trainer.checkpoint()?;
                return Err(saves.diverged(&ck, format!("the loss became {l} at step {}", trainer.step)).into());
            }
        }
        let validated = trainer.step.is_multiple_of(eval_every) || trainer.step == total;
        if validated {
            let paused = steady.pause(&trainer)?;
            last_val = Some(trainer.validate(args.eval_batches)?);
            steady.resume(paused);
            record.val_loss = last_val;
            // No training loss read back yet (it is read every --log-every steps): a dash.
            let train = last_loss.map_or("-".into(), |l| format!("{l:.4}"));
            let line = format!(
                "step {:>6}  train loss {train:>6}  validation loss {:.4}{}",
                trainer.step,
                last_val.unwrap_or(f32::NAN),
                trainer.scaling_note()
            );
            // Printed even when the bar is hidden (not a terminal, or --quiet), by rank 0.
            if rank.writes() {
                bar.suspend(|| crate::note(&line));
            }
        }
        let elapsed = started.elapsed().as_secs_f64().max(1e-9);
        let tps = (trainer.step - first_step) as f64 * tokens_per_step / elapsed;
        if record.loss.is_some() || validated {
            record.tokens_per_s = Some(tps);
            record.time_s = Some(elapsed);
            record.loss_scale = trainer.scaler.map(|s| s.scale);
            record.grad_norm = trainer.model.read_grad_norm().ok().flatten();
            record.skipped = trainer.scaler.map(|s| s.skipped);
            if let Some(w) = append(&mut metrics_log, &record) {
                bar.suspend(|| crate::note(format!("warning: {w}")));
            }
        }
        // Rank 0's clock decides; the save happens at the top of the next step, once every
        // rank knows (the last step's save is the final one below).
        due = every_steps.is_some_and(|n| trainer.step - saves.last.0 >= n)
            || every_time.is_some_and(|t| saves.last.1.elapsed() >= t);
        bar.set_message(format!(
            "loss {} | val {} | {:.0} tokens/s{}",
            last_loss.map_or("-".into(), |l| format!("{l:.3}")),
            last_val.map_or("-".into(), |l| format!("{l:.3}")),
            tps,
            trainer.scaling_note()
        ));
        bar.set_position(trainer.step);
    }
    bar.finish();
    if let Some(signal) = stopped_by
        && trainer.step == first_step
    {
        return Err(stopped_before_training(signal, args, "before the first step"));
    }
    if rank.world > 1 {
        trainer.check_replicas()?;
    }
    if saves.saved != Some(trainer.step) {
        let saved = saves.save(&mut trainer, say);
        save_agreed(&mut trainer, saved.is_err())?;
        match saved {
            Ok(()) => {}
            Err(e @ Error::Save(_)) => return Err(saves.rescue(&mut trainer, e)),
            Err(e) => return Err(e.into()),
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let steady_note = steady.rate(tokens_per_step).map_or(String::new(), |(from, to, tps)| {
        format!("; steps {from}–{to}: {tps:.0} tokens/s (without the first steps, validation and saves)")
    });
    say.line(format!(
        "saved {} (step {}) and {}; {:.1} s, {:.0} tokens/s{steady_note}{}",
        saves.path.display(),
        trainer.step,
        crate::checkpoint::curve_path(saves.path).display(),
        elapsed,
        (trainer.step - first_step) as f64 * tokens_per_step / elapsed.max(1e-9),
        trainer.scaling_note()
    ));
    if let Some(signal) = stopped_by {
        return Err(Failure {
            code: exit::SIGNALLED + signal,
            message: format!(
                "stopped by {} at step {}: checkpoint saved; --resume continues",
                signal_name(signal),
                trainer.step
            ),
        });
    }
    if !rank.writes() {
        return Ok(());
    }
    let sample = trainer.sample(args.sample_tokens.min(400), args.temperature, args.top_k, args.seed)?;
    super::output(format!("--- sample ---\n{sample}\n--------------"))
}

#[cfg(test)]
mod steady_tests {
    use super::Steady;

    #[test]
    fn the_steady_rate_counts_the_steps_between_its_points() {
        let s = Steady { first: Some((50, 10.0)), last: Some((300, 35.0)), paused: 2.0 };
        let (from, to, tps) = s.rate(8192.0).unwrap();
        assert_eq!((from, to), (50, 300));
        assert!((tps - 250.0 * 8192.0 / 25.0).abs() < 1e-6, "{tps}");
        // One point (a single logged step) gives no rate.
        assert!(Steady { first: Some((50, 10.0)), last: Some((50, 10.0)), paused: 0.0 }.rate(1.0).is_none());
        assert!(Steady::default().rate(1.0).is_none());
    }
}
