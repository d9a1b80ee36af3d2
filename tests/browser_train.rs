//! The trainer in a real browser: `web/train.html` in headless Chromium (WebGPU on SwiftShader:
//! subgroups of 4, no `shader-f16`) trains the tiny model for 20 steps on a 512-token BPE of the
//! built-in text, trained in the page; the loss must fall and a sample appear; the checkpoint
//! the page posts back must load in the native trainer (on the native adapter) and give the
//! page's loss on the page's batch within 1e-5, and resume.
//!
//! The tools and their absence are handled as in `tests/browser.rs` (`browser_support`).

mod browser_support;

use browser_support::{build_site, load_page, tools_or_skip};
use std::time::{Duration, Instant};

/// The most the browser run may take (the server stops by itself after it).
const BROWSER_LIMIT: Duration = Duration::from_secs(300);

/// Steps the page trains.
const STEPS: usize = 20;

#[test]
fn the_page_trains_and_its_checkpoint_gives_the_same_loss_natively() {
    let Some(tools) = tools_or_skip() else { return };
    let started = Instant::now();
    let (work, site, profile) = build_site(&tools, "browser-train");

    let page = format!("train.html?test&steps={STEPS}&batch=2&tokenizer=bpe:512");
    let mut run = load_page(&tools, &site, &profile, &page, BROWSER_LIMIT);
    let _ = std::fs::remove_dir_all(&work);
    let (dom, browser_seconds) = (run.dom, run.seconds);
    let (done, checkpoint) = (run.posted.remove("/done"), run.posted.remove("/checkpoint"));

    let Some(done) = done else {
        panic!("the page posted no results in {browser_seconds:.0} s; DOM:\n{}", &dom[..dom.len().min(4000)]);
    };
    let report: serde_json::Value = serde_json::from_slice(&done).expect("the page posts JSON");
    eprintln!("chromium: {browser_seconds:.1} s");
    eprintln!("adapter: {}\nmodel: {}", report["adapter"], report["model"]);
    assert_eq!(report["state"], "done", "the page did not finish: {report}");
    assert_eq!(report["steps"], STEPS, "{report}");

    // The loss falls.
    let losses: Vec<f64> =
        report["losses"].as_array().expect("losses").iter().map(|p| p[1].as_f64().expect("a loss")).collect();
    assert_eq!(losses.len(), STEPS, "one loss per step: {report}");
    eprintln!("losses: {losses:.3?}");
    let first = losses[0];
    let last = losses[STEPS - 3..].iter().sum::<f64>() / 3.0;
    eprintln!("loss {first:.4} → {last:.4} (mean of the last 3)");
    assert!((5.0..7.5).contains(&first), "an untrained model is near ln 512 = 6.24: {first}");
    // An untrained model's loss moves by hundredths from batch to batch; 20 steps at the tiny
    // preset's warm-up take off about half a nat (the most it can learn this early is roughly
    // the tokens' frequencies).
    assert!(last < first - 0.3, "the loss did not fall: {first} → {last}");

    // What the page says about the adapter: SwiftShader's subgroups, no f16, no tensor cores.
    let adapter = report["adapter"].as_str().expect("adapter");
    assert!(adapter.contains("subgroups on") && adapter.contains("shader-f16 off"), "{adapter}");
    assert!(adapter.contains("tensor cores off"), "{adapter}");

    // A sample appeared, and the page shows it.
    let sample = report["sample"].as_str().expect("sample");
    assert!(!sample.trim().is_empty(), "no sample: {report}");
    assert!(dom.contains("id=\"sample\""), "no sample element in the DOM");

    // The checkpoint loads natively and gives the page's loss on the page's batch.
    let checkpoint = checkpoint.expect("the page posted its checkpoint");
    let ck = kernels_train::checkpoint::from_bytes(&checkpoint, "the page's checkpoint").expect("a valid checkpoint");
    assert_eq!(ck.step, STEPS as u64);
    assert_eq!(ck.model.vocab, 512);
    assert_eq!(ck.train_history.len(), STEPS);
    let reference = &report["reference"];
    let ids = |k: &str| -> Vec<u32> {
        reference[k].as_array().expect("ids").iter().map(|v| v.as_u64().expect("an id") as u32).collect()
    };
    let (inputs, targets) = (ids("inputs"), ids("targets"));
    let batch = reference["batch"].as_u64().expect("batch") as usize;
    let page_loss = reference["loss"].as_f64().expect("loss") as f32;

    // The same text tokenized natively by the checkpoint's tokenizer gives the page's batch.
    let text = kernels_train::data::built_in_text();
    let corpus = kernels_train::data::Corpus::new(&text, "built-in", ck.tokenizer.clone()).expect("tokenize");
    let (x, y) = corpus.validation_batch(0, 1, batch, ck.model.seq_len).expect("a validation batch");
    assert_eq!((&x, &y), (&inputs, &targets), "the native tokenization differs from the page's");

    let Ok(gpu) = kernels::Gpu::new() else {
        assert!(!browser_support::ci(), "CI=true but no native adapter");
        eprintln!("skipped the native half: no adapter");
        return;
    };
    let mut model = kernels_train::model::Model::new(&gpu, &ck.model, batch, &ck.params, Some((&ck.m, &ck.v)))
        .expect("the model from the checkpoint");
    let native = model.eval_loss(&inputs, &targets, batch).expect("the native loss");
    eprintln!("loss on the page's batch: {page_loss} in the page, {native} natively");
    assert!((native - page_loss).abs() <= 1e-5, "native {native} vs page {page_loss}");

    // And it resumes, as `--resume` would.
    let t = kernels_train::config::TrainConfig { batch, steps: 40, ..kernels_train::config::TrainConfig::tiny() };
    let mut resumed = kernels_train::trainer::Trainer::resume(&gpu, ck, &t, corpus).expect("resume");
    let next = resumed.step(true).expect("a step").expect("its loss");
    assert!(next.is_finite() && resumed.step == STEPS as u64 + 1);
    eprintln!("browser training test: {:.1} s in all", started.elapsed().as_secs_f64());
}
