//! Data-parallel training as processes: two ranks of batch 4 train as one process of batch 8
//! (the same losses and weights within the rounding of the other summation order), a checkpoint
//! written by two ranks resumes on one, and a rank killed mid-run ends the other with the
//! promised message in bounded time, under `mpirun` (Open MPI) and over the TCP rendezvous
//! (torchrun's variables, no MPI). The rendezvous itself is tested between two processes.
//!
//! The ranks share the one adapter of the machine (`KERNELS_ADAPTER_INDEX=0`). Under `CI=true`
//! a missing `mpirun` or adapter is a failure. A trainer built with the `mpi` feature runs MPI
//! under mpirun; one without it runs the TCP collective there (the same test, another engine).
#![cfg(unix)]

mod common;

use common::{PATIENCE, TRAINER, tmp};
use kernels_train::checkpoint;
use kernels_train::dist::tcp::TcpCollective;
use kernels_train::dist::{Collective, Rank};
use kernels_train::metrics::{self, Record};
use kernels_train::rng::Rng;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The tiny model (its batch is each test's).
const MODEL: [&str; 10] = ["--dim", "16", "--layers", "1", "--heads", "2", "--kv-heads", "1", "--seq-len", "8"];
const SEQ: usize = 8;

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Whether `mpirun` runs here: under CI a missing one is a failure, elsewhere a skip.
fn have_mpirun() -> bool {
    let found = Command::new("mpirun").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status();
    match found {
        Ok(s) if s.success() => true,
        _ if ci() => panic!("CI=true but no mpirun: .ci/run installs Open MPI (openmpi-bin)"),
        _ => {
            eprintln!("SKIPPED: no mpirun (apt-get install openmpi-bin)");
            false
        }
    }
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `mpirun -n 2` of the trainer with `args`, as root where need be, on this machine's shared
/// memory (Open MPI's TCP transport probes every interface first). Each rank writes its pid to
/// `dir/pid.RANK`.
fn mpirun(dir: &Path, args: &[&str], log: &Path) -> Child {
    let mut c = Command::new("mpirun");
    c.args(["-n", "2", "--oversubscribe", "--mca", "btl", "self,vader"])
        .arg("sh")
        .arg("-c")
        .arg(format!("echo $$ > {}/pid.$OMPI_COMM_WORLD_RANK; exec \"$0\" \"$@\"", dir.display()))
        .arg(TRAINER)
        .args(MODEL)
        .args(args)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("KERNELS_ADAPTER_INDEX", "0");
    if !cfg!(feature = "mpi") {
        c.env("MASTER_ADDR", "127.0.0.1").env("MASTER_PORT", free_port().to_string());
    }
    c.stdout(Stdio::null()).stderr(std::fs::File::create(log).unwrap()).spawn().expect("mpirun starts")
}

/// The trainer as one process with `args` (and `env`), its stderr in `log`.
fn trainer(args: &[&str], env: &[(&str, String)], log: &Path) -> Child {
    let mut c = Command::new(TRAINER);
    c.args(MODEL).args(args).envs(env.iter().map(|(k, v)| (*k, v.clone())));
    c.stdout(Stdio::null()).stderr(std::fs::File::create(log).unwrap()).spawn().expect("the trainer starts")
}

/// Waits for `child` (at most [`PATIENCE`]); its exit status and what it said.
fn finish(child: &mut Child, log: &Path) -> (std::process::ExitStatus, String) {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (status, std::fs::read_to_string(log).unwrap_or_default());
        }
        if started.elapsed() > PATIENCE {
            let _ = child.kill();
            panic!("the run did not end in {PATIENCE:?}:\n{}", std::fs::read_to_string(log).unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn ok(child: &mut Child, log: &Path) {
    let (status, said) = finish(child, log);
    assert!(status.success(), "the run failed ({status}):\n{said}");
}

fn log_of(checkpoint: &Path) -> Vec<Record> {
    metrics::read(&metrics::metrics_path(checkpoint)).unwrap()
}

/// `f32` rounding: the unit roundoff and γ_n = n·u/(1 − n·u).
const U: f64 = f32::EPSILON as f64 / 2.0;
fn gamma(n: usize) -> f64 {
    n as f64 * U / (1.0 - n as f64 * U)
}

/// Steps after the first compare runs whose weights already differ by the rounding of the
/// gradients' other summation order, carried through AdamW (which divides each gradient by
/// its own size, so no useful a-priori bound follows from the first step's): their losses,
/// gradient norms and weights are held to this relative tolerance, 2^-13 — far above the
/// differences rounding leaves after a few steps, far below what a rank reading the wrong part
/// of the batch, or gradients summed instead of averaged, changes.
const DRIFT: f64 = 1.0 / 8192.0;

fn close(what: &str, a: f64, b: f64, bound: f64) {
    assert!((a - b).abs() <= bound, "{what}: {a} vs {b}, differ by {:e} > {bound:e}", (a - b).abs());
}

/// Compares two metrics logs step by step. The first step's loss comes from the same weights
/// on the same tokens in both runs, each token's loss computed alike; only how the 64 token
/// losses are summed differs (one sum of 64 on one GPU; two sums of 32, averaged on the
/// host). Each is a sum of positive terms, within γ_63 of the exact sum relative to it, and
/// the division by the count adds a rounding: |ΔL| ≤ (2γ_64 + 4u)·L.
fn same_training(one: &[Record], two: &[Record], first: u64) {
    assert_eq!(one.len(), two.len(), "the logs have other steps");
    for (a, b) in one.iter().zip(two) {
        assert_eq!(a.step, b.step);
        let (la, lb) = (a.loss.expect("a loss every step") as f64, b.loss.expect("a loss every step") as f64);
        let bound = if a.step == first { (2.0 * gamma(8 * SEQ) + 4.0 * U) * la } else { DRIFT * la };
        close(&format!("loss of step {}", a.step), la, lb, bound);
        let (ga, gb) = (a.grad_norm.expect("a gradient norm") as f64, b.grad_norm.expect("a gradient norm") as f64);
        close(&format!("gradient norm of step {}", a.step), ga, gb, DRIFT * ga);
        if let (Some(va), Some(vb)) = (a.val_loss, b.val_loss) {
            close(&format!("validation loss after step {}", a.step), va as f64, vb as f64, DRIFT * va as f64);
        }
        assert_eq!(a.val_loss.is_some(), b.val_loss.is_some());
    }
}

#[test]
fn two_ranks_of_batch_4_train_as_one_of_batch_8_and_their_checkpoint_resumes_on_one() {
    if common::gpu().is_none() || !have_mpirun() {
        return;
    }
    let seed = common::seed("two_ranks_of_batch_4_train_as_one_of_batch_8").to_string();
    let dir = tmp("dist-same");
    let (two, one) = (dir.join("two.safetensors"), dir.join("one.safetensors"));
    let run = |batch: &'static str, steps: &'static str, ck: &Path| -> Vec<String> {
        let flags = [
            "--batch",
            batch,
            "--steps",
            steps,
            "--seed",
            &seed,
            "--log-every",
            "1",
            "--eval-every",
            "3",
            "--eval-batches",
            "2",
            "--sample-tokens",
            "1",
            "--checkpoint-minutes",
            "0",
        ];
        let mut v: Vec<String> = flags.iter().map(|s| s.to_string()).collect();
        v.extend(["--checkpoint".to_string(), ck.display().to_string()]);
        v
    };
    let (la, lb) = (dir.join("two.log"), dir.join("one.log"));
    let mut a = mpirun(&dir, &refs(&run("4", "3", &two)), &la);
    let mut b = trainer(&refs(&run("8", "3", &one)), &[], &lb);
    ok(&mut a, &la);
    ok(&mut b, &lb);
    let said = std::fs::read_to_string(&la).unwrap();
    assert!(said.contains("data-parallel: 2 ranks"), "rank 0 says how the run is split:\n{said}");
    same_training(&log_of(&one), &log_of(&two), 1);

    // The checkpoints: one file, rank 0's, of the same run as the single process's.
    let (ca, cb) = (checkpoint::load(&two).unwrap(), checkpoint::load(&one).unwrap());
    assert_eq!((ca.step, &ca.model), (cb.step, &cb.model));
    for (t, (wa, wb)) in ca.params.iter().zip(cb.params.iter()).enumerate() {
        let scale = wb.iter().fold(0.0f64, |m, &w| m.max((w as f64).abs()));
        for (k, (&x, &y)) in wa.iter().zip(wb.iter()).enumerate() {
            close(&format!("weight {k} of tensor {t}"), x as f64, y as f64, DRIFT * scale);
        }
    }

    // Both resume on one process with the whole batch: the same continuation.
    let resume = |ck: &Path, log: &Path| {
        let mut args = run("8", "5", ck);
        args.push("--resume".into());
        let mut c = trainer(&refs(&args), &[], log);
        ok(&mut c, log);
    };
    resume(&two, &dir.join("two-resumed.log"));
    resume(&one, &dir.join("one-resumed.log"));
    let (ra, rb) = (log_of(&two), log_of(&one));
    assert_eq!(ra.last().map(|r| r.step), Some(5));
    same_training(&rb, &ra, 1);
    assert_eq!(checkpoint::load(&two).unwrap().step, 5);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Waits for a checkpoint of at least `step` at `path`.
fn wait_for_step(child: &mut Child, path: &Path, step: u64, log: &Path) {
    let started = Instant::now();
    loop {
        if checkpoint::load(path).is_ok_and(|c| c.step >= step) {
            return;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "the run ended ({status}) before step {step}:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        assert!(started.elapsed() < PATIENCE, "no checkpoint of step {step} in {PATIENCE:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How long the surviving rank may take to end once the other is killed: a dead TCP peer is
/// seen at once and mpirun ends the job at once; this bounds it generously for two shared
/// cores, and stays far below the collective timeout of the run (300 s), so the end seen is the
/// prompt one, not the timeout's.
const ENDS_WITHIN: Duration = Duration::from_secs(60);

fn kill(pid: i32) {
    // SAFETY: kill(2) with a child's pid.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0, "kill {pid}");
}

/// The flags of a long run that saves every 2 steps.
fn long_run(ck: &Path) -> Vec<String> {
    let flags = ["--batch", "2", "--steps", "100000", "--log-every", "1", "--quiet", "--checkpoint-minutes", "0"];
    let mut v: Vec<String> = flags.iter().map(|s| s.to_string()).collect();
    v.extend(["--checkpoint-every".into(), "2".into(), "--checkpoint".into(), ck.display().to_string()]);
    v
}

/// The survivor's end: in bounded time, a failure whose message names the lost rank's
/// absence and the checkpoint kept, which loads.
fn ended_with_the_message(survivor: &mut Child, log: &Path, ck: &Path, killed_at: Instant) -> String {
    let (status, said) = finish(survivor, log);
    let took = killed_at.elapsed();
    assert!(took < ENDS_WITHIN, "the other rank took {took:?} to end:\n{said}");
    assert!(!status.success(), "the survivor ended well after its peer was killed:\n{said}");
    assert!(said.contains("error: rank 0: data-parallel run: step "), "{said}");
    assert!(said.contains("the last good checkpoint") && said.contains("is kept"), "{said}");
    let c = checkpoint::load(ck).unwrap();
    assert!(c.step >= 2 && c.non_finite().is_none(), "the last checkpoint is good");
    said
}

#[test]
fn killing_a_rank_under_mpirun_ends_the_other_with_the_promised_message() {
    if common::gpu().is_none() || !have_mpirun() {
        return;
    }
    let dir = tmp("dist-kill-mpi");
    let (ck, log) = (dir.join("run.safetensors"), dir.join("run.log"));
    let args = long_run(&ck);
    let mut job = mpirun(&dir, &refs(&args), &log);
    wait_for_step(&mut job, &ck, 2, &log);
    let pid: i32 = std::fs::read_to_string(dir.join("pid.1")).unwrap().trim().parse().unwrap();
    kill(pid);
    let said = ended_with_the_message(&mut job, &log, &ck, Instant::now());
    // MPI: mpirun ends the job, and rank 0 says what it was waiting for; TCP: rank 0 sees the
    // connection close.
    assert!(said.contains("while rank 0 waited for the other ranks") || said.contains("rank 1 left the run"), "{said}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn killing_a_rank_started_as_by_torchrun_ends_the_other_with_the_promised_message() {
    if common::gpu().is_none() {
        return;
    }
    let dir = tmp("dist-kill-tcp");
    let (ck, log0, log1) = (dir.join("run.safetensors"), dir.join("rank0.log"), dir.join("rank1.log"));
    let args = long_run(&ck);
    let args = refs(&args);
    let port = free_port().to_string();
    let env = |rank: &str| {
        vec![
            ("RANK", rank.to_string()),
            ("LOCAL_RANK", rank.to_string()),
            ("WORLD_SIZE", "2".to_string()),
            ("MASTER_ADDR", "127.0.0.1".to_string()),
            ("MASTER_PORT", port.clone()),
            ("KERNELS_ADAPTER_INDEX", "0".to_string()),
        ]
    };
    let mut r0 = trainer(&args, &env("0"), &log0);
    let mut r1 = trainer(&args, &env("1"), &log1);
    wait_for_step(&mut r0, &ck, 2, &log0);
    kill(r1.id() as i32);
    let killed = Instant::now();
    let _ = r1.wait();
    let said = ended_with_the_message(&mut r0, &log0, &ck, killed);
    assert!(said.contains("rank 1 left the run during "), "{said}");
    assert_eq!(finish(&mut r0, &log0).0.code(), Some(kernels_train::cli::exit::RANKS));
    let _ = std::fs::remove_dir_all(&dir);
}

/// What rank `r` contributes in the rendezvous test: values drawn from the seed and the rank.
fn contribution(seed: u64, r: usize) -> (Vec<f64>, Vec<u8>) {
    let mut rng = Rng::for_step(seed, 11, r as u64);
    let values = (0..5).map(|_| rng.below(1 << 20) as f64 / 1024.0 - 512.0).collect();
    let bytes = (0..37 + r).map(|_| rng.below(256) as u8).collect();
    (values, bytes)
}

/// The collectives both processes of the rendezvous test make, checking every result.
fn exchange(c: &mut TcpCollective, seed: u64) {
    let me = c.rank().rank;
    let (mine, _) = contribution(seed, me);
    let mut sum = mine.clone();
    c.sum_f64(&mut sum).unwrap();
    let (a, b) = (contribution(seed, 0).0, contribution(seed, 1).0);
    let want: Vec<f64> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    assert_eq!(sum, want, "rank {me}: the sum over the ranks");
    for root in [0, 1] {
        let mut bytes = if me == root { contribution(seed, root).1 } else { vec![0xEE; 3] };
        c.broadcast(root, &mut bytes).unwrap();
        assert_eq!(bytes, contribution(seed, root).1, "rank {me}: the broadcast from {root}");
    }
    c.barrier().unwrap();
}

const CHILD: &str = "KERNELS_DIST_TEST_RANK1";

#[test]
fn the_rendezvous_connects_two_processes_and_sees_one_leave() {
    let seed = common::seed("the_rendezvous_connects_two_processes");
    let address = format!("127.0.0.1:{}", free_port());
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "rank_one_of_the_rendezvous_test", "--ignored", "--nocapture"])
        .env(CHILD, format!("{address} {seed}"))
        .spawn()
        .unwrap();
    let rank = Rank { rank: 0, world: 2, local_rank: 0 };
    let mut c = TcpCollective::connect(rank, &address, Duration::from_secs(120)).unwrap();
    exchange(&mut c, seed);
    let status = child.wait().unwrap();
    assert!(status.success(), "rank 1's checks failed ({status})");
    // Rank 1 has ended: the next collective fails at once, saying so.
    let started = Instant::now();
    let e = c.barrier().unwrap_err().to_string();
    assert!(e.contains("rank 1 left the run during a barrier"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(c.barrier().unwrap_err().to_string().contains("an earlier collective failed"));
}

/// The second process of `the_rendezvous_connects_two_processes_and_sees_one_leave`, which
/// starts it (alone it has no rank 0 to meet).
#[test]
#[ignore = "the second process of the_rendezvous_connects_two_processes_and_sees_one_leave"]
fn rank_one_of_the_rendezvous_test() {
    let given = std::env::var(CHILD).expect("started by the_rendezvous_connects_two_processes_and_sees_one_leave");
    let (address, seed) = given.split_once(' ').unwrap();
    let rank = Rank { rank: 1, world: 2, local_rank: 1 };
    let mut c = TcpCollective::connect(rank, address, Duration::from_secs(120)).unwrap();
    exchange(&mut c, seed.parse().unwrap());
}

#[test]
fn a_rank_that_never_comes_is_reported_after_the_timeout() {
    let address = format!("127.0.0.1:{}", free_port());
    let started = Instant::now();
    let e = TcpCollective::connect(Rank { rank: 0, world: 3, local_rank: 0 }, &address, Duration::from_millis(500))
        .unwrap_err()
        .to_string();
    assert!(e.contains("rank(s) 1, 2 never connected"), "{e}");
    assert!(started.elapsed() >= Duration::from_millis(500) && started.elapsed() < Duration::from_secs(30));
    // And a rank with no rank 0 to reach.
    let e = TcpCollective::connect(Rank { rank: 1, world: 2, local_rank: 1 }, &address, Duration::from_millis(500))
        .unwrap_err()
        .to_string();
    assert!(e.contains("could not reach rank 0"), "{e}");
}
