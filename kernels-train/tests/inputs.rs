//! The trainer as a process (its `train` binary) given what a hostile user gives it: flags out
//! of range, files that are not regular files or too large (text, shards, tokenizers,
//! checkpoints, `--eval`, `--import-hf` and `--tokenize-to` inputs), paths that are directories, a
//! tokenizer without a token for a newline, a closed stdout, a signal while a BPE is trained.
//! Each bad input is refused with exit code 2 and a message naming it, before any work; nothing
//! panics, nothing hangs (every run has a generous limit, so a stuck one fails instead of
//! hanging the suite; nothing is timed).
#![cfg(unix)]

mod common;

use common::{PATIENCE, SMALL, TRAINER, tmp};

use kernels_train::checkpoint;
use kernels_train::cli::{curve_path, exit};
use kernels_train::files::{MAX_CHECKPOINT_BYTES, MAX_DATA_BYTES, MAX_TOKENIZER_BYTES};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What a finished run said: its exit code, stdout and stderr.
struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Waits for `child`, killing it (and failing) past [`PATIENCE`].
fn finish(mut child: Child, what: &str) -> Ran {
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > PATIENCE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {PATIENCE:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr): (String, String) =
        (String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into());
    let code = out.status.code().unwrap_or_else(|| panic!("{what}: ended by {}:\n{stderr}", out.status));
    assert!(!stderr.contains("panicked"), "{what}: a panic:\n{stderr}");
    Ran { code, stdout, stderr }
}

/// The trainer on the tiny model with `args` (stdout and stderr kept, the checkpoint in `dir`
/// unless `args` names one).
fn train(dir: &Path, args: &[&str]) -> Ran {
    let ck = dir.join("m.safetensors");
    let mut all: Vec<&str> = SMALL.to_vec();
    if !args.contains(&"--checkpoint") {
        all.extend(["--checkpoint", ck.to_str().unwrap()]);
    }
    all.extend(args);
    let child = Command::new(TRAINER)
        .args(&all)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the trainer starts");
    finish(child, &format!("train {}", all.join(" ")))
}

/// Asserts a usage error (exit 2) whose message contains every one of `says`.
#[track_caller]
fn refused(ran: &Ran, says: &[&str]) {
    assert_eq!(ran.code, exit::USAGE, "exit {} instead of 2:\n{}", ran.code, ran.stderr);
    for s in says {
        assert!(ran.stderr.contains(s), "the message lacks {s:?}:\n{}", ran.stderr);
    }
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo(3) with a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", path.display());
}

/// A sparse file of `len` bytes (no disk used), or `None` where the filesystem cannot hold one.
fn sparse(path: &Path, len: u64) -> Option<PathBuf> {
    let f = std::fs::File::create(path).unwrap();
    match f.set_len(len) {
        Ok(()) => Some(path.to_path_buf()),
        Err(e) => {
            eprintln!("no sparse file of {len} bytes here ({e}): that case is not run");
            None
        }
    }
}

/// Flag values past what they mean are refused before any work, each message naming its flag
/// (these once panicked, wrapped around, or were silently taken as something else).
#[test]
fn flags_out_of_range_are_refused_naming_the_flag() {
    let dir = tmp("flags");
    for (args, flag) in [
        (&["--checkpoint-minutes", "1e300"][..], "--checkpoint-minutes 1e300"),
        (&["--checkpoint-minutes", "-1"], "--checkpoint-minutes -1"),
        (&["--eval-batches", "2305843009213693953"], "--eval-batches 2305843009213693953"),
        (&["--temperature", "-1"], "--temperature -1"),
        (&["--min-lr", "-1"], "--min-lr -1"),
        (&["--lr", "0"], "--lr 0"),
        (&["--clip", "-1"], "--clip -1"),
        (&["--weight-decay", "NaN"], "--weight-decay NaN"),
        (&["--resume", "--generate", "fn"], "cannot be combined with --resume"),
        (&["--profile", "--generate", "fn"], "cannot be combined with --profile"),
        (&["--shard-tokens", "2147483648"], "--shard-tokens 2147483648 is more than 2147483647"),
        (&["--generate", "fn", "--val-data", "v.txt"], "--generate samples from the checkpoint and trains nothing"),
        (&["--generate", "fn", "--import-hf", "hf"], "cannot be combined with --import-hf"),
        (&["--eval", "e.txt", "--profile"], "--eval scores the checkpoint and trains nothing"),
        (&["--eval", "e.txt", "--val-data", "v.txt"], "cannot be combined with --val-data"),
        (&["--export-gguf", "m.gguf", "--overwrite"], "--export-gguf writes the checkpoint as a file"),
        (&["--export-hf", "hf", "--profile"], "cannot be combined with --profile"),
        (&["--tokenize-to", "shards", "--data", "t.txt", "--overwrite"], "--tokenize-to writes token shards"),
    ] {
        let ran = train(&dir, args);
        refused(&ran, &[flag]);
    }
    assert!(std::fs::read_dir(&dir).unwrap().next().is_none(), "a refused run wrote something");
    std::fs::remove_dir_all(dir).unwrap();
}

/// Every file the trainer reads — the text, a tokenizer, a checkpoint — must be a regular file
/// of bounded size: devices, FIFOs (even without a writer: no hang), directories and links to
/// them are refused by what they are, files over the limit by their size.
#[test]
fn files_that_are_not_regular_or_too_large_are_refused() {
    let dir = tmp("files");
    let zero_json = dir.join("zero.json");
    std::os::unix::fs::symlink("/dev/zero", &zero_json).unwrap();
    let zero_ck = dir.join("zero.safetensors");
    std::os::unix::fs::symlink("/dev/zero", &zero_ck).unwrap();
    let fifo = dir.join("fifo.txt");
    mkfifo(&fifo);
    let fifo_ck = dir.join("fifo.safetensors");
    mkfifo(&fifo_ck);
    let sub = dir.join("sub");
    std::fs::create_dir(&sub).unwrap();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let (zero_json, zero_ck, fifo, fifo_ck, sub) = (s(&zero_json), s(&zero_ck), s(&fifo), s(&fifo_ck), s(&sub));
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--data", "/dev/zero"], "the training text (--data) /dev/zero is a character device"),
        (vec!["--data", &fifo], "is a FIFO"),
        // A directory is read as token shards: one without any says so.
        (vec!["--data", &sub], "holds no .bin token shards"),
        (vec!["--tokenizer", &zero_json], "the tokenizer"),
        (vec!["--generate", "fn", "--checkpoint", &zero_ck], "the checkpoint"),
        (vec!["--generate", "fn", "--checkpoint", &fifo_ck], "is a FIFO"),
        (vec!["--resume", "--checkpoint", &zero_ck], "is not a regular file"),
    ];
    for (args, says) in &cases {
        let ran = train(Path::new(&dir), args);
        refused(&ran, &[says]);
        if !args.contains(&"--resume") && !args.contains(&sub.as_str()) {
            assert!(ran.stderr.contains("regular file"), "{args:?}:\n{}", ran.stderr);
        }
    }
    // One byte over each limit, as sparse files (no disk is used).
    let big = [
        ("big.txt", MAX_DATA_BYTES, "--data"),
        ("big.json", MAX_TOKENIZER_BYTES, "--tokenizer"),
        ("big.safetensors", MAX_CHECKPOINT_BYTES, "--checkpoint"),
    ];
    for (name, limit, flag) in big {
        let Some(path) = sparse(&Path::new(&dir).join(name), limit + 1) else { continue };
        let p = path.to_str().unwrap();
        let args: Vec<&str> = if flag == "--checkpoint" { vec!["--generate", "fn", flag, p] } else { vec![flag, p] };
        let ran = train(Path::new(&dir), &args);
        refused(&ran, &[&format!("is {} bytes; the most this trainer reads there is {limit} bytes", limit + 1)]);
        std::fs::remove_file(path).unwrap();
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// The files of the interop modes and of token-shard data go through the same rule: shards,
/// `--val-data`, an `--eval` file, an `--import-hf` folder's files and `--tokenize-to`'s text
/// are read only when they are regular files (a FIFO without a writer is refused, not waited
/// on; a device is never read), each refused with exit 2 before the GPU is opened.
#[test]
fn shards_validation_eval_import_and_tokenize_inputs_must_be_regular_files() {
    let dir = tmp("interop-files");
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let fifo = dir.join("fifo.txt");
    mkfifo(&fifo);
    // A directory whose only `.bin` is a FIFO holds no shards; one named alone is refused.
    let shards = dir.join("shards");
    std::fs::create_dir(&shards).unwrap();
    mkfifo(&shards.join("a.bin"));
    std::os::unix::fs::symlink("/dev/zero", shards.join("z.bin")).unwrap();
    // An HF folder whose config.json is a FIFO, one whose tokenizer.json is /dev/zero.
    let (hf_fifo, hf_zero) = (dir.join("hf-fifo"), dir.join("hf-zero"));
    for d in [&hf_fifo, &hf_zero] {
        std::fs::create_dir(d).unwrap();
    }
    mkfifo(&hf_fifo.join("config.json"));
    std::fs::write(hf_zero.join("config.json"), "{}").unwrap();
    std::os::unix::fs::symlink("/dev/zero", hf_zero.join("tokenizer.json")).unwrap();
    // A checkpoint for --eval, written without a GPU.
    let model = kernels_train::config::ModelConfig::new(16, 1, 2, 1, 8).with_vocab(256);
    let params = kernels_train::params::init(&model, 1).unwrap();
    let ck = dir.join("ck.safetensors");
    let c = checkpoint::Checkpoint {
        model,
        step: 1,
        seed: 1,
        m: params.as_ref().map(|p| vec![0.0; p.len()]),
        v: params.as_ref().map(|p| vec![0.0; p.len()]),
        params,
        moments8: None,
        scaler: None,
        train_history: vec![],
        val_history: vec![],
        tokenizer: kernels_train::tokenizer::Tokenizer::bytes(),
    };
    checkpoint::save(&ck, &c).unwrap();
    let out = dir.join("out");
    let (fifo, shards, hf_fifo, hf_zero, ck, out) = (s(&fifo), s(&shards), s(&hf_fifo), s(&hf_zero), s(&ck), s(&out));
    let (fifo_bin, zero_bin) = (format!("{shards}/a.bin"), format!("{shards}/z.bin"));
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--data", &shards], "holds no .bin token shards"),
        (vec!["--data", &fifo_bin], "is a FIFO: the trainer reads only regular files"),
        (vec!["--data", &zero_bin], "is a character device: the trainer reads only regular files"),
        (vec!["--val-data", &fifo], "is a FIFO: the trainer reads only regular files"),
        (vec!["--val-data", "/dev/zero"], "is a character device: the trainer reads only regular files"),
        (vec!["--checkpoint", &ck, "--eval", &fifo], "is a FIFO: the trainer reads only regular files"),
        (vec!["--checkpoint", &ck, "--eval", "/dev/zero"], "is a character device"),
        (vec!["--import-hf", &hf_fifo], "config.json is a FIFO: the trainer reads only regular files"),
        (vec!["--import-hf", &hf_zero], "tokenizer.json is a character device"),
        (vec!["--import-hf", &fifo], "is not a folder: --import-hf takes a Hugging Face model folder"),
        (vec!["--tokenize-to", &out, "--data", &fifo], "the text"),
        (vec!["--tokenize-to", &out, "--data", "/dev/zero"], "is a character device"),
    ];
    for (args, says) in &cases {
        let ran = train(&dir, args);
        refused(&ran, &[says]);
        assert!(!ran.stderr.contains("adapter:"), "{args:?}: the GPU was opened first:\n{}", ran.stderr);
    }
    assert!(!Path::new(&out).exists(), "--tokenize-to wrote before it checked its inputs");
    std::fs::remove_dir_all(dir).unwrap();
}

/// `--checkpoint` naming a directory gets advice that works (name a file in it), whether the
/// run is new, `--overwrite` or `--resume`, not advice about an existing checkpoint.
#[test]
fn a_checkpoint_path_that_is_a_directory_gets_advice_that_works() {
    let dir = tmp("directory");
    let d = dir.to_str().unwrap();
    let inside = dir.join("model.safetensors");
    for extra in [&[][..], &["--overwrite"], &["--resume"]] {
        let args = [&["--checkpoint", d][..], extra].concat();
        let ran = train(&dir, &args);
        refused(&ran, &[&format!("--checkpoint {d} is a directory: name a file in it, such as {}", inside.display())]);
        assert!(!ran.stderr.contains("pass --resume") && !ran.stderr.contains("--overwrite to"), "{}", ran.stderr);
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// A directory where the run's tokenizer copy goes (`NAME.tokenizer.json`) is a usage mistake,
/// found before the BPE is trained, as a directory where the loss curve goes is.
#[test]
fn a_directory_where_the_tokenizer_goes_is_refused_first() {
    let dir = tmp("tokenizer-dir");
    std::fs::create_dir(dir.join("m.tokenizer.json")).unwrap();
    let ran = train(&dir, &["--tokenizer", "bpe:300", "--steps", "2"]);
    refused(&ran, &["m.tokenizer.json is a directory: it is where this run writes its tokenizer"]);
    assert!(!ran.stderr.contains("training a byte-level BPE"), "the BPE was trained first:\n{}", ran.stderr);
    std::fs::create_dir(dir.join("m.loss.svg")).unwrap();
    refused(&train(&dir, &["--steps", "2"]), &["m.loss.svg is a directory"]);
    std::fs::remove_dir(dir.join("m.loss.svg")).unwrap();
    std::fs::create_dir(dir.join("m.metrics.jsonl")).unwrap();
    refused(&train(&dir, &["--steps", "2"]), &["m.metrics.jsonl is a directory"]);
    std::fs::remove_dir_all(dir).unwrap();
}

/// Training a BPE prints nothing on stdout (the tokenizers library's progress bars print empty
/// lines there, and panic on a closed pipe); a stdout whose reader has gone, as with
/// `train … | head -n 1`, ends the output quietly: the run saves and exits 0.
#[test]
fn a_bpe_run_writes_only_its_sample_to_stdout_and_a_closed_stdout_is_no_panic() {
    let Some(_gpu) = common::gpu() else { return };
    let dir = tmp("stdout");
    let ran = train(&dir, &["--tokenizer", "bpe:300", "--steps", "2", "--sample-tokens", "8"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(ran.stdout.starts_with("--- sample ---\n"), "stdout holds more than the sample: {:?}", ran.stdout);
    assert!(ran.stdout.ends_with("\n--------------\n"), "{:?}", ran.stdout);

    let ck = dir.join("m.safetensors");
    let mut child = Command::new(TRAINER)
        .args(SMALL)
        .args(["--checkpoint", ck.to_str().unwrap(), "--overwrite", "--tokenizer", "bpe:300", "--steps", "3"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away before the run writes anything.
    drop(child.stdout.take());
    let ran = finish(child, "a run with a closed stdout");
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert_eq!(checkpoint::load(&ck).unwrap().step, 3);
    std::fs::remove_dir_all(dir).unwrap();
}

/// A `tokenizer.json` that makes no token of "\n" (a WordLevel over whitespace-separated words):
/// the run finishes with exit 0 and a sample that starts from the held-out text's first token;
/// `--generate` with a prompt of only whitespace is refused (exit 2) saying why, before the GPU
/// is opened.
#[test]
fn a_tokenizer_without_a_newline_token_finishes_its_run() {
    let Some(_gpu) = common::gpu() else { return };
    let dir = tmp("wordlevel");
    let text = String::from_utf8(kernels_train::data::built_in_text()).unwrap();
    let mut vocab = serde_json::Map::new();
    vocab.insert("[UNK]".into(), 0.into());
    for word in text.split_whitespace() {
        if vocab.len() < 300 && !vocab.contains_key(word) {
            let id = vocab.len();
            vocab.insert(word.into(), id.into());
        }
    }
    let json = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": null,
        "pre_tokenizer": { "type": "Whitespace" }, "post_processor": null, "decoder": null,
        "model": { "type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]" }
    });
    let tk = dir.join("words.json");
    std::fs::write(&tk, json.to_string()).unwrap();
    let ck = dir.join("m.safetensors");
    let ran = train(&dir, &["--tokenizer", tk.to_str().unwrap(), "--steps", "2", "--sample-tokens", "6"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let sample = ran.stdout.strip_prefix("--- sample ---\n").and_then(|s| s.strip_suffix("\n--------------\n"));
    assert!(sample.is_some_and(|s| s.split_whitespace().count() >= 6), "{:?}", ran.stdout);
    assert_eq!(checkpoint::load(&ck).unwrap().step, 2);

    let ran = train(&dir, &["--generate", " \n", "--sample-tokens", "4"]);
    refused(&ran, &["gives no tokens with the tokenizer WordLevel"]);
    assert!(!ran.stderr.contains("adapter:"), "the prompt was checked after the GPU was opened:\n{}", ran.stderr);
    std::fs::remove_dir_all(dir).unwrap();
}

/// SIGTERM while the BPE is trained ends the run at once, with 128 + 15, and writes nothing:
/// no checkpoint of an untrained model, no tokenizer (it never finished).
#[test]
fn sigterm_while_a_bpe_is_trained_stops_at_once_and_writes_nothing() {
    let dir = tmp("bpe-sigterm");
    // Enough text and merges that the BPE takes many seconds on two cores.
    let data = dir.join("data.txt");
    std::fs::write(&data, kernels_train::data::built_in_text().repeat(40)).unwrap();
    let ck = dir.join("m.safetensors");
    let mut child = Command::new(TRAINER)
        .args(SMALL)
        .args(["--checkpoint", ck.to_str().unwrap(), "--data", data.to_str().unwrap(), "--tokenizer", "bpe:20000"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    loop {
        let mut line = String::new();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "the run ended:\n{said}");
        said.push_str(&line);
        if line.contains("training a byte-level BPE") {
            break;
        }
    }
    // SAFETY: kill(2) with a child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(started.elapsed() < PATIENCE, "still running after SIGTERM:\n{said}");
        std::thread::sleep(Duration::from_millis(20));
    }
    stderr.read_to_string(&mut said).unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(128 + libc::SIGTERM), "{said}");
    assert!(!said.contains("BPE trained"), "the BPE finished before the signal was acted on:\n{said}");
    assert!(said.contains("stopped by SIGTERM while a BPE was trained: nothing was trained"), "{said}");
    assert!(said.contains("SIGTERM: stopping (nothing trained yet, nothing to save)"), "{said}");
    assert!(!ck.exists() && !curve_path(&ck).exists() && !checkpoint::tokenizer_path(&ck).exists(), "{said}");
    std::fs::remove_dir_all(dir).unwrap();
}
