//! The model and its data in other programs' formats: `--export-hf`, `--export-gguf`,
//! `--import-hf`, `--tokenize-to` and `--eval`.

use super::input::{self, Input};
use super::{Args, Failure, Say, Setup, Stop, check_recorded, corpus_unless_stopped, train_config, usage};
use crate::Error;
use crate::checkpoint::{self, Destination};
use crate::eval;
use crate::export::{Exported, gguf, hf, token_byte_lengths};
use crate::tokenizer::{Tokenizer, TokenizerChoice};
use crate::trainer::model_options;
use indicatif::{ProgressBar, ProgressStyle};
use kernels::Gpu;
use std::path::Path;
use std::time::Instant;

/// A checkpoint for a mode that reads one, with a message that says how to get one.
fn load(args: &Args, mode: &str) -> Result<checkpoint::Checkpoint, Failure> {
    checkpoint::load(&args.checkpoint).map_err(|e| {
        let f = Failure::from(e);
        Failure { message: format!("{} ({mode} reads a checkpoint: train one first)", f.message), ..f }
    })
}

fn bar(total: u64, quiet: bool, template: &str) -> ProgressBar {
    let bar = if quiet { ProgressBar::hidden() } else { ProgressBar::new(total) };
    bar.set_style(ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()));
    bar
}

/// `--export-hf DIR` and/or `--export-gguf FILE`: the checkpoint in those formats.
pub(super) fn export(args: &Args, say: &Say) -> Result<(), Failure> {
    let ck = load(args, "--export-hf/--export-gguf")?;
    let name = args.checkpoint.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into());
    let m = Exported { model: ck.model, params: ck.params, tokenizer: ck.tokenizer };
    let mut lines = Vec::new();
    if let Some(dir) = &args.export_hf {
        let files = hf::write(dir, &m, args.export_dtype)?;
        let names: Vec<String> =
            files.iter().filter_map(|f| f.file_name().map(|n| n.to_string_lossy().into_owned())).collect();
        lines.push(format!("wrote {} ({})", dir.display(), names.join(", ")));
    }
    if let Some(file) = &args.export_gguf {
        if let Some(w) = gguf::write(file, &m, args.export_dtype, &name)? {
            say.line(format!("warning: {w}"));
        }
        lines.push(format!("wrote {}", file.display()));
    }
    say.line(format!(
        "step {} of {}: {} layers, width {}, {} tokens ({}), {:?} weights",
        ck.step,
        args.checkpoint.display(),
        m.model.layers,
        m.model.dim,
        m.tokenizer.vocab_size(),
        m.tokenizer.describe(),
        args.export_dtype
    ));
    super::output(lines.join("\n"))
}

/// `--import-hf DIR`: a new run from an HF folder's weights, tokenizer and shape, ready for the
/// GPU; the data is tokenized with the folder's tokenizer, watching `stop`.
pub(super) fn prepare_import(
    args: &Args,
    dir: &Path,
    data: Input,
    val: Option<Input>,
    dest: Option<&Destination>,
    stop: &Stop,
    say: &Say,
) -> Result<Setup, Failure> {
    let imported = hf::read(dir)?;
    for note in &imported.notes {
        say.line(format!("{}: {note}", dir.display()));
    }
    let Exported { model: mut cfg, params, tokenizer } = imported.model;
    if let Some(s) = args.seq_len {
        cfg.seq_len = s;
    }
    let flags = [
        ("--layers", args.layers, cfg.layers),
        ("--dim", args.dim, cfg.dim),
        ("--heads", args.heads, cfg.heads),
        ("--kv-heads", args.kv_heads, cfg.kv_heads),
        ("--ffn", args.ffn, cfg.ffn_hidden),
    ];
    let differ: Vec<String> = flags
        .iter()
        .filter_map(|&(flag, asked, theirs)| {
            asked.filter(|&a| a != theirs).map(|a| format!("{flag} {a} (the folder's: {theirs})"))
        })
        .collect();
    if !differ.is_empty() {
        return Err(usage(format!(
            "{} holds another shape than the model flags ask for: {}; only --seq-len may change on import",
            dir.display(),
            differ.join(", ")
        )));
    }
    say.line(format!(
        "importing {}: {} layers, width {}, {} heads ({} kv), ffn {}, context {}, {}",
        dir.display(),
        cfg.layers,
        cfg.dim,
        cfg.heads,
        cfg.kv_heads,
        cfg.ffn_hidden,
        cfg.seq_len,
        tokenizer.describe()
    ));
    if let (Some(dest), Some(json)) = (dest, tokenizer.json()) {
        // A copy for other tools, as for a new run: a warning if it cannot be written.
        match dest.write_tokenizer(json) {
            Ok(to) => say.line(format!("tokenizer: {}", to.display())),
            Err(e) => crate::note(format!("warning: the tokenizer's copy beside the checkpoint was not written: {e}")),
        }
    }
    let corpus = corpus_unless_stopped(stop, args, data, val, tokenizer)?;
    Ok(Setup::Import(cfg, corpus, params))
}

/// `--tokenize-to DIR`: the `--data` text files as token shards.
pub(super) fn tokenize(args: &Args, dir: &Path, say: &Say) -> Result<(), Failure> {
    let spec = args.data.as_deref().ok_or_else(|| {
        usage("--tokenize-to needs --data: the text to tokenize (a file, a directory or a quoted glob)".into())
    })?;
    let inputs = input::text_files(spec)?;
    let tokenizer = match &args.tokenizer {
        None | Some(TokenizerChoice::Bytes) => Tokenizer::bytes(),
        Some(TokenizerChoice::File(p)) => Tokenizer::open(p)?,
        Some(TokenizerChoice::Bpe(n)) => {
            return Err(usage(format!(
                "--tokenize-to takes bytes or a tokenizer.json, not bpe:{n}: train the BPE in a run on a sample of the text (--tokenizer bpe:{n} writes NAME.tokenizer.json beside its checkpoint), then pass that file"
            )));
        }
    };
    if dir.is_dir() && crate::shards::resolve(dir).is_ok() {
        return Err(usage(format!("{} holds .bin shards already: tokenize into an empty directory", dir.display())));
    }
    if dir.exists() && !dir.is_dir() {
        return Err(usage(format!("--tokenize-to {} exists and is not a directory", dir.display())));
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::Save(format!("cannot create {}: {e}", dir.display())))?;
    if let Some(json) = tokenizer.json() {
        crate::checkpoint::write_atomic(&dir.join("tokenizer.json"), |w| w.write_all(json.as_bytes()))?;
    }
    say.line(format!("tokenizing {} file(s) with {} into {}", inputs.len(), tokenizer.describe(), dir.display()));
    let started = Instant::now();
    let bar = bar(0, args.quiet, "{bar:30} {bytes}/{total_bytes} | {bytes_per_sec} | ETA {eta}");
    let written = crate::shards::write_shards(&inputs, &tokenizer, dir, args.shard_tokens, |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    })?;
    bar.finish_and_clear();
    let s = started.elapsed().as_secs_f64().max(1e-9);
    say.line(format!(
        "{} bytes → {} tokens in {:.2} s: {:.0} tokens/s ({:.1} MB/s)",
        written.bytes,
        written.tokens,
        s,
        written.tokens as f64 / s,
        written.bytes as f64 / s / 1e6
    ));
    let list: Vec<String> = written.files.iter().map(|f| f.display().to_string()).collect();
    super::output(list.join("\n"))
}

/// `--eval FILE`: the checkpoint's loss on every token of a text or shards. The checkpoint and
/// the file are read and tokenized before the GPU is opened, so a bad path fails at once.
pub(super) fn evaluate(args: &Args, file: &Path, say: &Say) -> Result<(), Failure> {
    let ck = load(args, "--eval")?;
    check_recorded(args, &ck.tokenizer)?;
    let tokens = Input::open(Some(file))?.tokens(&ck.tokenizer)?;
    let seq = ck.model.seq_len;
    let windows = eval::cover(tokens.len(), seq);
    if windows.is_empty() {
        return Err(usage(format!("{} holds {} token(s): nothing to predict", file.display(), tokens.len())));
    }
    let gpu = &Gpu::new().map_err(Error::from)?;
    say.line(format!("adapter: {}", gpu.report()));
    let train = train_config(args);
    let batch = train.batch.min(windows.len());
    let mut model =
        crate::model::Model::with_options(gpu, &ck.model, batch, &ck.params, None, model_options(&train, None))?;
    let lens = token_byte_lengths(&ck.tokenizer)?;
    let started = Instant::now();
    let bar = bar(windows.len() as u64, args.quiet, "{bar:30} {pos}/{len} windows | ETA {eta}");
    let s = eval::score(&mut model, &tokens, &windows, batch, &lens, |done, _| bar.set_position(done as u64))?;
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    say.line(format!(
        "{} windows of up to {seq} tokens, {:?} precision, in {secs:.2} s ({:.0} tokens/s)",
        windows.len(),
        model.precision,
        s.tokens as f64 / secs
    ));
    super::output(format!(
        "{}: {} tokens predicted ({} bytes)\nmean loss {:.6} nats/token\nperplexity {:.4}\nbits per byte {:.6}",
        file.display(),
        s.tokens,
        s.bytes,
        s.mean_loss(),
        s.perplexity(),
        s.bits_per_byte()
    ))
}
