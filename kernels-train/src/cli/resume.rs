//! `--resume`: continue the run saved at `--checkpoint`.

use super::args::model_flags_given;
use super::{Args, Failure, Say, model_config, train_config};
use crate::checkpoint;
use crate::data::Corpus;
use crate::trainer::Trainer;
use kernels::Gpu;

/// Loads the checkpoint (its shape, unless model flags ask for another: then an error) and
/// rebuilds the trainer at its step.
pub(super) fn open(args: &Args, gpu: &Gpu, corpus: Corpus, say: &Say) -> Result<Trainer, Failure> {
    let ck = checkpoint::load(&args.checkpoint)?;
    if model_flags_given(args) {
        checkpoint::check_compatible(&ck.model, &model_config(args))?;
    }
    say.line(format!("resuming {} at step {}", args.checkpoint.display(), ck.step));
    Ok(Trainer::resume(gpu, ck, &train_config(args), corpus)?)
}
