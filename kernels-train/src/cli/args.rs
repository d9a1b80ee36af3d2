//! The flags, the presets, and the model and training settings they ask for.

use crate::config::{ModelConfig, TrainConfig};
use crate::model::Attention;
use crate::precision::Precision;
use crate::tokenizer::TokenizerChoice;
use clap::{Parser, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;

/// Model sizes.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum Preset {
    /// 2 layers, width 64, batch 8: trains in about four minutes on a 2-core CPU adapter (lavapipe).
    Tiny,
    /// GPT-2 small's shape (12 layers, width 768, 12 heads, context 1024): for real GPUs.
    Gpt2Small,
    /// GPT-2 medium's shape (24 layers, width 1024, 16 heads, context 1024): for real GPUs.
    Gpt2Medium,
}

/// Train a LLaMA-style language model on the GPU (on bytes or BPE tokens), or sample from one.
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
    /// Context length in tokens.
    #[arg(long)]
    pub seq_len: Option<usize>,
    /// Sequences per step.
    #[arg(long)]
    pub batch: Option<usize>,
    /// Training steps (in total, counting those of a resumed run).
    #[arg(long)]
    pub steps: Option<usize>,
    /// Peak learning rate.
    #[arg(long, allow_negative_numbers = true)]
    pub lr: Option<f32>,
    /// Final learning rate of the cosine decay.
    #[arg(long, allow_negative_numbers = true)]
    pub min_lr: Option<f32>,
    /// Warm-up steps.
    #[arg(long)]
    pub warmup: Option<usize>,
    /// Decoupled weight decay.
    #[arg(long, default_value_t = 0.1, allow_negative_numbers = true)]
    pub weight_decay: f32,
    /// Global gradient-norm clip (0: off).
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
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
    /// What to train on: a UTF-8 text file (read into memory), or token shards in llm.c's
    /// format (a shard, a directory of .bin shards, or a quoted glob; read by position). Default:
    /// this project's own text, built in.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Tokens: `bytes` (256, the default of a new run), `bpe:N` (train an N-token byte-level BPE
    /// on the training text, saved beside the checkpoint as NAME.tokenizer.json), or a
    /// tokenizer.json file (e.g. GPT-2's). --resume and --generate use the checkpoint's; given
    /// there, it must name the same one.
    #[arg(long, value_name = "bytes|bpe:N|FILE.json")]
    pub tokenizer: Option<TokenizerChoice>,
    /// Where the checkpoint goes (the loss curve goes beside it, `.loss.svg`; a diverged
    /// state, never over it, to `.diverged.safetensors`).
    #[arg(long, default_value = "checkpoints/model.safetensors")]
    pub checkpoint: PathBuf,
    /// Also save the checkpoint every N steps during the run.
    #[arg(long)]
    pub checkpoint_every: Option<usize>,
    /// Save the checkpoint every M minutes of training (0: only at the end and when stopped).
    #[arg(long, default_value_t = 10.0, allow_negative_numbers = true)]
    pub checkpoint_minutes: f64,
    /// Continue the run saved at --checkpoint.
    #[arg(long)]
    pub resume: bool,
    /// Replace an existing checkpoint with a new run.
    #[arg(long)]
    pub overwrite: bool,
    /// Sample from the checkpoint, continuing this prompt, and exit.
    #[arg(long)]
    pub generate: Option<String>,
    /// Tokens to sample (bytes, with byte tokens).
    #[arg(long, alias = "sample-bytes", default_value_t = 300)]
    pub sample_tokens: usize,
    /// Sampling temperature (0: greedy).
    #[arg(long, default_value_t = 0.8, allow_negative_numbers = true)]
    pub temperature: f32,
    /// Sample among the k most likely tokens (0: all).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Time one step on the GPU (timestamps around every dispatch) and print where it went.
    #[arg(long)]
    pub profile: bool,
    /// No progress bar (for logs).
    #[arg(long)]
    pub quiet: bool,
    /// Data-parallel runs (one process per GPU, started by torchrun, mpirun or srun): how the
    /// ranks exchange gradients. `auto`: MPI under mpirun in a trainer built with the `mpi`
    /// feature, else TCP through rank 0 at MASTER_ADDR:MASTER_PORT.
    #[arg(long, value_enum, default_value = "auto")]
    pub collective: CollectiveArg,
    /// Data-parallel runs: seconds a rank waits for the others (to connect, or in any exchange)
    /// before it ends the run; a rank that dies is seen at once over TCP, and this bounds a hang.
    #[arg(long, default_value_t = 300.0, allow_negative_numbers = true)]
    pub collective_timeout: f64,
    /// Data-parallel runs: check that every rank holds the same weights every N steps (and at
    /// the end).
    #[arg(long, default_value_t = 100)]
    pub check_weights_every: usize,
    /// Attention path: `fast` (batched products over materialised probabilities, a
    /// [batch, heads, seq, seq] workspace per layer), `flash` (fused kernels, no workspace),
    /// `streaming` (no workspace, the least workgroup memory, slower), or `auto` (fast when its
    /// workspaces fit, else flash where the adapter runs it, else streaming).
    #[arg(long, value_enum, default_value = "auto")]
    pub attention: AttentionArg,
    /// Arithmetic: `mixed` (f16 products, f32 master weights, dynamic loss scaling), `f32`, or
    /// `auto` (mixed where the adapter has tensor cores, else f32).
    #[arg(long, value_enum, default_value = "auto")]
    pub precision: PrecisionArg,
    /// Optimizer: `adamw` (f32 moments, 8 bytes of state per parameter) or `adamw-8bit` (moments
    /// in 8-bit blocks with f32 scales, about 2 bytes per parameter; f32 precision only).
    /// Default: adamw for a new run, the checkpoint's with --resume (naming the other is an error).
    #[arg(long, value_enum)]
    pub optimizer: Option<OptimizerArg>,
    /// Mixed precision: clean steps before the loss scale doubles.
    #[arg(long, default_value_t = crate::scaler::DEFAULT_GROWTH_INTERVAL, value_parser = clap::value_parser!(u32).range(1..))]
    pub loss_scale_interval: u32,
    /// Validation text or shards (default: the last of several shards, else the last 5%).
    #[arg(long)]
    pub val_data: Option<PathBuf>,
    /// Tokenize the --data text files (a file, a directory or a glob) into token shards in
    /// this directory, with --tokenizer, and exit.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["resume", "generate", "eval", "import_hf"])]
    pub tokenize_to: Option<PathBuf>,
    /// Tokens per shard of --tokenize-to.
    #[arg(long, default_value_t = crate::shards::DEFAULT_SHARD_TOKENS)]
    pub shard_tokens: usize,
    /// Score the checkpoint on a text or shards (mean loss, perplexity, bits per byte) and exit.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["resume", "generate", "import_hf"])]
    pub eval: Option<PathBuf>,
    /// Write the checkpoint as a Hugging Face transformers folder and exit.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["resume", "generate", "eval", "import_hf", "tokenize_to"])]
    pub export_hf: Option<PathBuf>,
    /// Write the checkpoint as a GGUF file for llama.cpp and exit.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["resume", "generate", "eval", "import_hf", "tokenize_to"])]
    pub export_gguf: Option<PathBuf>,
    /// Weight type of the exports: f32 or f16.
    #[arg(long, default_value = "f32", value_name = "f32|f16")]
    pub export_dtype: crate::export::ExportDtype,
    /// Start a new run (fine-tuning) from a Hugging Face Llama folder: its weights, its
    /// tokenizer, its shape (--seq-len may shorten the context).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["resume", "tokenizer"])]
    pub import_hf: Option<PathBuf>,
}

/// The `--precision` values.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum PrecisionArg {
    /// Mixed with tensor cores, else f32.
    Auto,
    /// f32 throughout.
    F32,
    /// f16 products, f32 masters, loss scaling.
    Mixed,
}

/// The `--optimizer` values.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum OptimizerArg {
    /// AdamW with f32 moments.
    Adamw,
    /// AdamW with 8-bit block-quantized moments.
    #[value(name = "adamw-8bit")]
    Adamw8bit,
}

impl OptimizerArg {
    /// The optimizer this names.
    pub fn kind(self) -> crate::optim::OptimizerKind {
        match self {
            OptimizerArg::Adamw => crate::optim::OptimizerKind::AdamW,
            OptimizerArg::Adamw8bit => crate::optim::OptimizerKind::AdamW8bit,
        }
    }
}

/// The `--attention` values.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum AttentionArg {
    /// Flash in mixed precision, fast in f32, when it fits (`model::AUTO_ORDER_MIXED`,
    /// `model::AUTO_ORDER`).
    Auto,
    /// Materialised probabilities.
    Fast,
    /// Fused flash-attention kernels.
    Flash,
    /// Streaming kernels.
    Streaming,
}

/// The model shape the flags ask for (preset defaults, flags on top).
pub fn model_config(a: &Args) -> ModelConfig {
    let tiny = ModelConfig::tiny();
    let (layers, dim, heads, kv, seq) = match a.preset {
        Preset::Tiny => (tiny.layers, tiny.dim, tiny.heads, tiny.kv_heads, tiny.seq_len),
        Preset::Gpt2Small => (12, 768, 12, 12, 1024),
        Preset::Gpt2Medium => (24, 1024, 16, 16, 1024),
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
    let tiny = TrainConfig::tiny();
    let (batch, steps, lr, min_lr, warmup) = match a.preset {
        Preset::Tiny => (tiny.batch, tiny.steps, tiny.lr, tiny.min_lr, tiny.warmup),
        Preset::Gpt2Small => (8, 2000, 6e-4, 6e-5, 100),
        // The lower peak rate GPT-3's paper gives its model of this size (350M: 3e-4).
        Preset::Gpt2Medium => (8, 2000, 3e-4, 3e-5, 100),
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
            AttentionArg::Flash => Attention::Flash,
            AttentionArg::Streaming => Attention::Streaming,
        },
        precision: match a.precision {
            PrecisionArg::Auto => Precision::Auto,
            PrecisionArg::F32 => Precision::F32,
            PrecisionArg::Mixed => Precision::Mixed,
        },
        loss_scale_interval: a.loss_scale_interval,
        optimizer: a.optimizer.map_or(crate::optim::OptimizerKind::AdamW, OptimizerArg::kind),
        ..TrainConfig::default()
    }
}

/// How the ranks of a data-parallel run exchange gradients.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum CollectiveArg {
    /// MPI under mpirun (with the `mpi` feature), TCP otherwise.
    Auto,
    /// Host-staged through rank 0 over TCP (MASTER_ADDR, MASTER_PORT).
    Tcp,
    /// Host-staged through MPI (a trainer built with the `mpi` feature, under mpirun).
    Mpi,
    /// GPU to GPU through NCCL (a trainer built with the `nccl` feature, NVIDIA GPUs); the
    /// ranks meet over TCP (MASTER_ADDR, MASTER_PORT) first.
    Nccl,
}

impl CollectiveArg {
    /// The implementation asked for.
    pub fn kind(self) -> crate::dist::CollectiveKind {
        match self {
            CollectiveArg::Auto => crate::dist::CollectiveKind::Auto,
            CollectiveArg::Tcp => crate::dist::CollectiveKind::Tcp,
            CollectiveArg::Mpi => crate::dist::CollectiveKind::Mpi,
            CollectiveArg::Nccl => crate::dist::CollectiveKind::Nccl,
        }
    }
}

/// `--collective-timeout` as a duration.
pub fn collective_timeout(a: &Args) -> Result<Duration, String> {
    let s = a.collective_timeout;
    if !(s.is_finite() && s > 0.0 && s <= 1e6) {
        return Err(format!("--collective-timeout {s} must be a number of seconds above 0 (and at most 1000000)"));
    }
    Ok(Duration::from_secs_f64(s))
}

/// Checks the flags that need more than their type; every message names the flag.
pub(super) fn check(a: &Args) -> Result<(), String> {
    for (flag, value) in [
        ("--log-every", Some(a.log_every)),
        ("--eval-every", a.eval_every),
        ("--eval-batches", Some(a.eval_batches)),
        ("--checkpoint-every", a.checkpoint_every),
        ("--shard-tokens", Some(a.shard_tokens)),
        ("--check-weights-every", Some(a.check_weights_every)),
    ] {
        if value == Some(0) {
            return Err(format!("{flag} must be at least 1"));
        }
    }
    if a.eval_batches > MAX_EVAL_BATCHES {
        return Err(format!(
            "--eval-batches {} is more than {MAX_EVAL_BATCHES} (each validation runs that many batches)",
            a.eval_batches
        ));
    }
    checkpoint_interval(a)?;
    collective_timeout(a)?;
    if !(a.temperature.is_finite() && a.temperature >= 0.0) {
        return Err(format!("--temperature {} must be 0 (greedy) or more, and finite", a.temperature));
    }
    let t = train_config(a);
    for (flag, value, ok, least) in [
        ("--lr", t.lr, t.lr > 0.0, "above 0"),
        ("--min-lr", t.min_lr, t.min_lr >= 0.0, "0 or more"),
        ("--weight-decay", t.weight_decay, t.weight_decay >= 0.0, "0 or more"),
        ("--clip", t.clip, t.clip >= 0.0, "0 (off) or more"),
    ] {
        if !(value.is_finite() && ok) {
            return Err(format!("{flag} {value} must be finite and {least}"));
        }
    }
    if a.shard_tokens > MAX_SHARD_TOKENS {
        return Err(format!(
            "--shard-tokens {} is more than {MAX_SHARD_TOKENS} (a shard's header counts its tokens in an int32)",
            a.shard_tokens
        ));
    }
    // The modes that train nothing, and the flags that only mean something to a training run.
    let modes = [
        (a.generate.is_some(), "--generate samples from the checkpoint"),
        (a.eval.is_some(), "--eval scores the checkpoint"),
        (a.export_hf.is_some(), "--export-hf writes the checkpoint as a folder"),
        (a.export_gguf.is_some(), "--export-gguf writes the checkpoint as a file"),
        (a.tokenize_to.is_some(), "--tokenize-to writes token shards"),
    ];
    let training = [
        ("--resume", a.resume),
        ("--profile", a.profile),
        ("--overwrite", a.overwrite),
        ("--val-data", a.val_data.is_some()),
        ("--import-hf", a.import_hf.is_some()),
    ];
    for (_, does) in modes.iter().filter(|m| m.0) {
        if let Some((flag, _)) = training.iter().find(|t| t.1) {
            return Err(format!("{does} and trains nothing: it cannot be combined with {flag}"));
        }
    }
    Ok(())
}

/// The most `--shard-tokens` takes.
pub const MAX_SHARD_TOKENS: usize = i32::MAX as usize;

/// The most `--eval-batches` takes.
pub const MAX_EVAL_BATCHES: usize = 1 << 20;

/// `--checkpoint-minutes` as a time (`None`: 0, never mid-run), or why it is not one.
pub(super) fn checkpoint_interval(a: &Args) -> Result<Option<Duration>, String> {
    let minutes = a.checkpoint_minutes;
    // As the user would write it (1e300 rather than its 301 digits).
    let shown = if minutes.abs() >= 1e9 { format!("{minutes:e}") } else { minutes.to_string() };
    let bad = || {
        format!(
            "--checkpoint-minutes {shown} must be a number of minutes from 0 (never mid-run) to {:.3e}",
            Duration::MAX.as_secs_f64() / 60.0
        )
    };
    if !(minutes.is_finite() && minutes >= 0.0) {
        return Err(bad());
    }
    if minutes == 0.0 {
        return Ok(None);
    }
    Duration::try_from_secs_f64(minutes * 60.0).map(Some).map_err(|_| bad())
}

pub(super) fn model_flags_given(a: &Args) -> bool {
    a.layers.is_some()
        || a.dim.is_some()
        || a.heads.is_some()
        || a.kv_heads.is_some()
        || a.ffn.is_some()
        || a.seq_len.is_some()
}

#[cfg(test)]
mod tests {
    use super::{Args, Preset, model_config, train_config};
    use clap::Parser;

    fn parse(flags: &[&str]) -> Args {
        Args::try_parse_from(std::iter::once("train").chain(flags.iter().copied())).expect("flags parse")
    }

    fn parameters(a: &Args) -> usize {
        crate::params::layout(&model_config(a)).iter().map(|p| p.elements()).sum()
    }

    #[test]
    fn each_preset_has_its_shape_and_schedule() {
        // (flag, layers, dim, heads, kv heads, ffn, context, parameters over bytes, batch, peak lr)
        let presets = [
            ("tiny", Preset::Tiny, 2, 64, 4, 2, 192, 64, 115_008, 8, 4e-3),
            ("gpt2-small", Preset::Gpt2Small, 12, 768, 12, 12, 2048, 1024, 85_150_464, 8, 6e-4),
            ("gpt2-medium", Preset::Gpt2Medium, 24, 1024, 16, 16, 2752, 1024, 303_875_072, 8, 3e-4),
        ];
        for (flag, preset, layers, dim, heads, kv, ffn, seq, params, batch, lr) in presets {
            let a = parse(&["--preset", flag]);
            assert_eq!(a.preset, preset, "{flag}");
            let c = model_config(&a);
            c.validate().unwrap_or_else(|e| panic!("{flag}: {e}"));
            assert_eq!(
                (c.layers, c.dim, c.heads, c.kv_heads, c.ffn_hidden, c.seq_len, c.vocab),
                (layers, dim, heads, kv, ffn, seq, 256),
                "{flag}"
            );
            assert_eq!(parameters(&a), params, "{flag}");
            let t = train_config(&a);
            assert_eq!((t.batch, t.lr), (batch, lr), "{flag}");
            assert!(t.min_lr < t.lr && t.warmup < t.steps, "{flag}: {t:?}");
        }
    }

    #[test]
    fn flags_override_the_preset() {
        let a =
            parse(&["--preset", "gpt2-medium", "--layers", "2", "--seq-len", "128", "--batch", "2", "--lr", "1e-3"]);
        let c = model_config(&a);
        assert_eq!((c.layers, c.dim, c.heads, c.kv_heads, c.seq_len), (2, 1024, 16, 16, 128));
        let t = train_config(&a);
        assert_eq!((t.batch, t.lr, t.min_lr), (2, 1e-3, 3e-5));
    }
}
