//! Tokenizing into shards and reading batches from them, timed on the CPU (no GPU involved):
//! `cargo run --release -p kernels-train --example shard_speed -- [MiB of text, default 64]`.
//!
//! The text is the built-in project text repeated to the size asked, in one file under the
//! temporary directory; the tokenizers are bytes and a 512-token BPE trained on the built-in text.
//! Reading draws training batches of 8 windows of 1024 tokens at random positions (what a
//! gpt2-small step reads), then reads every token once in order.

use kernels_train::data::{Corpus, Tokens};
use kernels_train::shards::{self, Shards};
use kernels_train::tokenizer::Tokenizer;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mib: usize = std::env::args().nth(1).map_or(Ok(64), |a| a.parse())?;
    let dir = std::env::temp_dir().join(format!("kernels-shard-speed-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let base = kernels_train::data::built_in_text();
    let mut text = Vec::with_capacity(mib << 20);
    while text.len() < mib << 20 {
        text.extend_from_slice(&base);
    }
    let input = dir.join("text.txt");
    std::fs::write(&input, &text)?;
    println!(
        "{} MiB of text, {} threads",
        text.len() >> 20,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    let bpe = Tokenizer::train_bpe(std::str::from_utf8(&base)?, 512)?;
    for (tk, name) in [(Tokenizer::bytes(), "bytes"), (bpe, "bpe:512")] {
        let out = dir.join(name.replace(':', "-"));
        let t = Instant::now();
        let w = shards::write_shards(std::slice::from_ref(&input), &tk, &out, 20_000_000, |_, _| {})?;
        let s = t.elapsed().as_secs_f64();
        println!(
            "{name}: tokenized {} MB into {} tokens, {} shards, in {s:.2} s: {:.2e} tokens/s ({:.1} MB/s)",
            w.bytes / 1_000_000,
            w.tokens,
            w.files.len(),
            w.tokens as f64 / s,
            w.bytes as f64 / s / 1e6
        );
        let all = Shards::open(&w.files)?;
        let corpus = Corpus::held_out(Tokens::shards(all, &tk)?, tk.clone(), name);
        let (steps, batch, seq) = (2000u64, 8, 1024);
        let t = Instant::now();
        let mut check = 0u64;
        for step in 0..steps {
            let (x, _) = corpus.train_batch(1, step, batch, seq)?;
            check = check.wrapping_add(x[0] as u64);
        }
        let s = t.elapsed().as_secs_f64();
        let n = steps as f64 * (batch * (seq + 1)) as f64;
        println!(
            "{name}: random batches of {batch} × {seq}: {:.2e} tokens/s ({:.0} batches/s; {check})",
            n / s,
            steps as f64 / s
        );
        let all = Shards::open(&w.files)?;
        let t = Instant::now();
        let mut out = Vec::with_capacity(1 << 20);
        let mut pos = 0;
        while pos < all.len() {
            let n = (1 << 20).min(all.len() - pos);
            out.clear();
            all.read(pos, n, tk.vocab_size(), &mut out)?;
            pos += n;
        }
        let s = t.elapsed().as_secs_f64();
        println!("{name}: every token in order: {:.2e} tokens/s", all.len() as f64 / s);
    }
    std::fs::remove_dir_all(dir)?;
    Ok(())
}
