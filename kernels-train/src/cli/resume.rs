//! `--resume`: continue the run saved at `--checkpoint`.

use super::args::model_flags_given;
use super::{Args, Failure, Say, Setup, Stop, check_recorded, model_config, unless_stopped};
use crate::checkpoint;
use crate::data::Corpus;
use std::sync::Arc;

/// Loads the checkpoint (its shape, unless model flags ask for another: then an error; its
/// tokenizer, unless `--tokenizer` names another: then an error) and tokenizes the text with the
/// checkpoint's tokenizer (watching `stop`), for the trainer to be rebuilt at its step.
pub(super) fn prepare(args: &Args, text: Arc<Vec<u8>>, source: &str, stop: &Stop, say: &Say) -> Result<Setup, Failure> {
    let ck = checkpoint::load(&args.checkpoint)?;
    if model_flags_given(args) {
        checkpoint::check_compatible(&ck.model, &model_config(args).with_vocab(ck.model.vocab))?;
    }
    check_recorded(args, &ck.tokenizer)?;
    say.line(format!("resuming {} at step {} ({})", args.checkpoint.display(), ck.step, ck.tokenizer.describe()));
    let (tokenizer, shown) = (ck.tokenizer.clone(), source.to_string());
    let corpus = unless_stopped(stop, args, "the text was tokenized", move || Corpus::new(&text, &shown, tokenizer))??;
    Ok(Setup::Resume(Box::new(ck), corpus))
}
