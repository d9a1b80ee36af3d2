//! `--generate PROMPT`: sample from a checkpoint and print the text.

use super::{Args, Failure, Say, check_recorded, train_config};
use crate::Error;
use crate::checkpoint;
use crate::model::Model;
use crate::trainer::generate;

/// Loads the checkpoint and checks the prompt (before the GPU is opened, so a bad path or a
/// prompt without tokens fails at once), continues `prompt` by `--sample-tokens` tokens of the
/// checkpoint's tokenizer, says how long that took (stderr), prints it.
pub(super) fn run(args: &Args, prompt: &str, say: &Say) -> Result<(), Failure> {
    let ck = checkpoint::load(&args.checkpoint).map_err(|e| {
        let f = Failure::from(e);
        Failure { message: format!("{} (--generate samples from a checkpoint: train one first)", f.message), ..f }
    })?;
    check_recorded(args, &ck.tokenizer)?;
    crate::trainer::prompt_tokens(&ck.tokenizer, prompt)?;
    let gpu = kernels::Gpu::new().map_err(Error::from)?;
    say.line(format!("adapter: {}", gpu.report()));
    let mut model = Model::with_attention(&gpu, &ck.model, 1, &ck.params, None, train_config(args).attention)?;
    let start = std::time::Instant::now();
    let text =
        generate(&mut model, &ck.tokenizer, prompt, args.sample_tokens, args.temperature, args.top_k, args.seed)?;
    let secs = start.elapsed().as_secs_f64();
    say.line(format!(
        "generated {} tokens in {secs:.2} s ({:.1} tokens/s, context {})",
        args.sample_tokens,
        args.sample_tokens as f64 / secs.max(1e-9),
        ck.model.seq_len
    ));
    super::output(format!("{prompt}{text}"))
}
