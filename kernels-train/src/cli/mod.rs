//! The command line of `cargo run --release --example train`, by mode: a new run (`train`),
//! `--resume`, `--generate` and `--profile`; the flags are in `args`.

mod args;
mod generate;
mod profile;
mod resume;
mod train;

pub use args::{Args, AttentionArg, Preset, curve_path, model_config, train_config};

use crate::Error;
use crate::data::Corpus;
use clap::Parser;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

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
    let say = Say(args.quiet);
    say.line(format!("adapter: {}", gpu.report()));

    if let Some(prompt) = &args.generate {
        return generate::run(&args, &gpu, prompt);
    }
    let trainer =
        if args.resume { resume::open(&args, &gpu, corpus, &say)? } else { train::start(&args, &gpu, corpus)? };
    train::describe(&trainer, &say);
    let warm = gpu.warm_up(kernels::all_kernels()).map_err(Error::from)?;
    say.line(format!("pipelines: {} built in {:.2} s", warm.built, warm.seconds));
    if args.profile {
        return profile::run(trainer);
    }
    train::run(&args, trainer, &stop, &say)
}

/// Progress lines on stderr, unless `--quiet`.
struct Say(bool);

impl Say {
    fn line(&self, s: String) {
        if !self.0 {
            eprintln!("{s}");
        }
    }
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
