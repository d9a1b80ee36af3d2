//! `--resume`: continue the run saved at `--checkpoint`.

use super::args::model_flags_given;
use super::input::Input;
use super::{Args, Failure, Say, Setup, Stop, check_recorded, corpus_unless_stopped, model_config};
use crate::checkpoint;

/// Loads the checkpoint (its shape, unless model flags ask for another: then an error; its
/// tokenizer, unless `--tokenizer` names another: then an error) and tokenizes the data with the
/// checkpoint's tokenizer (watching `stop`), for the trainer to be rebuilt at its step.
pub(super) fn prepare(args: &Args, data: Input, val: Option<Input>, stop: &Stop, say: &Say) -> Result<Setup, Failure> {
    let ck = checkpoint::load(&args.checkpoint)?;
    if model_flags_given(args) {
        checkpoint::check_compatible(&ck.model, &model_config(args).with_vocab(ck.model.vocab))?;
    }
    check_recorded(args, &ck.tokenizer)?;
    if let Some(asked) = args.optimizer.map(super::args::OptimizerArg::kind)
        && asked != ck.optimizer()
    {
        return Err(crate::Error::Checkpoint(format!(
            "{} was trained with --optimizer {}, not {}: its optimizer state cannot continue under another; omit --optimizer (or pass {}) to resume it",
            args.checkpoint.display(),
            ck.optimizer().name(),
            asked.name(),
            ck.optimizer().name()
        ))
        .into());
    }
    say.line(format!("resuming {} at step {} ({})", args.checkpoint.display(), ck.step, ck.tokenizer.describe()));
    let corpus = corpus_unless_stopped(stop, args, data, val, ck.tokenizer.clone())?;
    Ok(Setup::Resume(Box::new(ck), corpus))
}
