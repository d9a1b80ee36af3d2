//! Token shards, evaluation and the metrics log: shards written by `--tokenize-to` hold the ids
//! of the text in memory; training from shards larger than the reading buffer sees the windows
//! (and follows the trajectory, bit for bit) of training on the same tokens in memory; `--eval`
//! gives training's validation loss on the same windows and the float64 model's loss; the
//! metrics log has a line per logged step and survives a resume.

mod common;
#[path = "reference/model.rs"]
mod reference;

use clap::Parser;
use kernels_train::cli::{self, Args, Stop};
use kernels_train::config::{ModelConfig, TrainConfig};
use kernels_train::data::{self, Corpus, Tokens};
use kernels_train::eval;
use kernels_train::export::token_byte_lengths;
use kernels_train::metrics;
use kernels_train::model::Model;
use kernels_train::rng::Rng;
use kernels_train::shards::{self, Shards};
use kernels_train::tokenizer::Tokenizer;
use kernels_train::trainer::Trainer;
use std::path::{Path, PathBuf};

fn cli(args: &[&str]) -> Result<(), cli::Failure> {
    let mut all = vec!["train", "--quiet"];
    all.extend_from_slice(args);
    cli::run(Args::parse_from(all), &Stop::new())
}

/// The first byte of the UTF-8 character at byte `i` of `t` (`i` itself at the end).
fn char_start(t: &[u8], mut i: usize) -> usize {
    while i < t.len() && t[i] & 0xC0 == 0x80 {
        i -= 1;
    }
    i
}

/// The built-in text with random lines mixed in, so every seed cuts it differently. Cuts and
/// insertions fall on a character's first byte: the text has multi-byte characters, and the
/// tokenizer is trained on it as a string.
fn text(seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut t = data::built_in_text();
    let end = char_start(&t, (120_000 + rng.below(30_000) as usize).min(t.len()));
    t.truncate(end);
    for _ in 0..200 {
        let at = char_start(&t, rng.below(t.len() as u64) as usize);
        let line = format!("\nline {} of noise ünïcödé\n", rng.below(1 << 30));
        t.splice(at..at, line.bytes());
    }
    t
}

fn all_tokens(s: &Shards) -> Vec<u32> {
    let mut out = Vec::new();
    s.read(0, s.len(), usize::MAX, &mut out).unwrap();
    out
}

#[test]
fn tokenize_to_writes_the_ids_of_the_text_in_memory() {
    let seed = common::seed("tokenize_to_writes_the_ids_of_the_text_in_memory");
    let d = common::tmp("tokenize");
    let t = text(seed);
    let half = t.len() / 2 + (seed % 1000) as usize;
    let cut = (half..t.len()).find(|&i| std::str::from_utf8(&t[..i]).is_ok()).unwrap();
    let (a, b) = (d.join("a.txt"), d.join("b.txt"));
    std::fs::write(&a, &t[..cut]).unwrap();
    std::fs::write(&b, &t[cut..]).unwrap();
    let tk = Tokenizer::train_bpe(std::str::from_utf8(&t).unwrap(), 400).unwrap();
    let want = tk.encode(&t).unwrap();
    let out = d.join("shards");
    let mut calls = 0;
    let w = shards::write_shards(&[a.clone(), b.clone()], &tk, &out, 7_000, |_, _| calls += 1).unwrap();
    assert_eq!(w.tokens, want.len());
    assert_eq!(w.files.len(), want.len().div_ceil(7_000));
    assert!(calls >= 2);
    let s = Shards::open(&shards::resolve(&out).unwrap()).unwrap();
    s.check_tokenizer(&tk).unwrap();
    assert!(s.check_tokenizer(&Tokenizer::bytes()).unwrap_err().to_string().contains("another tokenizer"));
    assert_eq!(all_tokens(&s), want, "the shards hold other ids than the text in memory");
    // Bytes, through the command line: one file per byte, the tokenizer left out of the folder.
    let bytes_dir = d.join("bytes");
    cli(&[
        "--tokenize-to",
        bytes_dir.to_str().unwrap(),
        "--data",
        d.join("*.txt").to_str().unwrap(),
        "--shard-tokens",
        "50000",
    ])
    .unwrap();
    let s = Shards::open(&shards::resolve(&bytes_dir).unwrap()).unwrap();
    assert_eq!(all_tokens(&s), t.iter().map(|&b| b as u32).collect::<Vec<_>>());
    assert!(!bytes_dir.join("tokenizer.json").exists());
    // Refused: tokenizing into a folder of shards, bpe:N, no --data.
    let e = cli(&["--tokenize-to", bytes_dir.to_str().unwrap(), "--data", a.to_str().unwrap()]).unwrap_err();
    assert!(e.message.contains("holds .bin shards already"), "{}", e.message);
    assert!(
        cli(&["--tokenize-to", d.join("x").to_str().unwrap(), "--data", a.to_str().unwrap(), "--tokenizer", "bpe:300"])
            .is_err()
    );
    assert!(cli(&["--tokenize-to", d.join("y").to_str().unwrap()]).unwrap_err().message.contains("needs --data"));
    std::fs::remove_dir_all(d).unwrap();
}

/// Writes `ids` as shards of `per` tokens (uint16) into `dir`.
fn shards_of(ids: &[u32], dir: &Path, per: usize, tk: &Tokenizer) -> Vec<PathBuf> {
    let mut files = Vec::new();
    std::fs::create_dir_all(dir).unwrap();
    for (i, chunk) in ids.chunks(per).enumerate() {
        let mut b = Vec::new();
        let mut h = [0i32; 256];
        (h[0], h[1], h[2], h[3], h[4]) = (
            shards::MAGIC_U16,
            shards::VERSION_U16,
            chunk.len() as i32,
            shards::TOKENIZER_TAG,
            shards::tokenizer_crc(tk) as i32,
        );
        for x in h {
            b.extend_from_slice(&x.to_le_bytes());
        }
        for &id in chunk {
            b.extend_from_slice(&(id as u16).to_le_bytes());
        }
        let p = shards::shard_path(dir, i);
        std::fs::write(&p, b).unwrap();
        files.push(p);
    }
    files
}

#[test]
fn training_from_shards_sees_the_windows_of_the_same_tokens_in_memory() {
    let Some(gpu) = common::gpu() else { return };
    let seed = common::seed("training_from_shards_sees_the_windows_of_the_same_tokens_in_memory");
    let d = common::tmp("windows");
    let t = text(seed);
    let tk = Tokenizer::bytes();
    let memory = Corpus::new(&t, "memory", tk.clone()).unwrap();
    let ids: Vec<u32> = t.iter().map(|&b| b as u32).collect();
    // Shards of 10,000 tokens read through a 256-byte buffer: windows cross buffers and shards.
    let files = shards_of(&ids, &d, 10_000, &tk);
    let s = Shards::open(&files).unwrap().with_buffer(256);
    assert!(s.files() > 5);
    let from_shards = Corpus::held_out(Tokens::shards(s, &tk).unwrap(), tk.clone(), "shards");
    assert_eq!((from_shards.train_len(), from_shards.validation_len()), (memory.train_len(), memory.validation_len()));
    for step in 0..50 {
        assert_eq!(
            from_shards.train_batch(seed, step, 8, 100).unwrap(),
            memory.train_batch(seed, step, 8, 100).unwrap()
        );
    }
    for k in 0..4 {
        assert_eq!(from_shards.validation_batch(k, 4, 8, 100).unwrap(), memory.validation_batch(k, 4, 8, 100).unwrap());
    }
    // The same trajectory, bit for bit.
    let m = ModelConfig::new(32, 1, 4, 2, 16);
    let tc = TrainConfig { batch: 2, steps: 5, seed, ..TrainConfig::default() };
    let run = |c: Corpus| {
        let mut tr = Trainer::new(&gpu, &m, &tc, c).unwrap();
        let losses: Vec<u32> = (0..5).map(|_| tr.step(true).unwrap().unwrap().to_bits()).collect();
        (losses, tr.validate(2).unwrap().to_bits())
    };
    let s = Shards::open(&files).unwrap().with_buffer(64);
    let shards_run = run(Corpus::held_out(Tokens::shards(s, &tk).unwrap(), tk.clone(), "shards"));
    assert_eq!(shards_run, run(Corpus::new(&t, "memory", tk.clone()).unwrap()));
    // Every shard cut short under a run: the next batch is an error naming a shard, not a crash.
    let s = Shards::open(&files).unwrap();
    let mut tr = Trainer::new(&gpu, &m, &tc, Corpus::held_out(Tokens::shards(s, &tk).unwrap(), tk, "shards")).unwrap();
    tr.step(false).unwrap();
    for f in &files {
        std::fs::OpenOptions::new().write(true).open(f).unwrap().set_len(1030).unwrap();
    }
    let e = tr.step(true).unwrap_err().to_string();
    assert!(e.contains("truncated") && e.contains(".bin"), "{e}");
    assert_eq!(tr.step, 1, "the step whose batch could not be read did not run");
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn eval_gives_the_validation_loss_and_the_float64_models() {
    let Some(gpu) = common::gpu() else { return };
    let seed = common::seed("eval_gives_the_validation_loss_and_the_float64_models");
    let m = ModelConfig::new(24, 1, 4, 2, 12);
    let tc = TrainConfig { batch: 3, steps: 3, seed, ..TrainConfig::default() };
    let mut tr = Trainer::new(&gpu, &m, &tc, Corpus::built_in()).unwrap();
    for _ in 0..3 {
        tr.step(false).unwrap();
    }
    let (count, batch) = (4, tc.batch);
    let want = tr.validate(count).unwrap();
    // The validation windows, scored by eval.
    let val = tr.corpus.validation().clone();
    let windows: Vec<eval::Window> = (0..count)
        .flat_map(|k| data::validation_starts(val.len(), k, count, batch, m.seq_len))
        .map(|s| (s, m.seq_len))
        .collect();
    let lens = token_byte_lengths(&Tokenizer::bytes()).unwrap();
    let s = eval::score(&mut tr.model, &val, &windows, batch, &lens, |_, _| {}).unwrap();
    assert_eq!(s.tokens, count * batch * m.seq_len);
    let rel = (s.mean_loss() - want as f64).abs() / want as f64;
    assert!(rel < 1e-6, "eval {} vs validation {want}", s.mean_loss());
    assert!((s.bits_per_byte() - s.mean_loss() / std::f64::consts::LN_2).abs() < 1e-12, "bytes: one byte a token");
    // Every token of a random text once, a short last window included, against float64.
    let mut rng = Rng::new(seed);
    let n = 5 * m.seq_len + 1 + rng.below(m.seq_len as u64 - 1) as usize;
    let ids: Vec<u32> = (0..n).map(|_| rng.below(256) as u32).collect();
    let bytes: Vec<u8> = ids.iter().map(|&i| i as u8).collect();
    let tokens = Tokens::text(&bytes, &Tokenizer::bytes()).unwrap();
    let weights = tr.model.weights().unwrap();
    let mut model = Model::new(&gpu, &m, 2, &weights, None).unwrap();
    let cover = eval::cover(n, m.seq_len);
    let got = eval::score(&mut model, &tokens, &cover, 2, &lens, |_, _| {}).unwrap();
    assert_eq!(got.tokens, n - 1);
    let p64: Vec<Vec<f64>> = weights.iter().map(|t| t.iter().map(|&x| x as f64).collect()).collect();
    let mut nats = 0.0;
    for &(start, k) in &cover {
        // Causal: the float64 model on the window's k inputs scores its k targets.
        let c = ModelConfig { seq_len: k, ..m.clone() };
        nats += reference::loss(&c, &p64, &ids[start..start + k], &ids[start + 1..start + 1 + k], 1) * k as f64;
    }
    let want = nats / (n - 1) as f64;
    assert!((got.mean_loss() - want).abs() < 2e-5 * want, "eval {} vs float64 {want}", got.mean_loss());
}

#[test]
fn runs_from_shards_log_metrics_and_eval_from_the_command_line() {
    let Some(_gpu) = common::gpu() else { return };
    let d = common::tmp("cli-shards");
    let t = data::built_in_text();
    std::fs::write(d.join("corpus.txt"), &t).unwrap();
    let sh = d.join("sh");
    cli(&[
        "--tokenize-to",
        sh.to_str().unwrap(),
        "--data",
        d.join("corpus.txt").to_str().unwrap(),
        "--shard-tokens",
        "150000",
    ])
    .unwrap();
    assert!(shards::resolve(&sh).unwrap().len() >= 2);
    let ck = d.join("run.safetensors");
    let ckp = ck.to_str().unwrap();
    let model = ["--dim", "32", "--layers", "1", "--heads", "4", "--kv-heads", "2", "--seq-len", "16", "--batch", "2"];
    let mut args = vec![
        "--data",
        sh.to_str().unwrap(),
        "--steps",
        "6",
        "--log-every",
        "2",
        "--eval-every",
        "3",
        "--eval-batches",
        "1",
        "--checkpoint",
        ckp,
        "--sample-tokens",
        "2",
    ];
    args.extend(model);
    cli(&args).unwrap();
    let c = kernels_train::checkpoint::load(&ck).unwrap();
    let log = metrics::read(&metrics::metrics_path(&ck)).unwrap();
    assert_eq!(log.iter().map(|r| r.step).collect::<Vec<_>>(), [2, 3, 4, 6]);
    let (train, val) = metrics::curves(&log);
    assert_eq!(train, c.train_history);
    assert_eq!(val, c.val_history);
    assert!(log.iter().all(|r| r.lr.is_some() && r.tokens_per_s.is_some() && r.loss_scale.is_none()));
    // f32 (no loss scaler): every logged step has the gradient norm, positive and finite (a
    // random model's loss has a gradient).
    assert!(log.iter().all(|r| r.grad_norm.is_some_and(|g| g.is_finite() && g > 0.0)), "{log:?}");
    let text = std::fs::read_to_string(metrics::metrics_path(&ck)).unwrap();
    assert!(text.lines().all(|l| l.starts_with("{\"step\":") && l.contains("\"grad_norm\":")), "{text}");
    let svg = std::fs::read_to_string(kernels_train::checkpoint::curve_path(&ck)).unwrap();
    assert_eq!(svg.matches("<circle").count(), 2 + 1, "two validation points and the legend's");
    // A resume keeps the log and appends.
    cli(&[
        "--resume",
        "--data",
        sh.to_str().unwrap(),
        "--steps",
        "8",
        "--log-every",
        "2",
        "--eval-every",
        "3",
        "--checkpoint",
        ckp,
        "--sample-tokens",
        "2",
    ])
    .unwrap();
    let log = metrics::read(&metrics::metrics_path(&ck)).unwrap();
    assert_eq!(log.iter().map(|r| r.step).collect::<Vec<_>>(), [2, 3, 4, 6, 8]);
    // --eval on the validation shard and on a text; shards of another tokenizer are refused.
    let last = shards::resolve(&sh).unwrap().pop().unwrap();
    cli(&["--checkpoint", ckp, "--eval", last.to_str().unwrap()]).unwrap();
    std::fs::write(d.join("short.txt"), &t[..3000]).unwrap();
    cli(&["--checkpoint", ckp, "--eval", d.join("short.txt").to_str().unwrap(), "--batch", "3"]).unwrap();
    let tk = Tokenizer::train_bpe(std::str::from_utf8(&t).unwrap(), 300).unwrap();
    let other = d.join("other");
    shards_of(&tk.encode(&t).unwrap(), &other, 1 << 20, &tk);
    let e = cli(&["--checkpoint", ckp, "--eval", other.to_str().unwrap()]).unwrap_err();
    assert!(e.message.contains("another tokenizer"), "{}", e.message);
    let e = cli(&["--resume", "--data", other.to_str().unwrap(), "--steps", "9", "--checkpoint", ckp]).unwrap_err();
    assert!(e.message.contains("another tokenizer"), "{}", e.message);
    std::fs::remove_dir_all(d).unwrap();
}
