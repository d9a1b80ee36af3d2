//! The command line of `cargo run --release --example train`, by mode: a new run (`train`),
//! `--resume`, `--generate` and `--profile`; the flags are in `args`, signal handling in
//! `signals`.
//!
//! Exit codes ([`exit`]): 0 done; 1 a GPU or other run-time failure; 2 a usage mistake (a flag,
//! the data, a `--checkpoint` that cannot be used); 3 the loss diverged (the last good
//! checkpoint is kept); 4 a checkpoint could not be written (the message says where the state
//! went); 5 a damaged checkpoint; 6 another run holds the checkpoint; 7 a data-parallel run
//! lost a rank (the last checkpoint is kept); 128 + N stopped by signal N after saving (130
//! Ctrl-C, 143 SIGTERM, 129 SIGHUP).

mod args;
mod generate;
mod input;
mod interop;
mod profile;
mod resume;
mod signals;
mod train;

pub use crate::checkpoint::curve_path;
pub use args::{Args, AttentionArg, CollectiveArg, PrecisionArg, Preset, model_config, train_config};
pub use signals::{SIGHUP, SIGINT, SIGTERM, Stop};

use crate::Error;
use crate::checkpoint::Destination;
use crate::data::Corpus;
use crate::dist::Rank;
use crate::tokenizer::{Tokenizer, TokenizerChoice};
use crate::trainer::Trainer;
use clap::Parser;

/// The process exit codes.
pub mod exit {
    /// A GPU or other run-time failure.
    pub const FAILED: i32 = 1;
    /// A usage mistake: a bad flag, unusable data, a `--checkpoint` that cannot be used.
    pub const USAGE: i32 = 2;
    /// The loss (or a weight) became NaN or infinite; the last good checkpoint is kept.
    pub const DIVERGED: i32 = 3;
    /// A checkpoint could not be written (a full disk, an I/O error).
    pub const SAVE_FAILED: i32 = 4;
    /// A damaged checkpoint (checksum mismatch, metadata out of bounds).
    pub const CORRUPT: i32 = 5;
    /// Another run holds the checkpoint's lock.
    pub const BUSY: i32 = 6;
    /// A data-parallel run ended because another rank died, hangs or disagrees (or the
    /// launcher's settings are wrong); the last checkpoint is kept.
    pub const RANKS: i32 = 7;
    /// Stopped by a signal after saving: 128 + the signal's number.
    pub const SIGNALLED: i32 = 128;
}

/// A failure with its exit code.
#[derive(Debug)]
pub struct Failure {
    /// Process exit code ([`exit`]).
    pub code: i32,
    /// What to tell the user.
    pub message: String,
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        let code = match e {
            Error::Config(_) | Error::Data(_) | Error::Checkpoint(_) => exit::USAGE,
            Error::Corrupt(_) => exit::CORRUPT,
            Error::Save(_) => exit::SAVE_FAILED,
            Error::Busy(_) => exit::BUSY,
            Error::Diverged(_) => exit::DIVERGED,
            Error::Gpu(_) | Error::Nccl(_) => exit::FAILED,
            Error::Dist(_) => exit::RANKS,
        };
        Failure { code, message: e.to_string() }
    }
}

fn usage(message: String) -> Failure {
    Failure { code: exit::USAGE, message }
}

/// Runs the command line. `stop` is set by a signal (Ctrl-C, SIGTERM, SIGHUP): the run saves
/// after the current step and returns with code 128 + the signal's number; a signal before the
/// first step (while a BPE is trained, the text tokenized, the GPU set up) ends the run at once,
/// writing no checkpoint, since nothing has been trained.
pub fn run(args: Args, stop: &Stop) -> Result<(), Failure> {
    args::check(&args).map_err(usage)?;
    let launch = crate::dist::launch::from_env()?;
    let rank = launch.as_ref().map_or(Rank::SINGLE, |l| l.rank);
    let _ = RANK.set(rank);
    if rank.world > 1
        && (args.export_hf.is_some()
            || args.export_gguf.is_some()
            || args.tokenize_to.is_some()
            || args.eval.is_some()
            || args.generate.is_some()
            || args.profile)
    {
        return Err(usage(format!(
            "this process is {rank} (from {}'s environment): only training runs on several processes; run --export, --tokenize-to, --eval, --generate and --profile as one process",
            launch.as_ref().map_or("the launcher", |l| l.launcher.name())
        )));
    }
    // Rank 0 speaks for the run; the others say only what goes wrong.
    let say = Say(args.quiet || !rank.writes());
    if args.export_hf.is_some() || args.export_gguf.is_some() {
        return interop::export(&args, &say);
    }
    if let Some(dir) = &args.tokenize_to {
        return interop::tokenize(&args, dir, &say);
    }
    if let Some(file) = &args.eval {
        return interop::evaluate(&args, file, &say);
    }
    if let Some(prompt) = &args.generate {
        return generate::run(&args, prompt, &say);
    }
    // The ranks meet first, so that a rank that cannot start is seen by the others before
    // they tokenize and build pipelines.
    let collective = {
        let stop = stop.clone();
        let interrupt: crate::dist::Interrupt = Box::new(move || {
            stop.requested().map(|s| {
                format!("stopped by {} (how a launcher ends a job when one of its ranks died)", signals::name(s))
            })
        });
        let timeout = args::collective_timeout(&args).map_err(usage)?;
        crate::dist::connect(launch.as_ref(), args.collective.kind(), timeout, Some(interrupt))?
    };
    if rank.world > 1 {
        say.line(format!(
            "data-parallel: {} ranks ({}), {} sequences a step in all",
            rank.world,
            launch.as_ref().map_or("", |l| l.launcher.name()),
            rank.world * train_config(&args).batch
        ));
    }
    // Where the run writes is checked (and locked) before anything else: a path that cannot
    // take a checkpoint fails in a second, not after the run. --profile writes nothing, nor
    // does a rank other than 0.
    let dest = if args.profile || !rank.writes() { None } else { Some(destination(&args, &say)?) };
    let data = input::Input::open(args.data.as_deref())?;
    let val = args.val_data.as_deref().map(|p| input::Input::open(Some(p))).transpose()?;
    not_stopped(stop, &args, "before training")?;
    let setup = match &args.import_hf {
        _ if args.resume => resume::prepare(&args, data, val, stop, &say)?,
        Some(dir) => interop::prepare_import(&args, dir, data, val, dest.as_ref(), stop, &say)?,
        None => train::prepare(&args, data, val, dest.as_ref(), stop, &say)?,
    };
    not_stopped(stop, &args, "before training")?;
    let gpu = open_gpu(rank)?;
    say.line(format!("adapter: {}", gpu.report()));
    let collective = crate::dist::on_gpu(collective, args.collective.kind(), &gpu)?;
    let trainer = match setup {
        Setup::New(cfg, corpus) => Trainer::new(&gpu, &cfg, &train_config(&args), corpus)?,
        Setup::Resume(ck, corpus) => {
            // The checkpoint's optimizer unless --optimizer names one (`resume::prepare` has
            // refused another).
            let train = crate::config::TrainConfig { optimizer: ck.optimizer(), ..train_config(&args) };
            Trainer::resume(&gpu, *ck, &train, corpus)?
        }
        Setup::Import(cfg, corpus, params) => Trainer::from_weights(&gpu, &cfg, &train_config(&args), corpus, &params)?,
    };
    let mut trainer = trainer;
    trainer.join(collective)?;
    train::describe(&trainer, &say);
    not_stopped(stop, &args, "before training")?;
    let warm = gpu.warm_up(kernels::all_kernels()).map_err(Error::from)?;
    say.line(format!("pipelines: {} built in {:.2} s", warm.built, warm.seconds));
    if args.profile {
        return profile::run(trainer);
    }
    train::run(&args, trainer, dest.as_ref(), stop, &say)
}

/// This process's rank, once known (for the prefix of its messages).
static RANK: std::sync::OnceLock<Rank> = std::sync::OnceLock::new();

/// The GPU of this rank: `KERNELS_*` as always; in a run of several processes on a machine,
/// local rank k opens the k-th matching adapter unless `KERNELS_ADAPTER_INDEX` says which.
fn open_gpu(rank: Rank) -> Result<kernels::Gpu, Failure> {
    let mut options = kernels::GpuOptions::from_env();
    let chosen = rank.world > 1 && options.adapter_index.is_none();
    if chosen {
        options = options.adapter_index(rank.local_rank);
    }
    kernels::Gpu::with_options_blocking(options).map_err(|e| match e {
        kernels::Error::AdapterIndex { .. } if chosen => Failure {
            code: exit::USAGE,
            message: format!(
                "{e}: local rank {} opens the adapter of its index; start at most as many processes on a machine as it has GPUs, or set KERNELS_ADAPTER_INDEX (e.g. 0) to have the ranks share one",
                rank.local_rank
            ),
        },
        e => Error::from(e).into(),
    })
}

/// What a run trains, ready for the GPU: a new model's shape and its corpus, a checkpoint and
/// the corpus tokenized with its tokenizer, or an imported model's shape, corpus and weights.
enum Setup {
    New(crate::config::ModelConfig, Corpus),
    Resume(Box<crate::checkpoint::Checkpoint>, Corpus),
    Import(crate::config::ModelConfig, Corpus, crate::model::Tensors),
}

/// The corpus of `data` and `val` with `tokenizer` ([`input::corpus`]), tokenized on a thread
/// that [`unless_stopped`] watches.
fn corpus_unless_stopped(
    stop: &Stop,
    args: &Args,
    data: input::Input,
    val: Option<input::Input>,
    tokenizer: Tokenizer,
) -> Result<Corpus, Failure> {
    Ok(unless_stopped(stop, args, "the text was tokenized", move || input::corpus(data, val, tokenizer))??)
}

/// The checkpoint path checked, locked and cleared of temporaries: a path that is not a file
/// gets that said first, then an existing checkpoint without `--resume` or `--overwrite`.
fn destination(args: &Args, say: &Say) -> Result<Destination, Failure> {
    crate::checkpoint::check_path(&args.checkpoint)?;
    if args.resume && !args.checkpoint.exists() {
        return Err(usage(format!(
            "there is no checkpoint at {} to resume (--checkpoint names it)",
            args.checkpoint.display()
        )));
    }
    if !args.resume && args.checkpoint.exists() && !args.overwrite {
        return Err(usage(format!(
            "{} exists: pass --resume to continue that run, --overwrite to replace it, or another --checkpoint",
            args.checkpoint.display()
        )));
    }
    // A run that may write a tokenizer beside the checkpoint: `--tokenizer bpe:N` or a file,
    // an imported folder's, or the one a shard directory holds.
    let writes_tokenizer = matches!(args.tokenizer, Some(TokenizerChoice::Bpe(_) | TokenizerChoice::File(_)))
        || args.import_hf.is_some()
        || args.data.as_ref().is_some_and(|d| d.is_dir());
    if !args.resume && writes_tokenizer {
        crate::checkpoint::check_tokenizer_path(&args.checkpoint)?;
    }
    let dest = Destination::open(&args.checkpoint)?;
    if let Some(e) = dest.lock_error() {
        crate::note(format!(
            "warning: cannot lock {} ({e}): nothing stops another run from writing the same checkpoint",
            args.checkpoint.display()
        ));
    }
    if dest.removed() > 0 {
        say.line(format!("removed {} temporary file(s) left by an interrupted save", dest.removed()));
    }
    Ok(dest)
}

/// The failure of a run stopped by `signal` before its first step: nothing was trained, so no
/// checkpoint is written (a resumed run's checkpoint is as it was).
fn stopped_before_training(signal: i32, args: &Args, when: &str) -> Failure {
    let kept = if args.resume {
        format!("{} is as it was", args.checkpoint.display())
    } else {
        "no checkpoint was written".to_string()
    };
    Failure {
        code: exit::SIGNALLED + signal,
        message: format!("stopped by {} {when}: nothing was trained, so {kept}", signals::name(signal)),
    }
}

/// An error if a signal has asked the run to stop (before its first step).
fn not_stopped(stop: &Stop, args: &Args, when: &str) -> Result<(), Failure> {
    match stop.requested() {
        Some(signal) => Err(stopped_before_training(signal, args, when)),
        None => Ok(()),
    }
}

/// Runs `work` (training a BPE, tokenizing the text) on a thread of its own while watching
/// `stop`, so that a signal during it ends the run at once rather than when the work is done;
/// `what` says what was under way. The abandoned thread ends with the process.
fn unless_stopped<T: Send + 'static>(
    stop: &Stop,
    args: &Args,
    what: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Failure> {
    use std::sync::mpsc::{RecvTimeoutError, channel};
    let (tx, rx) = channel();
    let worker = std::thread::Builder::new().name(what.to_string()).spawn(move || {
        let _ = tx.send(work());
    });
    let Ok(worker) = worker else {
        return Err(Failure { code: exit::FAILED, message: format!("cannot start a thread for {what}") });
    };
    loop {
        match rx.recv_timeout(std::time::Duration::from_millis(50)) {
            Ok(value) => {
                let _ = worker.join();
                return Ok(value);
            }
            Err(RecvTimeoutError::Timeout) => not_stopped(stop, args, &format!("while {what}"))?,
            Err(RecvTimeoutError::Disconnected) => match worker.join() {
                Err(panic) => std::panic::resume_unwind(panic),
                Ok(()) => {
                    return Err(Failure { code: exit::FAILED, message: format!("{what} ended without a result") });
                }
            },
        }
    }
}

/// Checks `--tokenizer`, if given, against the tokenizer a checkpoint recorded (which
/// `--resume` and `--generate` use): naming another is an error that says what each is.
fn check_recorded(args: &Args, found: &Tokenizer) -> Result<(), Failure> {
    let wanted = match &args.tokenizer {
        None => return Ok(()),
        Some(TokenizerChoice::Bytes) => Tokenizer::bytes(),
        Some(TokenizerChoice::File(path)) => Tokenizer::open(path)?,
        // The checkpoint's BPE is used as recorded, not trained again: its size must match.
        Some(TokenizerChoice::Bpe(n)) if !found.is_bytes() && found.vocab_size() == *n => return Ok(()),
        Some(TokenizerChoice::Bpe(n)) => {
            return Err(Error::Checkpoint(format!(
                "the checkpoint was trained with another tokenizer: {} (checkpoint) vs a BPE of {n} tokens (--tokenizer bpe:{n}); omit --tokenizer to use the checkpoint's",
                found.describe()
            ))
            .into());
        }
    };
    Ok(crate::checkpoint::check_tokenizer(found, Some(&wanted))?)
}

/// Writes the program's output (a sample, a profile) to stdout, never panicking: a stdout whose
/// reader has gone (a closed pipe, as with `| head`) ends the output quietly, as it ends any
/// pipeline's writer; any other failure to write (a full disk) is a failure with code 1.
fn output(text: String) -> Result<(), Failure> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|_| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Failure { code: exit::FAILED, message: format!("cannot write the output: {e}") })
        }
        _ => Ok(()),
    }
}

/// Progress lines on stderr, unless `--quiet`.
struct Say(bool);

impl Say {
    fn line(&self, s: String) {
        if !self.0 {
            crate::note(s);
        }
    }
}

/// `main` of the trainer: parses the arguments, routes SIGINT, SIGTERM and SIGHUP to a clean
/// stop, runs, and exits with the failure's code and message.
pub fn main() {
    let args = Args::parse();
    let stop = Stop::new();
    if let Err(e) = signals::install(&stop) {
        crate::note(format!("warning: {e}; Ctrl-C, SIGTERM and SIGHUP will not save a checkpoint"));
    }
    if let Err(f) = run(args, &stop) {
        match RANK.get().filter(|r| r.world > 1) {
            Some(r) => crate::note(format!("error: rank {}: {}", r.rank, f.message)),
            None => crate::note(format!("error: {}", f.message)),
        }
        std::process::exit(f.code);
    }
}
