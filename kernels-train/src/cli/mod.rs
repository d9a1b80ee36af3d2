//! The command line of `cargo run --release --example train`, by mode: a new run (`train`),
//! `--resume`, `--generate` and `--profile`; the flags are in `args`, signal handling in
//! `signals`.
//!
//! Exit codes ([`exit`]): 0 done; 1 a GPU or other run-time failure; 2 a usage mistake (a flag,
//! the data, a `--checkpoint` that cannot be used); 3 the loss diverged (the last good
//! checkpoint is kept); 4 a checkpoint could not be written (the message says where the state
//! went); 5 a damaged checkpoint; 6 another run holds the checkpoint; 128 + N stopped by signal
//! N after saving (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP).

mod args;
mod generate;
mod input;
mod interop;
mod profile;
mod resume;
mod signals;
mod train;

pub use crate::checkpoint::curve_path;
pub use args::{Args, AttentionArg, PrecisionArg, Preset, model_config, train_config};
pub use signals::{SIGHUP, SIGINT, SIGTERM, Stop};

use crate::Error;
use crate::checkpoint::Destination;
use crate::tokenizer::{Tokenizer, TokenizerChoice};
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
            Error::Gpu(_) => exit::FAILED,
        };
        Failure { code, message: e.to_string() }
    }
}

fn usage(message: String) -> Failure {
    Failure { code: exit::USAGE, message }
}

/// Runs the command line. `stop` is set by a signal (Ctrl-C, SIGTERM, SIGHUP): the run saves
/// after the current step and returns with code 128 + the signal's number.
pub fn run(args: Args, stop: &Stop) -> Result<(), Failure> {
    args::check(&args).map_err(usage)?;
    let say = Say(args.quiet);
    if args.export_hf.is_some() || args.export_gguf.is_some() {
        return interop::export(&args, &say);
    }
    if let Some(dir) = &args.tokenize_to {
        return interop::tokenize(&args, dir, &say);
    }
    if let Some(file) = &args.eval {
        let gpu = kernels::Gpu::new().map_err(Error::from)?;
        say.line(format!("adapter: {}", gpu.report()));
        return interop::evaluate(&args, &gpu, file, &say);
    }
    if let Some(prompt) = &args.generate {
        let gpu = kernels::Gpu::new().map_err(Error::from)?;
        say.line(format!("adapter: {}", gpu.report()));
        return generate::run(&args, &gpu, prompt);
    }
    // Where the run writes is checked (and locked) before the GPU starts: a path that cannot
    // take a checkpoint fails in a second, not after the run. --profile writes nothing.
    let dest = if args.profile {
        None
    } else {
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
        Some(dest)
    };
    let data = input::Input::open(args.data.as_deref())?;
    let val = args.val_data.as_deref().map(|p| input::Input::open(Some(p))).transpose()?;
    let gpu = kernels::Gpu::new().map_err(Error::from)?;
    say.line(format!("adapter: {}", gpu.report()));
    let trainer = match &args.import_hf {
        _ if args.resume => resume::open(&args, &gpu, data, val, &say)?,
        Some(dir) => interop::import(&args, &gpu, dir, data, val, dest.as_ref(), &say)?,
        None => train::start(&args, &gpu, data, val, dest.as_ref(), &say)?,
    };
    train::describe(&trainer, &say);
    let warm = gpu.warm_up(kernels::all_kernels()).map_err(Error::from)?;
    say.line(format!("pipelines: {} built in {:.2} s", warm.built, warm.seconds));
    match dest {
        None => profile::run(trainer),
        Some(dest) => train::run(&args, trainer, &dest, stop, &say),
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

/// Writes the program's output (a sample, a profile) to stdout; a stdout that cannot take it
/// is a failure with code 1, not a panic.
fn output(text: String) -> Result<(), Failure> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")
        .and_then(|_| out.flush())
        .map_err(|e| Failure { code: exit::FAILED, message: format!("cannot write the output: {e}") })
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
        crate::note(format!("error: {}", f.message));
        std::process::exit(f.code);
    }
}
