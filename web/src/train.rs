//! The training page's logic (`train.html`): the trainer of `kernels-train` — the tiny preset —
//! on text built into the page or pasted into it, on whatever adapter there is.
//!
//! [`Session`] uses only what works on the web (no blocking: every read-back is `async`), so the
//! same code runs in a browser, compiled for `wasm32-unknown-unknown` (the `TrainPage` class
//! exported through wasm-bindgen), and natively on the native adapter in this crate's unit test.
//! The kernels pick their variants from the device (subgroups or the tree reductions, f16 or
//! not, tensor cores or the portable products); [`describe_adapter`] says which run.

use kernels::Gpu;
use kernels_train::Error;
use kernels_train::config::{ModelConfig, TrainConfig};
use kernels_train::data::Corpus;
use kernels_train::tokenizer::{Tokenizer, TokenizerChoice};
use kernels_train::trainer::Trainer;

/// What the page asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// `bytes` or `bpe:N` (a byte-level BPE of N tokens trained on the text, in the page).
    pub tokenizer: String,
    /// Sequences per step (the tiny preset has 8).
    pub batch: usize,
    /// Steps of the learning-rate schedule (the tiny preset has 150).
    pub steps: usize,
    /// Seed of the weights and the batches.
    pub seed: u64,
}

impl Default for Options {
    fn default() -> Options {
        let t = TrainConfig::tiny();
        Options { tokenizer: "bytes".into(), batch: t.batch, steps: t.steps, seed: t.seed }
    }
}

/// The loss of one batch, for comparing a checkpoint elsewhere: the page computes it with the
/// current weights, and the native trainer must get the same from the downloaded checkpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct Reference {
    /// The mean loss.
    pub loss: f32,
    /// The batch's inputs (`batch · seq_len` token ids).
    pub inputs: Vec<u32>,
    /// Its targets.
    pub targets: Vec<u32>,
    /// Sequences in the batch.
    pub batch: usize,
}

/// A training run in the page.
pub struct Session {
    trainer: Trainer,
}

impl Session {
    /// Tokenizes `text` (training the BPE first if asked) and sets up the tiny model on `gpu`.
    pub fn start(gpu: &Gpu, text: &str, options: &Options) -> Result<Session, Error> {
        let tokenizer = match options.tokenizer.parse::<TokenizerChoice>().map_err(Error::Config)? {
            TokenizerChoice::Bytes => Tokenizer::bytes(),
            TokenizerChoice::Bpe(n) => Tokenizer::train_bpe(text, n)?,
            TokenizerChoice::File(_) => {
                return Err(Error::Config("the page trains on bytes or on a BPE it trains (bpe:N)".into()));
            }
        };
        let corpus = Corpus::new(text.as_bytes(), "the page's text", tokenizer)?;
        let model = ModelConfig::tiny().with_vocab(corpus.tokenizer().model_vocab());
        let train =
            TrainConfig { batch: options.batch, steps: options.steps, seed: options.seed, ..TrainConfig::tiny() };
        Ok(Session { trainer: Trainer::new(gpu, &model, &train, corpus)? })
    }

    /// Runs `n` (at least one) steps, reading the loss of the last one back: the page's
    /// thread is free while the GPU works.
    pub async fn run(&mut self, n: usize) -> Result<f32, Error> {
        for _ in 1..n {
            self.trainer.step_async(false).await?;
        }
        let loss = self.trainer.step_async(true).await?;
        loss.ok_or_else(|| Error::Config("no loss was read".into()))
    }

    /// Steps done.
    pub fn step(&self) -> u64 {
        self.trainer.step
    }

    /// Tokens one step trains on.
    pub fn tokens_per_step(&self) -> usize {
        self.trainer.train.batch * self.trainer.model.cfg.seq_len
    }

    /// One line about the model, the tokenizer and the text.
    pub fn describe(&self) -> String {
        let c = &self.trainer.model.cfg;
        format!(
            "{} layers, width {}, {} heads ({} kv), context {}, vocabulary {} ({:.2}M parameters); tokenizer: {}; text: {} tokens; batch {}; {:?} attention",
            c.layers,
            c.dim,
            c.heads,
            c.kv_heads,
            c.seq_len,
            c.vocab,
            c.parameters() as f64 / 1e6,
            self.trainer.corpus.tokenizer().describe(),
            self.trainer.corpus.len(),
            self.trainer.train.batch,
            self.trainer.model.attention,
        )
    }

    /// A sample of `n` tokens from the current weights, continuing `prompt`.
    pub async fn sample(&mut self, prompt: &str, n: usize, seed: u64) -> Result<String, Error> {
        self.trainer.generate_async(prompt, n, 0.8, 40, seed).await
    }

    /// The checkpoint file of the current state: the bytes the native trainer writes (same
    /// format, same checksum), which `--resume` continues.
    pub async fn checkpoint(&self) -> Result<Vec<u8>, Error> {
        kernels_train::checkpoint::to_bytes(&self.trainer.checkpoint_async().await?)
    }

    /// The loss of the current weights on the first validation batch.
    pub async fn reference(&mut self) -> Result<Reference, Error> {
        let batch = self.trainer.train.batch;
        let (inputs, targets) = self.trainer.corpus.validation_batch(0, 1, batch, self.trainer.model.cfg.seq_len)?;
        let loss = self.trainer.model.eval_loss_async(&inputs, &targets, batch).await?;
        Ok(Reference { loss, inputs, targets, batch })
    }
}

/// Which forms of the kernels run on `gpu`: the adapter, subgroups (or the tree reductions),
/// f16, tensor cores (or the portable products), counted over the library's kernels.
pub fn describe_adapter(gpu: &Gpu) -> String {
    let r = gpu.report();
    let (mut subgroups, mut portable, mut coop, mut f16, mut missing) = (0, 0, 0, 0, 0);
    for k in kernels::all_kernels() {
        match gpu.variant_for(k) {
            Ok(v) => {
                if v.subgroups {
                    subgroups += 1;
                } else {
                    portable += 1;
                }
                if v.f16 {
                    f16 += 1;
                }
                if !v.coop.is_empty() {
                    coop += 1;
                }
            }
            Err(_) => missing += 1,
        }
    }
    let size = if r.subgroups {
        format!("subgroups on (size {}–{})", r.subgroup_min_size, r.subgroup_max_size)
    } else {
        "no subgroups: tree reductions".into()
    };
    // Browsers may keep the adapter's name to themselves.
    let name = if r.name.trim().is_empty() { "an unnamed adapter" } else { r.name.as_str() };
    format!(
        "{name} ({}); {size}; shader-f16 {}; tensor cores {}. Kernels: {subgroups} run with subgroups, {portable} without, {f16} in f16, {coop} on tensor cores, {missing} unavailable here (the trainer uses f32 kernels only)",
        r.backend,
        if r.f16 { "on" } else { "off" },
        if r.cooperative_matrix { "on" } else { "off: portable matrix products" },
    )
}

/// The page's module (wasm32 only): `TrainPage`, driven by `train.html`.
#[cfg(target_arch = "wasm32")]
mod page {
    use super::{Options, Session, describe_adapter};
    use kernels::{Gpu, GpuOptions};
    use std::cell::RefCell;
    use std::rc::Rc;
    use wasm_bindgen::prelude::*;

    /// A training run, for JavaScript. Every method that touches the GPU returns a `Promise`;
    /// one runs at a time (a second call while one is pending is rejected).
    #[wasm_bindgen]
    pub struct TrainPage {
        session: Rc<RefCell<Option<Session>>>,
        adapter: String,
        describe: String,
        tokens_per_step: usize,
    }

    fn js(e: impl std::fmt::Display) -> JsValue {
        JsError::new(&e.to_string()).into()
    }

    /// The built-in text: this project's own files (as the native trainer's default).
    #[wasm_bindgen(js_name = builtInText)]
    pub fn built_in_text() -> String {
        String::from_utf8_lossy(&kernels_train::data::built_in_text()).into_owned()
    }

    /// Opens the browser's adapter and sets up the tiny model on `text`. `tokenizer` is `bytes`
    /// or `bpe:N`.
    #[wasm_bindgen(js_name = startTraining)]
    pub async fn start_training(
        text: String,
        tokenizer: String,
        batch: u32,
        steps: u32,
        seed: u32,
    ) -> Result<TrainPage, JsValue> {
        std::panic::set_hook(Box::new(|info| web_sys::console::error_1(&JsValue::from_str(&info.to_string()))));
        let gpu = Gpu::with_options(GpuOptions::default()).await.map_err(js)?;
        // Build every pipeline first: on the web a pipeline is only checked when awaited.
        for k in kernels::all_kernels() {
            match gpu.build_async(k).await {
                Ok(()) | Err(kernels::Error::MissingFeature { .. }) => {}
                Err(e) => return Err(js(e)),
            }
        }
        let options = Options { tokenizer, batch: batch as usize, steps: steps as usize, seed: seed as u64 };
        let session = Session::start(&gpu, &text, &options).map_err(js)?;
        Ok(TrainPage {
            adapter: describe_adapter(&gpu),
            describe: session.describe(),
            tokens_per_step: session.tokens_per_step(),
            session: Rc::new(RefCell::new(Some(session))),
        })
    }

    impl TrainPage {
        /// Runs `f` on the session, taken out for the duration (so no borrow is held across an
        /// await); resolves to its value.
        fn with<F, Fut>(&self, f: F) -> js_sys::Promise
        where
            F: FnOnce(Session) -> Fut + 'static,
            Fut: std::future::Future<Output = (Session, Result<JsValue, JsValue>)> + 'static,
        {
            let cell = self.session.clone();
            wasm_bindgen_futures::future_to_promise(async move {
                let Some(session) = cell.borrow_mut().take() else {
                    return Err(js("the trainer is busy with another call"));
                };
                let (session, result) = f(session).await;
                *cell.borrow_mut() = Some(session);
                result
            })
        }
    }

    #[wasm_bindgen]
    impl TrainPage {
        /// The adapter and the kernel variants in use.
        pub fn adapter(&self) -> String {
            self.adapter.clone()
        }

        /// The model, the tokenizer and the text.
        pub fn describe(&self) -> String {
            self.describe.clone()
        }

        /// Tokens one step trains on.
        #[wasm_bindgen(js_name = tokensPerStep)]
        pub fn tokens_per_step(&self) -> u32 {
            self.tokens_per_step as u32
        }

        /// Runs `n` steps; resolves to `[steps done, loss of the last]`.
        pub fn run(&self, n: u32) -> js_sys::Promise {
            self.with(move |mut s| async move {
                let r = s.run(n.max(1) as usize).await.map_err(js);
                let step = s.step() as f64;
                (s, r.map(|loss| js_sys::Array::of2(&step.into(), &(loss as f64).into()).into()))
            })
        }

        /// A sample of `n` tokens from the current weights; resolves to its text.
        pub fn sample(&self, prompt: String, n: u32, seed: u32) -> js_sys::Promise {
            self.with(move |mut s| async move {
                let r = s.sample(&prompt, n as usize, seed as u64).await.map_err(js);
                (s, r.map(|t| JsValue::from_str(&t)))
            })
        }

        /// The checkpoint file; resolves to a `Uint8Array`.
        pub fn checkpoint(&self) -> js_sys::Promise {
            self.with(move |s| async move {
                let r = s.checkpoint().await.map_err(js);
                (s, r.map(|b| js_sys::Uint8Array::from(&b[..]).into()))
            })
        }

        /// The loss of the current weights on the first validation batch; resolves to JSON
        /// `{"loss": …, "batch": …, "inputs": […], "targets": […]}`.
        pub fn reference(&self) -> js_sys::Promise {
            self.with(move |mut s| async move {
                let r = s.reference().await.map_err(js).map(|r| {
                    let json = format!(
                        "{{\"loss\":{:?},\"batch\":{},\"inputs\":{:?},\"targets\":{:?}}}",
                        r.loss, r.batch, r.inputs, r.targets
                    );
                    JsValue::from_str(&json)
                });
                (s, r)
            })
        }
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;

    /// The page's run on the native adapter (lavapipe in CI): 35 steps of the tiny model on a
    /// BPE of the built-in text lower the loss; a sample decodes; the downloaded checkpoint
    /// reads back in the native trainer, gives the page's loss on the page's batch, and resumes.
    #[test]
    fn the_page_trains_natively_and_its_checkpoint_resumes() {
        let gpu = match Gpu::with_options_blocking(kernels::GpuOptions::from_env()) {
            Ok(gpu) => gpu,
            Err(e) if std::env::var("CI").as_deref() != Ok("true") => {
                eprintln!("skipped: {e}");
                return;
            }
            Err(e) => panic!("no adapter under CI=true: {e}"),
        };
        eprintln!("{}", describe_adapter(&gpu));
        let text = String::from_utf8(kernels_train::data::built_in_text()).unwrap();
        let options = Options { tokenizer: "bpe:320".into(), batch: 2, steps: 40, seed: 3 };
        let mut s = Session::start(&gpu, &text, &options).unwrap();
        eprintln!("{}", s.describe());
        let first = pollster::block_on(s.run(1)).unwrap();
        let mut last = first;
        for _ in 0..7 {
            last = pollster::block_on(s.run(5)).unwrap();
        }
        eprintln!("loss {first} → {last} after {} steps", s.step());
        assert_eq!(s.step(), 36);
        assert!(last < 0.85 * first, "the loss did not fall: {first} → {last}");
        let sample = pollster::block_on(s.sample("fn ", 8, 1)).unwrap();
        assert!(!sample.is_empty());

        let reference = pollster::block_on(s.reference()).unwrap();
        let bytes = pollster::block_on(s.checkpoint()).unwrap();
        let ck = kernels_train::checkpoint::from_bytes(&bytes, "the page's checkpoint").unwrap();
        assert_eq!(ck.step, 36);
        assert_eq!(ck.model.vocab, 320);
        let mut model =
            kernels_train::model::Model::new(&gpu, &ck.model, reference.batch, &ck.params, Some((&ck.m, &ck.v)))
                .unwrap();
        let native = model.eval_loss(&reference.inputs, &reference.targets, reference.batch).unwrap();
        assert!((native - reference.loss).abs() <= 1e-5, "{native} vs {}", reference.loss);
        // It resumes (as `--resume` does) on the same text, with its tokenizer.
        let corpus = Corpus::new(text.as_bytes(), "text", ck.tokenizer.clone()).unwrap();
        let t = TrainConfig { batch: 2, steps: 40, ..TrainConfig::tiny() };
        let mut resumed = Trainer::resume(&gpu, ck, &t, corpus).unwrap();
        assert!(resumed.step(true).unwrap().unwrap().is_finite());
        assert_eq!(resumed.step, 37);
    }

    #[test]
    fn bad_options_are_errors() {
        let Ok(gpu) = Gpu::with_options_blocking(kernels::GpuOptions::from_env()) else { return };
        let text = "some text ".repeat(100);
        for (tokenizer, want) in [("words", "expected"), ("x.json", "bpe:N"), ("bpe:2", "257")] {
            let options = Options { tokenizer: tokenizer.into(), ..Options::default() };
            let e = Session::start(&gpu, &text, &options).err().expect(tokenizer).to_string();
            assert!(e.contains(want), "{tokenizer}: {e}");
        }
    }
}
