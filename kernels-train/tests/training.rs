//! The training loop: same seed, same trajectory; the loss falls; a run saved and resumed
//! equals an uninterrupted one bit for bit; and the mistakes a user can make end in clear
//! messages and exit codes, never a panic, never a broken checkpoint.

mod common;

use common::{SMALL, tmp};

use clap::Parser;
use kernels_train::Error;
use kernels_train::checkpoint;
use kernels_train::cli::{self, Args, Stop, exit};
use kernels_train::config::{ModelConfig, TrainConfig};
use kernels_train::data::Corpus;
use kernels_train::trainer::Trainer;

fn tiny() -> (ModelConfig, TrainConfig) {
    let m = ModelConfig::new(32, 2, 4, 2, 16);
    let t = TrainConfig { batch: 4, steps: 50, lr: 1e-2, min_lr: 1e-3, warmup: 5, seed: 99, ..TrainConfig::default() };
    (m, t)
}

#[test]
fn same_seed_same_trajectory_and_the_loss_falls() {
    let Some(gpu) = common::gpu() else { return };
    let (m, t) = tiny();
    let run = |steps: usize| {
        let mut tr = Trainer::new(&gpu, &m, &t, Corpus::built_in()).unwrap();
        let losses: Vec<f32> = (0..steps).map(|_| tr.step(true).unwrap().unwrap()).collect();
        (losses, tr.model.weights().unwrap())
    };
    let (a, wa) = run(50);
    let (b, wb) = run(50);
    assert_eq!(a.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), b.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
    assert!(wa.iter().flatten().zip(wb.iter().flatten()).all(|(x, y)| x.to_bits() == y.to_bits()));
    let first = a[0];
    let last: f32 = a[45..].iter().sum::<f32>() / 5.0;
    eprintln!("loss: first {first}, mean of the last 5 {last}");
    // Near ln 256 = 5.55 (a little lower: with a tied embedding the untrained model leans
    // towards repeating its input byte, and text repeats bytes).
    assert!((4.5..6.0).contains(&first), "an untrained model is near uniform: {first}");
    assert!(last < 0.75 * first, "the loss did not fall: {first} → {last}");
}

#[test]
fn resume_is_bitwise_identical_to_an_uninterrupted_run() {
    let Some(gpu) = common::gpu() else { return };
    let (m, t) = tiny();
    let n = 4;
    let mut whole = Trainer::new(&gpu, &m, &t, Corpus::built_in()).unwrap();
    for _ in 0..2 * n {
        whole.step(true).unwrap();
    }
    let dir = tmp("resume");
    let path = dir.join("half.safetensors");
    let mut first = Trainer::new(&gpu, &m, &t, Corpus::built_in()).unwrap();
    for _ in 0..n {
        first.step(true).unwrap();
    }
    first.save(&path).unwrap();
    drop(first);
    let mut second = Trainer::resume(&gpu, checkpoint::load(&path).unwrap(), &t, Corpus::built_in()).unwrap();
    assert_eq!(second.step, n as u64);
    for _ in 0..n {
        second.step(true).unwrap();
    }
    let (a, b) = (whole.checkpoint().unwrap(), second.checkpoint().unwrap());
    let bits = |v: &kernels_train::model::Tensors| v.iter().flatten().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&a.params), bits(&b.params), "weights differ");
    assert_eq!(bits(&a.m), bits(&b.m), "first moments differ");
    assert_eq!(bits(&a.v), bits(&b.v), "second moments differ");
    assert_eq!(a.train_history, b.train_history);
    std::fs::remove_dir_all(dir).unwrap();
}

fn cli(args: &[&str]) -> Result<(), cli::Failure> {
    let mut all = vec!["train", "--quiet"];
    all.extend_from_slice(args);
    cli::run(Args::try_parse_from(all).expect("valid flags"), &Stop::new())
}

#[test]
fn user_mistakes_give_clear_errors() {
    let Some(_gpu) = common::gpu() else { return };
    let dir = tmp("errors");
    let ck = dir.join("m.safetensors");
    let ckp = ck.to_str().unwrap();
    let small = ["--dim", "16", "--layers", "1", "--heads", "2", "--kv-heads", "1", "--seq-len", "8", "--batch", "2"];

    let e = cli(&["--data", "/no/such/file.txt", "--checkpoint", ckp]).unwrap_err();
    assert_eq!(e.code, 2);
    assert!(e.message.contains("/no/such/file.txt"), "{}", e.message);

    let empty = dir.join("empty.txt");
    std::fs::write(&empty, "").unwrap();
    let e = cli(&["--data", empty.to_str().unwrap(), "--checkpoint", ckp]).unwrap_err();
    assert!(e.code == 2 && e.message.contains("empty"), "{}", e.message);

    let e = cli(&["--dim", "30", "--heads", "4", "--checkpoint", ckp]).unwrap_err();
    assert!(e.code == 2 && e.message.contains("heads (4) must divide the model width (30)"), "{}", e.message);
    let e = cli(&["--heads", "4", "--kv-heads", "3", "--checkpoint", ckp]).unwrap_err();
    assert!(e.code == 2 && e.message.contains("kv heads (3) must divide heads (4)"), "{}", e.message);

    // A short run writes a checkpoint and its loss curve.
    let mut args = small.to_vec();
    args.extend(["--steps", "2", "--checkpoint", ckp, "--sample-bytes", "4"]);
    cli(&args).unwrap();
    assert!(ck.exists() && cli::curve_path(&ck).exists());
    let saved = std::fs::read(&ck).unwrap();

    // Not replaced by a new run unless asked.
    let e = cli(&args).unwrap_err();
    assert!(e.code == 2 && e.message.contains("--resume"), "{}", e.message);
    // A checkpoint of another shape is refused.
    let e = cli(&["--resume", "--checkpoint", ckp, "--dim", "32", "--heads", "2"]).unwrap_err();
    assert!(e.code == 2 && e.message.contains("another model configuration"), "{}", e.message);
    assert_eq!(std::fs::read(&ck).unwrap(), saved, "the checkpoint was touched");

    // A failing save leaves what was there (the target is a directory, so the rename fails).
    let blocked = dir.join("blocked.safetensors");
    std::fs::create_dir_all(blocked.join("inside")).unwrap();
    let c = checkpoint::load(&ck).unwrap();
    assert!(checkpoint::save(&blocked, &c).is_err());
    assert!(blocked.join("inside").exists());
    assert!(
        std::fs::read_dir(&dir).unwrap().all(|e| !e.unwrap().file_name().to_string_lossy().contains(".partial-")),
        "temporary left behind"
    );

    // Resuming with the checkpoint's own shape continues it; sampling needs a checkpoint.
    cli(&["--resume", "--checkpoint", ckp, "--steps", "3", "--batch", "2", "--sample-bytes", "4"]).unwrap();
    assert_eq!(checkpoint::load(&ck).unwrap().step, 3);
    cli(&["--generate", "fn ", "--checkpoint", ckp, "--sample-bytes", "8"]).unwrap();
    let e = cli(&["--generate", "x", "--checkpoint", dir.join("none.safetensors").to_str().unwrap()]).unwrap_err();
    assert_eq!(e.code, 2);
    std::fs::remove_dir_all(dir).unwrap();
}

/// A signal before the first step (here already there when the run starts) ends the run with
/// 128 + its number before any work, and writes no checkpoint: nothing has been trained. (A
/// signal mid-run saves: `tests/process.rs`.)
#[test]
fn an_interrupt_before_the_first_step_writes_nothing() {
    let Some(_gpu) = common::gpu() else { return };
    let dir = tmp("interrupt");
    let ck = dir.join("m.safetensors");
    let args = Args::try_parse_from([
        "train",
        "--quiet",
        "--dim",
        "16",
        "--layers",
        "1",
        "--heads",
        "2",
        "--kv-heads",
        "1",
        "--seq-len",
        "8",
        "--batch",
        "2",
        "--steps",
        "5",
        "--checkpoint",
        ck.to_str().unwrap(),
    ])
    .unwrap();
    let e = cli::run(args, &Stop::after(cli::SIGINT)).unwrap_err();
    assert_eq!(e.code, 130);
    assert!(e.message.contains("stopped by Ctrl-C (SIGINT) before training"), "{}", e.message);
    assert!(e.message.contains("no checkpoint was written"), "{}", e.message);
    assert!(!ck.exists() && !cli::curve_path(&ck).exists(), "a checkpoint of nothing was written");
    std::fs::remove_dir_all(dir).unwrap();
}

/// Every 1-D grid of a training step past a tiny per-dimension limit takes the runtime's 2-D
/// fallback; the results must not change by a single bit.
#[test]
fn the_2d_fallback_changes_nothing() {
    let Some(gpu) = common::gpu() else { return };
    let small =
        kernels::Gpu::with_options_blocking(kernels::GpuOptions::from_env().max_workgroups_per_dimension(16)).unwrap();
    assert_eq!(small.limits().max_compute_workgroups_per_dimension, 16);
    let (m, t) = tiny();
    let run = |g: &kernels::Gpu| {
        let mut tr = Trainer::new(g, &m, &t, Corpus::built_in()).unwrap();
        let losses: Vec<u32> = (0..3).map(|_| tr.step(true).unwrap().unwrap().to_bits()).collect();
        let w: Vec<u32> = tr.model.weights().unwrap().iter().flatten().map(|x| x.to_bits()).collect();
        (losses, w)
    };
    let (a, b) = (run(&gpu), run(&small));
    assert_eq!(a.0, b.0, "losses differ");
    assert!(a.1 == b.1, "weights differ");
}

fn small(args: &[&str]) -> Vec<String> {
    SMALL.iter().chain(args).map(|s| s.to_string()).collect()
}

fn cli_owned(args: &[String]) -> Result<(), cli::Failure> {
    cli(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// A resumed run whose loss becomes NaN leaves the checkpoint it resumed from as it
/// was (byte for byte, loadable, finite), writes its diverged state beside it, says so, and
/// exits with code 3; the diverged state cannot be resumed.
#[test]
fn a_diverging_resume_keeps_the_good_checkpoint() {
    let Some(_gpu) = common::gpu() else { return };
    let dir = tmp("diverge");
    let ck = dir.join("m.safetensors");
    let ckp = ck.to_str().unwrap();
    cli_owned(&small(&["--steps", "4", "--checkpoint", ckp, "--sample-bytes", "4"])).unwrap();
    let good = std::fs::read(&ck).unwrap();

    // A learning rate near f32's largest value: the first update puts weights near 3e38, and the
    // next products overflow on any adapter (1e30 stayed finite on the H200: RMSNorm rescales).
    let e = cli(&["--resume", "--checkpoint", ckp, "--steps", "40", "--lr", "3e38", "--log-every", "1"]).unwrap_err();
    eprintln!("{}", e.message);
    assert_eq!(e.code, exit::DIVERGED, "{}", e.message);
    assert!(e.message.contains("(step 4), is kept") && e.message.contains("m.diverged.safetensors"), "{}", e.message);
    assert_eq!(std::fs::read(&ck).unwrap(), good, "the good checkpoint was replaced");
    let kept = checkpoint::load(&ck).unwrap();
    assert_eq!((kept.step, kept.non_finite()), (4, None));

    let diverged = checkpoint::diverged_path(&ck);
    let record = checkpoint::load(&diverged).unwrap();
    assert!(record.step > 4);
    assert!(record.train_history.last().is_some_and(|h| !h.1.is_finite()), "{:?}", record.train_history);
    // Resuming the record fails as a divergence: refused outright when it holds a NaN or an
    // infinity, diverging again at once otherwise.
    let e = cli(&["--resume", "--checkpoint", diverged.to_str().unwrap(), "--steps", "60"]).unwrap_err();
    assert_eq!(e.code, exit::DIVERGED, "{}", e.message);
    if record.non_finite().is_some() {
        assert!(e.message.contains("cannot be resumed"), "{}", e.message);
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// A destination that cannot take a checkpoint fails before training, with a
/// usage code (a save that fails at the end: `tests/process.rs`).
#[test]
fn unusable_destinations_fail_before_training() {
    let Some(_gpu) = common::gpu() else { return };
    let dir = tmp("destination");
    let file = dir.join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let under_file = file.join("m.safetensors");
    let e = cli_owned(&small(&["--steps", "2", "--checkpoint", under_file.to_str().unwrap()])).unwrap_err();
    assert!(e.code == exit::USAGE && e.message.contains("is a file, not a directory"), "{}", e.message);
    let e = cli_owned(&small(&["--steps", "2", "--overwrite", "--checkpoint", dir.to_str().unwrap()])).unwrap_err();
    assert!(e.code == exit::USAGE && e.message.contains("is a directory"), "{}", e.message);
    let e = cli(&["--resume", "--checkpoint", dir.join("none.safetensors").to_str().unwrap()]).unwrap_err();
    assert!(e.code == exit::USAGE && e.message.contains("no checkpoint at"), "{}", e.message);

    std::fs::remove_dir_all(dir).unwrap();
}

/// A checkpoint with one flipped bit in its tensor data is refused from the command line by
/// --resume and --generate with exit code 5; restored, it works again.
#[test]
fn damaged_checkpoints_are_refused_by_resume_and_generate() {
    let Some(_gpu) = common::gpu() else { return };
    let dir = tmp("damaged");
    let ck = dir.join("m.safetensors");
    let ckp = ck.to_str().unwrap();
    cli_owned(&small(&["--steps", "2", "--checkpoint", ckp, "--sample-bytes", "4"])).unwrap();
    let good = std::fs::read(&ck).unwrap();
    let mut bad = good.clone();
    let at = good.len() - 1000;
    bad[at] ^= 0x10;
    std::fs::write(&ck, &bad).unwrap();
    for args in [&["--resume", "--steps", "3"][..], &["--generate", "fn "][..]] {
        let e = cli(&[args, &["--checkpoint", ckp]].concat()).unwrap_err();
        assert!(e.code == exit::CORRUPT && e.message.contains("checksum"), "{args:?}: {}", e.message);
    }
    std::fs::write(&ck, &good).unwrap();
    cli(&["--resume", "--steps", "3", "--checkpoint", ckp, "--sample-bytes", "4"]).unwrap();
    assert_eq!(checkpoint::load(&ck).unwrap().step, 3);
    std::fs::remove_dir_all(dir).unwrap();
}

/// Crafted flags end in clear errors, not panics or allocation aborts.
#[test]
fn crafted_flags_are_errors_not_aborts() {
    let Some(_gpu) = common::gpu() else { return };
    let dir = tmp("crafted-flags");
    let ckp = dir.join("m.safetensors");
    let ckp = ckp.to_str().unwrap();
    for (args, want) in [
        (small(&["--eval-every", "0"]), "--eval-every must be at least 1"),
        (small(&["--checkpoint-every", "0"]), "--checkpoint-every must be at least 1"),
        (small(&["--checkpoint-minutes", "NaN"]), "--checkpoint-minutes"),
        (small(&["--weight-decay", "NaN"]), "--weight-decay NaN must be finite"),
        (vec!["--dim".into(), "65536".into()], "head width"),
        (
            vec!["--dim", "65536", "--heads", "256", "--kv-heads", "256"].into_iter().map(String::from).collect(),
            "over this device's max_storage_buffer_binding_size",
        ),
        (
            // Logits of 2M × 8 tokens × 256: 16 GiB, over any adapter's binding limit (200000
            // fitted the H200's 2 GiB).
            SMALL[..10].iter().chain(&["--batch", "2000000"]).map(|s| s.to_string()).collect(),
            "over this device's max_storage_buffer_binding_size",
        ),
    ] {
        let mut args = args;
        args.extend(["--checkpoint".to_string(), ckp.to_string()]);
        let e = cli_owned(&args).unwrap_err();
        eprintln!("{args:?}: {}", e.message);
        assert!(e.code == exit::USAGE && e.message.contains(want), "{args:?}: {}", e.message);
    }
    assert!(!std::path::Path::new(ckp).exists());
    std::fs::remove_dir_all(dir).unwrap();
}

/// A run's `Error`s map to the documented exit codes.
#[test]
fn errors_map_to_the_documented_exit_codes() {
    let code = |e: Error| cli::Failure::from(e).code;
    assert_eq!(code(Error::Config(String::new())), 2);
    assert_eq!(code(Error::Data(String::new())), 2);
    assert_eq!(code(Error::Checkpoint(String::new())), 2);
    assert_eq!(code(Error::Diverged(String::new())), 3);
    assert_eq!(code(Error::Save(String::new())), 4);
    assert_eq!(code(Error::Corrupt(String::new())), 5);
    assert_eq!(code(Error::Busy(String::new())), 6);
    assert_eq!(code(Error::Gpu(kernels::Error::LengthMismatch { detail: String::new() })), 1);
}
