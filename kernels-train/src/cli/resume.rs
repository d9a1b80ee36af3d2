//! `--resume`: continue the run saved at `--checkpoint`.

use super::args::model_flags_given;
use super::input::Input;
use super::{Args, Failure, Say, check_recorded, model_config, train_config};
use crate::checkpoint;
use crate::trainer::Trainer;
use kernels::Gpu;

/// Loads the checkpoint (its shape, unless model flags ask for another: then an error; its
/// tokenizer, unless `--tokenizer` names another: then an error), tokenizes the data with the
/// checkpoint's tokenizer and rebuilds the trainer at its step.
pub(super) fn open(args: &Args, gpu: &Gpu, data: Input, val: Option<Input>, say: &Say) -> Result<Trainer, Failure> {
    let ck = checkpoint::load(&args.checkpoint)?;
    if model_flags_given(args) {
        checkpoint::check_compatible(&ck.model, &model_config(args).with_vocab(ck.model.vocab))?;
    }
    check_recorded(args, &ck.tokenizer)?;
    say.line(format!("resuming {} at step {} ({})", args.checkpoint.display(), ck.step, ck.tokenizer.describe()));
    let corpus = super::input::corpus(data, val, ck.tokenizer.clone())?;
    Ok(Trainer::resume(gpu, ck, &train_config(args), corpus)?)
}
