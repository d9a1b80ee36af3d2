//! BPE tokens end to end: a byte-level BPE trained on the corpus lowers the loss of the tiny
//! model; its checkpoint reads back as the README's PyTorch recipe reads it; `--resume` and
//! `--generate` use the recorded tokenizer and refuse another.

mod common;

use common::tmp;

use clap::Parser;
use kernels_train::checkpoint;
use kernels_train::cli::{self, Args, Stop};
use kernels_train::config::{ModelConfig, TrainConfig};
use kernels_train::data::{Corpus, built_in_text};
use kernels_train::params;
use kernels_train::tokenizer::Tokenizer;
use kernels_train::trainer::Trainer;

fn cli(args: &[&str]) -> Result<(), cli::Failure> {
    let mut all = vec!["train", "--quiet"];
    all.extend_from_slice(args);
    cli::run(Args::try_parse_from(all).expect("valid flags"), &Stop::new())
}

/// The tiny preset's shape (2 layers, width 64, 4 heads, 2 kv heads, context 64) on a
/// 512-token BPE of the built-in text, batches of 4: the loss falls within 40 steps.
#[test]
fn training_on_bpe_512_lowers_the_loss() {
    let Some(gpu) = common::gpu() else { return };
    let text = built_in_text();
    let started = std::time::Instant::now();
    let tk = Tokenizer::train_bpe(std::str::from_utf8(&text).unwrap(), 512).unwrap();
    let ids = tk.encode(&text).unwrap();
    let mut counts = vec![0usize; tk.vocab_size()];
    ids.iter().for_each(|&i| counts[i as usize] += 1);
    let unigram: f64 = counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / ids.len() as f64;
            -p * p.ln()
        })
        .sum();
    eprintln!("entropy of the tokens' frequencies: {unigram:.3} nats");
    let corpus = Corpus::new(&text, "built-in", tk).unwrap();
    eprintln!(
        "BPE trained and {} bytes tokenized into {} tokens in {:.2} s",
        text.len(),
        corpus.len(),
        started.elapsed().as_secs_f64()
    );
    let m = ModelConfig::new(64, 2, 4, 2, 64).with_vocab(512);
    let t = TrainConfig { batch: 4, steps: 40, lr: 4e-3, min_lr: 4e-4, warmup: 4, seed: 5, ..TrainConfig::default() };
    // The vocabulary must be the tokenizer's.
    let bytes_model = ModelConfig::new(64, 2, 4, 2, 64);
    let e = Trainer::new(&gpu, &bytes_model, &t, Corpus::new(&text, "x", corpus.tokenizer().clone()).unwrap());
    assert!(e.is_err_and(|e| e.to_string().contains("needs 512")));
    let mut tr = Trainer::new(&gpu, &m, &t, corpus).unwrap();
    let losses: Vec<f32> = (0..t.steps).map(|_| tr.step(true).unwrap().unwrap()).collect();
    let (first, last) = (losses[0], losses[t.steps - 4..].iter().sum::<f32>() / 4.0);
    eprintln!("loss: first {first}, mean of the last 4 {last}");
    assert!((5.0..7.0).contains(&first), "an untrained model is near ln 512 = 6.24: {first}");
    // 40 steps learn about the tokens' frequencies (the entropy printed above): a fall of half
    // a nat at least.
    assert!(last < first - 0.5, "the loss did not fall: {first} → {last}");
    assert!(last < unigram as f32 + 0.25, "not near the frequencies' entropy {unigram}: {last}");
    // A sample decodes to text.
    let sample = tr.generate("fn ", 12, 0.8, 40, 1).unwrap();
    assert!(!sample.is_empty());
}

/// A run with `--tokenizer bpe:300` (vocabulary 300, padded to 320): the checkpoint is read as
/// the README's Python recipe reads it (`safetensors.torch.load_file` for the tensors,
/// `safe_open(...).metadata()["tokenizer"]` for `Tokenizer.from_str`), here through the
/// `safetensors` and `tokenizers` crates; `NAME.tokenizer.json` beside it is the same
/// tokenizer; `--resume` and `--generate` take the checkpoint's tokenizer and refuse another.
#[test]
fn a_checkpoint_records_its_tokenizer_and_resume_and_generate_refuse_another() {
    let Some(_gpu) = common::gpu() else { return };
    let dir = tmp("record");
    let ck = dir.join("m.safetensors");
    let ckp = ck.to_str().unwrap();
    let small = ["--dim", "16", "--layers", "1", "--heads", "2", "--kv-heads", "1", "--seq-len", "8", "--batch", "2"];
    let mut args = small.to_vec();
    args.extend(["--steps", "2", "--checkpoint", ckp, "--sample-tokens", "4", "--tokenizer", "bpe:300"]);
    cli(&args).unwrap();

    // What PyTorch's recipe sees: plain F32 tensors under the LLaMA names, and the metadata.
    let bytes = std::fs::read(&ck).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let meta = header.metadata().clone().unwrap();
    let found = checkpoint::load(&ck).unwrap();
    assert_eq!(found.model.vocab, 320);
    for p in params::layout(&found.model).iter() {
        let t = st.tensor(&p.name).unwrap();
        assert_eq!((t.dtype(), t.shape()), (safetensors::Dtype::F32, &p.shape[..]), "{}", p.name);
    }
    assert_eq!(st.tensor("tok_embeddings.weight").unwrap().shape(), &[320, 16]);
    assert_eq!(meta["format"], checkpoint::FORMAT);
    let config: serde_json::Value = serde_json::from_str(&meta["config"]).unwrap();
    assert_eq!(config["vocab"], 320);
    let from_meta: tokenizers::Tokenizer = meta["tokenizer"].parse().unwrap();
    assert_eq!(from_meta.get_vocab_size(true), 300);
    let beside = checkpoint::tokenizer_path(&ck);
    assert_eq!(beside, dir.join("m.tokenizer.json"));
    let file = tokenizers::Tokenizer::from_file(&beside).unwrap();
    let probe = "fn main() { let x = 1; }\n";
    assert_eq!(file.encode(probe, false).unwrap().get_ids(), from_meta.encode(probe, false).unwrap().get_ids());
    assert_eq!(found.tokenizer, Tokenizer::open(&beside).unwrap());

    // Another tokenizer is refused, naming both, and nothing is written.
    let other = dir.join("other.json");
    let text = built_in_text();
    // The first half, cut where a character starts (the built-in text has multi-byte ones).
    let text = std::str::from_utf8(&text).unwrap();
    let half = (0..=text.len() / 2).rev().find(|&i| text.is_char_boundary(i)).unwrap();
    let other_tk = Tokenizer::train_bpe(&text[..half], 300).unwrap();
    std::fs::write(&other, other_tk.json().unwrap()).unwrap();
    let otherp = other.to_str().unwrap();
    let refusals: [&[&str]; 5] = [
        &["--resume", "--steps", "3", "--tokenizer", "bytes"],
        &["--resume", "--steps", "3", "--tokenizer", "bpe:400"],
        &["--resume", "--steps", "3", "--tokenizer", otherp],
        &["--generate", "fn ", "--tokenizer", otherp],
        &["--generate", "fn ", "--tokenizer", "bytes"],
    ];
    for flags in refusals {
        let mut a = flags.to_vec();
        a.extend(["--checkpoint", ckp]);
        let e = cli(&a).unwrap_err();
        assert_eq!(e.code, cli::exit::USAGE, "{flags:?}: {}", e.message);
        assert!(e.message.contains("another tokenizer"), "{flags:?}: {}", e.message);
        assert!(e.message.contains("BPE (300 tokens)"), "{flags:?}: {}", e.message);
    }
    assert_eq!(std::fs::read(&ck).unwrap(), bytes, "a refused run touched the checkpoint");

    // The same one, named or not, is accepted; the resumed run trains on the same tokens.
    let besidep = beside.to_str().unwrap();
    cli(&["--resume", "--steps", "3", "--checkpoint", ckp, "--sample-tokens", "4", "--tokenizer", besidep]).unwrap();
    cli(&["--resume", "--steps", "4", "--checkpoint", ckp, "--sample-tokens", "4", "--tokenizer", "bpe:300"]).unwrap();
    cli(&["--resume", "--steps", "5", "--checkpoint", ckp, "--sample-tokens", "4"]).unwrap();
    let resumed = checkpoint::load(&ck).unwrap();
    assert_eq!((resumed.step, &resumed.tokenizer), (5, &found.tokenizer));
    cli(&["--generate", "fn ", "--checkpoint", ckp, "--sample-tokens", "4"]).unwrap();
    cli(&["--generate", "fn ", "--checkpoint", ckp, "--sample-tokens", "4", "--tokenizer", besidep]).unwrap();

    // A byte checkpoint refuses a BPE.
    let bytes_ck = dir.join("b.safetensors");
    let bp = bytes_ck.to_str().unwrap();
    let mut args = small.to_vec();
    args.extend(["--steps", "1", "--checkpoint", bp, "--sample-tokens", "2"]);
    cli(&args).unwrap();
    assert!(!checkpoint::tokenizer_path(&bytes_ck).exists(), "bytes have no tokenizer.json");
    let e = cli(&["--resume", "--steps", "2", "--checkpoint", bp, "--tokenizer", "bpe:300"]).unwrap_err();
    assert!(e.code == cli::exit::USAGE && e.message.contains("bytes (256 tokens) (checkpoint)"), "{}", e.message);

    // Flags that name no tokenizer are usage errors before anything runs.
    for bad in ["bpe:12", "bpe:many", "words"] {
        let e = Args::try_parse_from(["train", "--tokenizer", bad]).unwrap_err();
        assert!(e.to_string().contains(bad), "{e}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// The in-memory checkpoint (what the browser page downloads) is byte for byte the file the
/// native trainer writes, and reads back to the same checkpoint.
#[test]
fn in_memory_checkpoints_are_the_native_file() {
    let Some(gpu) = common::gpu() else { return };
    let text = built_in_text();
    let tk = Tokenizer::train_bpe(std::str::from_utf8(&text).unwrap(), 300).unwrap();
    let m = ModelConfig::new(16, 1, 2, 1, 8).with_vocab(tk.model_vocab());
    let t = TrainConfig { batch: 2, steps: 3, seed: 8, ..TrainConfig::default() };
    let mut tr = Trainer::new(&gpu, &m, &t, Corpus::new(&text, "built-in", tk).unwrap()).unwrap();
    for _ in 0..2 {
        tr.step(true).unwrap();
    }
    let dir = tmp("bytes");
    let path = dir.join("m.safetensors");
    tr.save(&path).unwrap();
    let ck = pollster::block_on(tr.checkpoint_async()).unwrap();
    assert_eq!(ck, tr.checkpoint().unwrap());
    let bytes = checkpoint::to_bytes(&ck).unwrap();
    assert_eq!(bytes, std::fs::read(&path).unwrap());
    assert_eq!(checkpoint::from_bytes(&bytes, "memory").unwrap(), ck);
    std::fs::remove_dir_all(dir).unwrap();
}
