//! The command line of `cargo run --release --example train`.

use crate::Error;
use crate::checkpoint;
use crate::config::{ModelConfig, TrainConfig};
use crate::data::Corpus;
use crate::model::{Attention, Model};
use crate::plot::loss_svg;
use crate::trainer::{Trainer, generate};
use clap::{Parser, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Model sizes.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum Preset {
    /// 2 layers, width 64, batch 8: trains in about four minutes on a 2-core CPU adapter (lavapipe).
    Tiny,
    /// GPT-2 small's shape (12 layers, width 768, 12 heads, context 1024): for real GPUs.
    Gpt2Small,
}

/// Train a LLaMA-style byte-level language model on the GPU, or sample from one.
#[derive(Parser, Debug)]
#[command(name = "train", version, about, long_about = None)]
pub struct Args {
    /// Model size: the defaults of the flags below.
    #[arg(long, value_enum, default_value = "tiny")]
    pub preset: Preset,
    /// Transformer blocks.
    #[arg(long)]
    pub layers: Option<usize>,
    /// Model width.
    #[arg(long)]
    pub dim: Option<usize>,
    /// Query heads (must divide --dim).
    #[arg(long)]
    pub heads: Option<usize>,
    /// Key/value heads (must divide --heads).
    #[arg(long)]
    pub kv_heads: Option<usize>,
    /// SwiGLU width (default ⅔·4·dim rounded up to 32).
    #[arg(long)]
    pub ffn: Option<usize>,
    /// Context length in bytes.
    #[arg(long)]
    pub seq_len: Option<usize>,
    /// Sequences per step.
    #[arg(long)]
    pub batch: Option<usize>,
    /// Training steps (in total, counting those of a resumed run).
    #[arg(long)]
    pub steps: Option<usize>,
    /// Peak learning rate.
    #[arg(long)]
    pub lr: Option<f32>,
    /// Final learning rate of the cosine decay.
    #[arg(long)]
    pub min_lr: Option<f32>,
    /// Warm-up steps.
    #[arg(long)]
    pub warmup: Option<usize>,
    /// Decoupled weight decay.
    #[arg(long, default_value_t = 0.1)]
    pub weight_decay: f32,
    /// Global gradient-norm clip (0: off).
    #[arg(long, default_value_t = 1.0)]
    pub clip: f32,
    /// Seed of the weights and of the batches.
    #[arg(long, default_value_t = 1234)]
    pub seed: u64,
    /// Steps between validation losses.
    #[arg(long)]
    pub eval_every: Option<usize>,
    /// Validation batches per evaluation.
    #[arg(long, default_value_t = 4)]
    pub eval_batches: usize,
    /// Steps between reads of the training loss (each read waits for the GPU).
    #[arg(long, default_value_t = 10)]
    pub log_every: usize,
    /// A UTF-8 text file to train on (default: this project's own text, built in).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Where the checkpoint goes (the loss curve goes beside it, `.svg`).
    #[arg(long, default_value = "checkpoints/model.safetensors")]
    pub checkpoint: PathBuf,
    /// Continue the run saved at --checkpoint.
    #[arg(long)]
    pub resume: bool,
    /// Replace an existing checkpoint with a new run.
    #[arg(long)]
    pub overwrite: bool,
    /// Sample from the checkpoint, continuing this prompt, and exit.
    #[arg(long)]
    pub generate: Option<String>,
    /// Bytes to sample.
    #[arg(long, default_value_t = 300)]
    pub sample_bytes: usize,
    /// Sampling temperature (0: greedy).
    #[arg(long, default_value_t = 0.8)]
    pub temperature: f32,
    /// Sample among the k most likely bytes (0: all).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Time one step on the GPU (timestamps around every dispatch) and print where it went.
    #[arg(long)]
    pub profile: bool,
    /// No progress bar (for logs).
    #[arg(long)]
    pub quiet: bool,
    /// Attention path: `fast` (batched products over materialised probabilities, a
    /// [batch, heads, seq, seq] workspace per layer), `streaming` (no workspace, slower), or
    /// `auto` (fast when its workspaces fit).
    #[arg(long, value_enum, default_value = "auto")]
    pub attention: AttentionArg,
}

/// The `--attention` values.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum AttentionArg {
    /// Fast when it fits.
    Auto,
    /// Materialised probabilities.
    Fast,
    /// Streaming kernels.
    Streaming,
}

/// A failure with its exit code.
#[derive(Debug)]
pub struct Failure {
    /// Process exit code: 2 for a usage or configuration mistake, 1 for anything else.
    pub code: i32,
    /// What to tell the user.
    pub message: String,
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        let code = match e {
            Error::Config(_) | Error::Data(_) | Error::Checkpoint(_) => 2,
            Error::Gpu(_) => 1,
        };
        Failure { code, message: e.to_string() }
    }
}

fn usage(message: String) -> Failure {
    Failure { code: 2, message }
}

/// The model shape the flags ask for (preset defaults, flags on top).
pub fn model_config(a: &Args) -> ModelConfig {
    let (layers, dim, heads, kv, seq) = match a.preset {
        Preset::Tiny => (2, 64, 4, 2, 64),
        Preset::Gpt2Small => (12, 768, 12, 12, 1024),
    };
    let mut c = ModelConfig::new(
        a.dim.unwrap_or(dim),
        a.layers.unwrap_or(layers),
        a.heads.unwrap_or(heads),
        a.kv_heads.unwrap_or(kv),
        a.seq_len.unwrap_or(seq),
    );
    if let Some(f) = a.ffn {
        c.ffn_hidden = f;
    }
    c
}

/// The training settings the flags ask for.
pub fn train_config(a: &Args) -> TrainConfig {
    let (batch, steps, lr, min_lr, warmup) = match a.preset {
        Preset::Tiny => (8, 150, 4e-3, 4e-4, 15),
        Preset::Gpt2Small => (8, 2000, 6e-4, 6e-5, 100),
    };
    TrainConfig {
        batch: a.batch.unwrap_or(batch),
        steps: a.steps.unwrap_or(steps),
        lr: a.lr.unwrap_or(lr),
        min_lr: a.min_lr.unwrap_or(min_lr),
        warmup: a.warmup.unwrap_or(warmup),
        weight_decay: a.weight_decay,
        clip: a.clip,
        seed: a.seed,
        attention: match a.attention {
            AttentionArg::Auto => Attention::Auto,
            AttentionArg::Fast => Attention::Fast,
            AttentionArg::Streaming => Attention::Streaming,
        },
        ..TrainConfig::default()
    }
}

fn model_flags_given(a: &Args) -> bool {
    a.layers.is_some()
        || a.dim.is_some()
        || a.heads.is_some()
        || a.kv_heads.is_some()
        || a.ffn.is_some()
        || a.seq_len.is_some()
}

/// `model.safetensors` → `model.loss.svg`.
pub fn curve_path(checkpoint: &Path) -> PathBuf {
    let stem = checkpoint.file_stem().and_then(|s| s.to_str()).unwrap_or("model");
    checkpoint.with_file_name(format!("{stem}.loss.svg"))
}

/// Runs the command line. `stop` is set by Ctrl-C: the run saves and returns.
pub fn run(args: Args, stop: Arc<AtomicBool>) -> Result<(), Failure> {
    if args.log_every == 0 {
        return Err(usage("--log-every must be at least 1".into()));
    }
    let corpus = match &args.data {
        Some(p) => Corpus::open(p)?,
        None => Corpus::built_in(),
    };
    let gpu = kernels::Gpu::new().map_err(Error::from)?;
    let say = |s: String| {
        if !args.quiet {
            eprintln!("{s}");
        }
    };
    say(format!("adapter: {}", gpu.report()));

    if let Some(prompt) = &args.generate {
        let ck = checkpoint::load(&args.checkpoint)
            .map_err(|e| usage(format!("{e} (--generate samples from a checkpoint: train one first)")))?;
        let weights = ck.params.clone();
        let mut model = Model::with_attention(&gpu, &ck.model, 1, &weights, None, train_config(&args).attention)?;
        let text = generate(&mut model, prompt.as_bytes(), args.sample_bytes, args.temperature, args.top_k, args.seed)?;
        println!("{}{}", prompt, String::from_utf8_lossy(&text));
        return Ok(());
    }

    let train = train_config(&args);
    let mut trainer = if args.resume {
        let ck = checkpoint::load(&args.checkpoint)?;
        if model_flags_given(&args) {
            checkpoint::check_compatible(&ck.model, &model_config(&args))?;
        }
        say(format!("resuming {} at step {}", args.checkpoint.display(), ck.step));
        Trainer::resume(&gpu, ck, &train, corpus)?
    } else {
        if args.checkpoint.exists() && !args.overwrite {
            return Err(usage(format!(
                "{} exists: pass --resume to continue that run, --overwrite to replace it, or another --checkpoint",
                args.checkpoint.display()
            )));
        }
        Trainer::new(&gpu, &model_config(&args), &train, corpus)?
    };
    let cfg = trainer.model.cfg.clone();
    say(format!(
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
    let warm = gpu.warm_up(kernels::all_kernels()).map_err(Error::from)?;
    say(format!("pipelines: {} built in {:.2} s", warm.built, warm.seconds));

    if args.profile {
        let (x, y) = trainer.corpus.train_batch(train.seed, trainer.step, train.batch, cfg.seq_len);
        // One step to warm up, then the profiled one (both change the weights: profiling is for
        // measurement, not for a run to keep).
        trainer.model.train_step(&x, &y, train.batch, &trainer.train, trainer.step)?;
        let p = trainer.model.profile_step(&x, &y, train.batch, &trainer.train, trainer.step)?;
        println!(
            "one step: {} dispatches, {:.3} ms of GPU time from first to last, {:.1}% idle between dispatches",
            p.dispatches.len(),
            p.span_ns() / 1e6,
            100.0 * p.idle_fraction()
        );
        for (name, ns, count) in p.by_kernel().iter().take(15) {
            println!("  {name:44} {count:5} × {:9.3} ms = {:8.3} ms", ns / *count as f64 / 1e6, ns / 1e6);
        }
        return Ok(());
    }

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
        let log = (trainer.step + 1) % args.log_every as u64 == 0 || trainer.step + 1 == total;
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
        if trainer.step % eval_every == 0 || trainer.step == total {
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
    say(format!(
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

/// `main` of the example: parses the arguments, installs the Ctrl-C handler, runs, and exits
/// with the failure's code and message.
pub fn main() {
    let args = Args::parse();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    if let Err(e) = ctrlc::set_handler(move || {
        if flag.swap(true, Ordering::Relaxed) {
            // A second Ctrl-C: leave now.
            std::process::exit(130);
        }
        eprintln!("\nCtrl-C: saving a checkpoint after this step (press again to quit at once)");
    }) {
        eprintln!("warning: no Ctrl-C handler ({e}); an interrupt will not save a checkpoint");
    }
    if let Err(f) = run(args, stop) {
        eprintln!("error: {}", f.message);
        std::process::exit(f.code);
    }
}
