//! The exports against an independent implementation of the same model: candle-transformers'
//! Llama reads the Hugging Face folder, its quantized Llama the GGUF file, and both must give our
//! model's logits within 1e-4 on several prompts and the same greedy continuation. Models: a
//! random one (grouped-query heads, widths that are not powers of two, a BPE tokenizer whose
//! vocabulary is padded) and a trained byte-level one. Import → export is bitwise; folders the
//! trainer cannot hold are refused with their reasons. Nothing is downloaded: the tests write
//! their own models.

mod common;

use candle_core::{DType, Device, Tensor};
use candle_transformers::models::{llama, quantized_llama};
use clap::Parser;
use kernels_train::cli::{self, Args, Stop};
use kernels_train::config::{ModelConfig, TrainConfig};
use kernels_train::data::Corpus;
use kernels_train::export::{ExportDtype, Exported, gguf, hf};
use kernels_train::model::Model;
use kernels_train::params;
use kernels_train::rng::Rng;
use kernels_train::tokenizer::Tokenizer;
use kernels_train::trainer::Trainer;
use std::path::Path;

/// The largest logit difference allowed between our model and candle's.
const LOGIT_TOL: f32 = 1e-4;

/// A model with random weights of every tensor (norm gains too, so a gain in the wrong place
/// shows), large enough that logits spread over a few units.
fn random_weights(cfg: &ModelConfig, seed: u64) -> kernels_train::model::Tensors {
    let mut rng = Rng::new(seed);
    params::layout(cfg).map(|p| {
        let fan_in = *p.shape.last().unwrap_or(&1) as f64;
        (0..p.elements())
            .map(|_| match p.kind {
                params::Kind::Norm => (1.0 + 0.3 * rng.normal()) as f32,
                params::Kind::Embedding => (0.4 * rng.normal()) as f32,
                _ => (rng.normal() / fan_in.sqrt()) as f32,
            })
            .collect()
    })
}

fn bpe() -> Tokenizer {
    let text = kernels_train::data::built_in_text();
    Tokenizer::train_bpe(std::str::from_utf8(&text).unwrap(), 300).unwrap()
}

/// The random model: 2 layers, width 60, 6 query heads of 10 over 2 key/value heads, ffn 92,
/// context 24, a 300-token BPE padded to 320.
fn random_model(seed: u64) -> Exported {
    let tokenizer = bpe();
    let mut cfg = ModelConfig::new(60, 2, 6, 2, 24).with_vocab(tokenizer.model_vocab());
    cfg.ffn_hidden = 92;
    cfg.norm_eps = 1e-5;
    cfg.rope_base = 500.0;
    assert_eq!((tokenizer.vocab_size(), cfg.vocab), (300, 320));
    Exported { params: random_weights(&cfg, seed), model: cfg, tokenizer }
}

/// Prompts: texts through the tokenizer and random ids, each at most `max` tokens.
fn prompts(tk: &Tokenizer, rng: &mut Rng, max: usize) -> Vec<Vec<u32>> {
    let mut out = Vec::new();
    for text in ["fn main() {\n    let x = 1;", "The kernels are", "// --- KERNEL: matmul ---\n@compute"] {
        let mut ids = tk.encode(text.as_bytes()).unwrap();
        ids.truncate(max);
        out.push(ids);
    }
    for n in [1, 5, max] {
        out.push((0..n).map(|_| rng.below(tk.vocab_size() as u64) as u32).collect());
    }
    out
}

/// Our model's logits for the token after each prefix of `ids` (the tokenizer's rows only).
fn ours(model: &mut Model, ids: &[u32], vocab: usize) -> Vec<Vec<f32>> {
    (1..=ids.len())
        .map(|n| {
            let mut l = model.next_logits(&ids[..n]).unwrap();
            l.truncate(vocab);
            l
        })
        .collect()
}

/// candle's Llama on an exported folder.
struct CandleHf {
    model: llama::Llama,
    cfg: llama::Config,
}

impl CandleHf {
    fn load(dir: &Path) -> CandleHf {
        let cfg: llama::LlamaConfig = serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
        let cfg = cfg.into_config(false);
        assert!(cfg.tie_word_embeddings);
        let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
        let vb = candle_nn::VarBuilder::from_buffered_safetensors(bytes, DType::F32, &Device::Cpu).unwrap();
        CandleHf { model: llama::Llama::load(vb, &cfg).unwrap(), cfg }
    }

    fn next_logits(&self, ids: &[u32]) -> Vec<f32> {
        let mut cache = llama::Cache::new(false, DType::F32, &self.cfg, &Device::Cpu).unwrap();
        let x = Tensor::new(ids, &Device::Cpu).unwrap().unsqueeze(0).unwrap();
        self.model.forward(&x, 0, &mut cache).unwrap().squeeze(0).unwrap().to_vec1::<f32>().unwrap()
    }
}

/// candle's quantized Llama on an exported GGUF file.
struct CandleGguf(quantized_llama::ModelWeights);

impl CandleGguf {
    fn load(bytes: &[u8]) -> CandleGguf {
        let mut r = std::io::Cursor::new(bytes);
        let content = candle_core::quantized::gguf_file::Content::read(&mut r).unwrap();
        CandleGguf(quantized_llama::ModelWeights::from_gguf(content, &mut r, &Device::Cpu).unwrap())
    }

    fn next_logits(&mut self, ids: &[u32]) -> Vec<f32> {
        self.0.clear_kv_cache();
        let x = Tensor::new(ids, &Device::Cpu).unwrap().unsqueeze(0).unwrap();
        self.0.forward(&x, 0).unwrap().squeeze(0).unwrap().to_vec1::<f32>().unwrap()
    }
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "vocabularies differ");
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// The index of the largest logit, the first of equals (as `sample` at temperature 0), and the
/// gap to the runner-up.
fn argmax(l: &[f32]) -> (usize, f32) {
    let mut order: Vec<usize> = (0..l.len()).collect();
    order.sort_by(|&a, &b| l[b].total_cmp(&l[a]));
    (order[0], l[order[0]] - l[order[1]])
}

/// Greedy continuations of `prompt` by both, up to the context: identical, except that a step
/// where our two best logits are within the comparison's tolerance (a tie neither side decides
/// reliably) ends the comparison there.
fn same_greedy(
    what: &str,
    model: &mut Model,
    other: &mut dyn FnMut(&[u32]) -> Vec<f32>,
    prompt: &[u32],
    vocab: usize,
) -> usize {
    let (mut a, mut b) = (prompt.to_vec(), prompt.to_vec());
    let mut compared = 0;
    while a.len() < model.cfg.seq_len {
        let mut la = model.next_logits(&a).unwrap();
        la.truncate(vocab);
        let lb = other(&b);
        let ((ia, gap), (ib, _)) = (argmax(&la), argmax(&lb));
        if ia != ib {
            assert!(gap <= 2.0 * LOGIT_TOL, "{what}: greedy step {compared} picks {ia} (gap {gap}) against {ib}");
            eprintln!("{what}: a tie (gap {gap}) at greedy step {compared}: compared up to there");
            break;
        }
        a.push(ia as u32);
        b.push(ib as u32);
        compared += 1;
    }
    compared
}

/// Exports `m` (matrices in `dtype`) and checks both candle models against ours, which runs the
/// weights rounded as the export stores them.
fn check_against_candle(gpu: &kernels::Gpu, m: &Exported, dtype: ExportDtype, seed: u64, name: &str) {
    let dir = common::tmp(&format!("candle-{name}"));
    hf::write(&dir, m, dtype).unwrap();
    let (gguf_bytes, warning) = gguf::to_bytes(m, dtype, name).unwrap();
    assert!(warning.is_none(), "{warning:?}");
    let rounded = match dtype {
        ExportDtype::F32 => m.params.clone(),
        ExportDtype::F16 => m.params.clone().map(|t| t.iter().map(|&x| half::f16::from_f32(x).to_f32()).collect()),
    };
    // GGUF keeps the RMSNorm gains in f32.
    let mut rounded_gguf = rounded.clone();
    rounded_gguf.final_norm = m.params.final_norm.clone();
    for (l, o) in rounded_gguf.layers.iter_mut().zip(&m.params.layers) {
        l.attn_norm = o.attn_norm.clone();
        l.ffn_norm = o.ffn_norm.clone();
    }
    let vocab = m.tokenizer.vocab_size();
    let candle = CandleHf::load(&dir);
    let mut quantized = CandleGguf::load(&gguf_bytes);
    let mut rng = Rng::new(seed ^ 0x9e37);
    for (weights, label) in [(&rounded, "HF"), (&rounded_gguf, "GGUF")] {
        let mut model = Model::new(gpu, &m.model, 1, weights, None).unwrap();
        let mut worst = 0.0f32;
        let mut steps = 0;
        for p in prompts(&m.tokenizer, &mut rng, m.model.seq_len - 4) {
            let mine = ours(&mut model, &p, vocab);
            for (n, want) in mine.iter().enumerate() {
                let got = match label {
                    "HF" => candle.next_logits(&p[..=n]),
                    _ => quantized.next_logits(&p[..=n]),
                };
                let d = max_diff(want, &got);
                assert!(d <= LOGIT_TOL, "{name} {label} {dtype:?}: logits after {} tokens differ by {d}", n + 1);
                worst = worst.max(d);
            }
            let mut other = |ids: &[u32]| match label {
                "HF" => candle.next_logits(ids),
                _ => quantized.next_logits(ids),
            };
            steps += same_greedy(&format!("{name} {label}"), &mut model, &mut other, &p, vocab);
        }
        eprintln!("{name} {label} {dtype:?}: largest logit difference {worst:e}; {steps} greedy steps identical");
        assert!(steps >= 20, "too few greedy steps compared: {steps}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_random_gqa_bpe_model_matches_candle_in_hf_and_gguf() {
    let Some(gpu) = common::gpu() else { return };
    let seed = common::seed("a_random_gqa_bpe_model_matches_candle_in_hf_and_gguf");
    let m = random_model(seed);
    check_against_candle(&gpu, &m, ExportDtype::F32, seed, "random");
    check_against_candle(&gpu, &m, ExportDtype::F16, seed, "random-f16");
}

#[test]
fn a_trained_byte_model_matches_candle_and_generates_the_same() {
    let Some(gpu) = common::gpu() else { return };
    let seed = common::seed("a_trained_byte_model_matches_candle_and_generates_the_same");
    let cfg = ModelConfig::new(32, 2, 4, 2, 32);
    let t = TrainConfig { batch: 4, steps: 40, lr: 1e-2, min_lr: 1e-3, warmup: 4, seed: 3, ..TrainConfig::default() };
    let mut tr = Trainer::new(&gpu, &cfg, &t, Corpus::built_in()).unwrap();
    let first = tr.step(true).unwrap().unwrap();
    for _ in 1..40 {
        tr.step(false).unwrap();
    }
    let last = tr.step(true).unwrap().unwrap();
    assert!(last < first - 1.0, "the tiny model did not train: {first} → {last}");
    let ck = tr.checkpoint().unwrap();
    let m = Exported { model: ck.model, params: ck.params, tokenizer: ck.tokenizer };
    check_against_candle(&gpu, &m, ExportDtype::F32, seed, "trained");
    // Our own sampler at temperature 0 continues as the greedy loop above does.
    let mut model = Model::new(&gpu, &m.model, 1, &m.params, None).unwrap();
    let text = kernels_train::trainer::generate(&mut model, &m.tokenizer, "fn ", 12, 0.0, 0, 1).unwrap();
    let mut ids = m.tokenizer.encode(b"fn ").unwrap();
    for _ in 0..12 {
        let l = model.next_logits(&ids).unwrap();
        ids.push(argmax(&l[..256]).0 as u32);
    }
    assert_eq!(text, m.tokenizer.decode(&ids[3..]).unwrap());
}

fn files_equal(a: &Path, b: &Path) {
    for name in
        ["model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"]
    {
        let (x, y) = (std::fs::read(a.join(name)).unwrap(), std::fs::read(b.join(name)).unwrap());
        assert!(x == y, "{name} differs after import → export");
    }
}

#[test]
fn import_then_export_is_bitwise_and_the_tokenizer_agrees_with_the_model() {
    let seed = common::seed("import_then_export_is_bitwise_and_the_tokenizer_agrees_with_the_model");
    let d = common::tmp("roundtrip");
    let mut bytes_model = random_model(seed);
    let cfg = ModelConfig::new(32, 1, 4, 4, 16);
    bytes_model.params = random_weights(&cfg, seed + 1);
    bytes_model.model = cfg;
    bytes_model.tokenizer = Tokenizer::bytes();
    for (m, label) in [(random_model(seed), "bpe"), (bytes_model, "bytes")] {
        for dtype in [ExportDtype::F32, ExportDtype::F16] {
            let (a, b) = (d.join(format!("{label}-{dtype:?}-a")), d.join(format!("{label}-{dtype:?}-b")));
            hf::write(&a, &m, dtype).unwrap();
            let back = hf::read(&a).unwrap();
            assert_eq!(back.model.model, m.model, "{label}: the configuration");
            assert_eq!(back.model.tokenizer, m.tokenizer, "{label}: the tokenizer");
            hf::write(&b, &back.model, dtype).unwrap();
            files_equal(&a, &b);
            // The same GGUF from the original (its weights as the HF folder stores them: in F16
            // the norms too, which GGUF keeps in F32) and from the imported model.
            let mut stored = m.clone();
            if dtype == ExportDtype::F16 {
                stored.params = m.params.clone().map(|t| t.iter().map(|&x| half::f16::from_f32(x).to_f32()).collect());
            }
            let (g1, g2) =
                (gguf::to_bytes(&stored, dtype, "x").unwrap().0, gguf::to_bytes(&back.model, dtype, "x").unwrap().0);
            let at = g1.iter().zip(&g2).position(|(a, b)| a != b);
            assert!(g1 == g2, "{label} {dtype:?}: GGUF differs at byte {at:?} of {}/{}", g1.len(), g2.len());
            if dtype == ExportDtype::F32 {
                // Every weight but the padding rows (the import fills them with zeros) is the same.
                let rows = m.tokenizer.vocab_size() * m.model.dim;
                let (x, y) = (&back.model.params, &m.params);
                assert!(x.embedding[..rows] == y.embedding[..rows] && x.embedding[rows..].iter().all(|&v| v == 0.0));
                assert!(x.layers == y.layers && x.final_norm == y.final_norm);
            }
            // The exported tokenizer.json, read by the tokenizers library, gives our ids, all
            // below the exported vocabulary.
            let hf_tk: tokenizers::Tokenizer =
                std::fs::read_to_string(a.join("tokenizer.json")).unwrap().parse().unwrap();
            let config: serde_json::Value =
                serde_json::from_slice(&std::fs::read(a.join("config.json")).unwrap()).unwrap();
            assert_eq!(config["vocab_size"].as_u64(), Some(hf_tk.get_vocab_size(true) as u64));
            for text in ["fn main() {}\n", "  spaces and\ttabs — ünïcödé\r\n", "x"] {
                let theirs = hf_tk.encode(text, false).unwrap().get_ids().to_vec();
                assert_eq!(theirs, m.tokenizer.encode(text.as_bytes()).unwrap(), "{label}: {text:?}");
            }
        }
    }
    std::fs::remove_dir_all(d).unwrap();
}

/// Rewrites `dir`'s config.json through `change`.
fn edit_config(dir: &Path, change: impl FnOnce(&mut serde_json::Value)) {
    let p = dir.join("config.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    change(&mut v);
    std::fs::write(p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

/// Rewrites `dir`'s weights as `files` shards with an index, in BF16, plus `extra` tensors.
fn reshard(dir: &Path, files: usize, extra: Vec<(String, Vec<usize>, Vec<f32>)>) {
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut all: Vec<(String, Vec<usize>, Vec<f32>)> = st
        .tensors()
        .into_iter()
        .map(|(n, t)| {
            let v = t.data().chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
            (n, t.shape().to_vec(), v)
        })
        .collect();
    all.extend(extra);
    all.sort_by(|a, b| a.0.cmp(&b.0));
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    let mut map = serde_json::Map::new();
    for (i, part) in all.chunks(all.len().div_ceil(files)).enumerate() {
        let file = format!("model-{:05}-of-{files:05}.safetensors", i + 1);
        let data: Vec<(String, Vec<usize>, Vec<u8>)> = part
            .iter()
            .map(|(n, s, v)| {
                (n.clone(), s.clone(), v.iter().flat_map(|&x| half::bf16::from_f32(x).to_le_bytes()).collect())
            })
            .collect();
        let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = data
            .iter()
            .map(|(n, s, b)| {
                (n.clone(), safetensors::tensor::TensorView::new(safetensors::Dtype::BF16, s.clone(), b).unwrap())
            })
            .collect();
        std::fs::write(dir.join(&file), safetensors::serialize(views, None).unwrap()).unwrap();
        for (n, _, _) in part {
            map.insert(n.clone(), file.clone().into());
        }
    }
    let index = serde_json::json!({ "metadata": {}, "weight_map": map });
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
}

#[test]
fn foreign_folders_import_and_unsupported_ones_are_refused_with_reasons() {
    let seed = common::seed("foreign_folders_import_and_unsupported_ones_are_refused_with_reasons");
    let d = common::tmp("foreign");
    let mut m = random_model(seed);
    // Values that BF16 holds exactly, so the sharded BF16 copy imports to the same weights.
    m.params = m.params.map(|t| t.iter().map(|&x| half::bf16::from_f32(x).to_f32()).collect());
    let base = d.join("base");
    hf::write(&base, &m, ExportDtype::F32).unwrap();
    let copy = |name: &str| {
        let to = d.join(name);
        std::fs::create_dir_all(&to).unwrap();
        for f in std::fs::read_dir(&base).unwrap() {
            let f = f.unwrap().path();
            std::fs::copy(&f, to.join(f.file_name().unwrap())).unwrap();
        }
        to
    };
    // Sharded, BF16, an lm_head equal to the embedding, rotary buffers, config keys as older
    // transformers wrote them (no head_dim, tie_word_embeddings false).
    let foreign = copy("foreign");
    let emb = m.params.embedding[..m.tokenizer.vocab_size() * m.model.dim].to_vec();
    let extra = vec![
        ("lm_head.weight".to_string(), vec![m.tokenizer.vocab_size(), m.model.dim], emb.clone()),
        ("model.layers.0.self_attn.rotary_emb.inv_freq".to_string(), vec![5], vec![1.0; 5]),
    ];
    reshard(&foreign, 3, extra);
    edit_config(&foreign, |c| {
        c.as_object_mut().unwrap().remove("head_dim");
        c["tie_word_embeddings"] = false.into();
    });
    let back = hf::read(&foreign).unwrap();
    assert!(back.notes.iter().any(|n| n.contains("taken as tied")), "{:?}", back.notes);
    let rows = emb.len();
    assert_eq!(back.model.params.embedding[..rows], emb[..]);
    assert!(back.model.params.layers == m.params.layers);

    let refused = |name: &str, change: &dyn Fn(&Path), want: &[&str]| {
        let dir = copy(name);
        change(&dir);
        let e = hf::read(&dir).unwrap_err().to_string();
        for w in want {
            assert!(e.contains(w), "{name}: `{w}` not in: {e}");
        }
    };
    refused(
        "rope",
        &|p| edit_config(p, |c| c["rope_scaling"] = serde_json::json!({"rope_type": "llama3", "factor": 8.0})),
        &["scales RoPE"],
    );
    refused(
        "bias",
        &|p| {
            edit_config(p, |c| {
                c["attention_bias"] = true.into();
                c["hidden_act"] = "gelu".into();
            })
        },
        &["attention_bias", "gelu"],
    );
    refused(
        "mistral",
        &|p| {
            edit_config(p, |c| {
                c["model_type"] = "mistral".into();
                c["architectures"] = serde_json::json!(["MistralForCausalLM"]);
            })
        },
        &["not a Llama model"],
    );
    refused("headdim", &|p| edit_config(p, |c| c["head_dim"] = 16.into()), &["head width 16"]);
    refused("notok", &|p| std::fs::remove_file(p.join("tokenizer.json")).unwrap(), &["no tokenizer.json"]);
    refused("small", &|p| edit_config(p, |c| c["vocab_size"] = 100.into()), &["smaller than the tokenizer"]);
    let untied: Vec<f32> = emb.iter().map(|x| x + 1.0).collect();
    refused(
        "untied",
        &|p| {
            reshard(p, 1, vec![("lm_head.weight".into(), vec![m.tokenizer.vocab_size(), m.model.dim], untied.clone())])
        },
        &["not tied", "ties them"],
    );
    refused(
        "extra",
        &|p| reshard(p, 2, vec![("model.layers.0.self_attn.q_proj.bias".into(), vec![60], vec![0.0; 60])]),
        &["no place for", "q_proj.bias"],
    );
    std::fs::remove_dir_all(d).unwrap();
}

fn cli(args: &[&str]) -> Result<(), cli::Failure> {
    let mut all = vec!["train", "--quiet"];
    all.extend_from_slice(args);
    cli::run(Args::parse_from(all), &Stop::new())
}

#[test]
fn the_command_line_exports_imports_and_fine_tunes() {
    let Some(_gpu) = common::gpu() else { return };
    let d = common::tmp("cli");
    let ck = d.join("m.safetensors");
    let (ckp, hfa, hfb, gg) = (
        ck.to_str().unwrap(),
        d.join("hf-a").to_str().unwrap().to_string(),
        d.join("hf-b").to_str().unwrap().to_string(),
        d.join("m.gguf").to_str().unwrap().to_string(),
    );
    let model = ["--dim", "32", "--layers", "1", "--heads", "4", "--kv-heads", "2", "--seq-len", "16", "--batch", "2"];
    let mut train = vec!["--steps", "4", "--tokenizer", "bpe:300", "--checkpoint", ckp, "--sample-tokens", "4"];
    train.extend(model);
    cli(&train).unwrap();
    cli(&["--checkpoint", ckp, "--export-hf", &hfa, "--export-gguf", &gg, "--export-dtype", "f16"]).unwrap();
    assert!(std::fs::read(&gg).unwrap().starts_with(b"GGUF"));
    // A run of 0 steps from the folder, then its export: the same folder, bit for bit.
    let ck2 = d.join("imported.safetensors");
    let ck2p = ck2.to_str().unwrap();
    cli(&["--import-hf", &hfa, "--steps", "0", "--checkpoint", ck2p, "--batch", "2", "--sample-tokens", "2"]).unwrap();
    cli(&["--checkpoint", ck2p, "--export-hf", &hfb, "--export-dtype", "f16"]).unwrap();
    files_equal(Path::new(&hfa), Path::new(&hfb));
    // Fine-tuning continues from the imported weights: its first loss is the trained model's.
    let ck3 = d.join("tuned.safetensors");
    let tuned = [
        "--import-hf",
        &hfa,
        "--steps",
        "2",
        "--log-every",
        "1",
        "--checkpoint",
        ck3.to_str().unwrap(),
        "--batch",
        "2",
        "--seq-len",
        "12",
        "--sample-tokens",
        "2",
    ];
    cli(&tuned).unwrap();
    let c = kernels_train::checkpoint::load(&ck3).unwrap();
    assert_eq!((c.step, c.model.seq_len, c.model.dim), (2, 12, 32));
    // Mistakes: a model flag that contradicts the folder, a folder that is not one, a tokenizer.
    let e =
        cli(&["--import-hf", &hfa, "--dim", "64", "--checkpoint", ck3.to_str().unwrap(), "--overwrite"]).unwrap_err();
    assert!(e.message.contains("--dim 64 (the folder's: 32)"), "{}", e.message);
    let e =
        cli(&["--import-hf", d.to_str().unwrap(), "--checkpoint", ck3.to_str().unwrap(), "--overwrite"]).unwrap_err();
    assert!(e.message.contains("config.json") && e.code == cli::exit::USAGE, "{}", e.message);
    assert!(Args::try_parse_from(["train", "--import-hf", &hfa, "--tokenizer", "bytes"]).is_err());
    let e = cli(&["--checkpoint", d.join("none.safetensors").to_str().unwrap(), "--export-gguf", &gg]).unwrap_err();
    assert!(e.message.contains("train one first"), "{}", e.message);
    std::fs::remove_dir_all(d).unwrap();
}
