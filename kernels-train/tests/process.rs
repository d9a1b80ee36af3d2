//! The trainer as a process (this crate's `train` binary, the same program as the workspace's
//! `cargo run --example train`), under faults: SIGTERM and SIGHUP mid-run save
//! a checkpoint that resumes; a second run on the same checkpoint is refused while the
//! first holds it, and truncating the data file under a run does not end it; SIGKILLs
//! during saves never leave a bad checkpoint, and their temporary files are removed by the next
//! run; a save that fails at the end keeps the state elsewhere and exits with code 4.
//!
//! Each waits for the run to reach a point (a checkpoint on disk, a line on stderr), with a
//! generous limit so that a stuck run fails instead of hanging; nothing is timed.
#![cfg(unix)]

mod common;

use common::{PATIENCE, SMALL, TRAINER, tmp};

use clap::Parser;
use kernels_train::checkpoint::{self, Checkpoint};
use kernels_train::cli::{self, Args, Stop, exit};
use kernels_train::rng::Rng;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The trainer on the tiny model, with `args`, its stderr kept in `log`.
fn spawn(args: &[&str], log: &Path) -> Child {
    Command::new(TRAINER)
        .args(SMALL)
        .args(args)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .expect("the trainer binary starts")
}

fn signal(child: &Child, signal: i32) {
    // SAFETY: kill(2) with a child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0, "kill {signal}");
}

/// Waits until the checkpoint at `path` loads with a step of at least `step`.
fn wait_for_checkpoint(child: &mut Child, path: &Path, step: u64, log: &Path) -> Checkpoint {
    let started = Instant::now();
    loop {
        if let Ok(c) = checkpoint::load(path)
            && c.step >= step
        {
            return c;
        }
        if let Some(status) = child.try_wait().unwrap() {
            let said = std::fs::read_to_string(log).unwrap_or_default();
            panic!("the run ended ({status}) before step {step} was saved:\n{said}");
        }
        assert!(started.elapsed() < PATIENCE, "no checkpoint of step {step} in {PATIENCE:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn exit_code(child: &mut Child, log: &Path) -> i32 {
    let status = child.wait().unwrap();
    status.code().unwrap_or_else(|| panic!("ended by {status}:\n{}", std::fs::read_to_string(log).unwrap_or_default()))
}

fn cli(args: &[&str]) -> Result<(), cli::Failure> {
    let all = ["train", "--quiet"].iter().chain(&SMALL).chain(args);
    cli::run(Args::try_parse_from(all).expect("valid flags"), &Stop::new())
}

fn partials(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".partial-"))
        .collect()
}

#[test]
fn signals_save_a_checkpoint_that_resumes_and_one_run_holds_a_checkpoint() {
    let Some(_gpu) = common::gpu() else { return };
    let dir = tmp("signals");
    let data = dir.join("data.txt");
    let text = kernels_train::data::built_in_text();
    std::fs::write(&data, &text).unwrap();
    let ck = dir.join("m.safetensors");
    let (datap, ckp) = (data.to_str().unwrap(), ck.to_str().unwrap());
    let forever = ["--data", datap, "--checkpoint", ckp, "--steps", "1000000", "--checkpoint-every", "2"];

    let log = dir.join("first.log");
    let mut first = spawn(&forever, &log);
    let periodic = wait_for_checkpoint(&mut first, &ck, 2, &log);
    assert!(periodic.step.is_multiple_of(2), "a periodic checkpoint every 2 steps: {}", periodic.step);

    // A second run on the same checkpoint is refused while the first holds it.
    let e = cli(&["--resume", "--checkpoint", ckp, "--steps", "1000"]).unwrap_err();
    assert_eq!(e.code, exit::BUSY, "{}", e.message);
    assert!(e.message.contains(&format!("process {}", first.id())), "{}", e.message);

    // The data file truncated under the run: it trains on (its text is in memory).
    std::fs::File::create(&data).unwrap();
    wait_for_checkpoint(&mut first, &ck, periodic.step + 2, &log);

    signal(&first, libc::SIGTERM);
    assert_eq!(exit_code(&mut first, &log), 128 + libc::SIGTERM);
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(said.contains("stopped by SIGTERM") && said.contains("--resume continues"), "{said}");
    let stopped = checkpoint::load(&ck).unwrap();
    assert!(stopped.step >= periodic.step + 2 && stopped.non_finite().is_none());

    // It resumes (in this process: the lock went with the first run).
    std::fs::write(&data, &text).unwrap();
    let next = (stopped.step + 2).to_string();
    cli(&["--resume", "--data", datap, "--checkpoint", ckp, "--steps", &next, "--sample-bytes", "4"]).unwrap();
    assert_eq!(checkpoint::load(&ck).unwrap().step, stopped.step + 2);

    // SIGHUP too, on a resumed run.
    let log = dir.join("hangup.log");
    let mut resumed = spawn(&[&["--resume"][..], &forever[..]].concat(), &log);
    wait_for_checkpoint(&mut resumed, &ck, stopped.step + 4, &log);
    signal(&resumed, libc::SIGHUP);
    assert_eq!(exit_code(&mut resumed, &log), 128 + libc::SIGHUP);
    assert!(std::fs::read_to_string(&log).unwrap().contains("stopped by SIGHUP"));
    assert!(checkpoint::load(&ck).unwrap().step >= stopped.step + 4);
    assert!(partials(&dir).is_empty(), "{:?}", partials(&dir));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn kills_during_saves_leave_a_good_checkpoint_and_no_lasting_temporaries() {
    let Some(_gpu) = common::gpu() else { return };
    let dir = tmp("kills");
    let ck = dir.join("m.safetensors");
    let ckp = ck.to_str().unwrap();
    let mut rng = Rng::new(common::seed("kills during saves"));
    // A checkpoint every step: a kill at a random moment often lands inside a save.
    let forever = ["--checkpoint", ckp, "--steps", "1000000", "--checkpoint-every", "1", "--checkpoint-minutes", "0"];
    let mut step = 0;
    for round in 0..4 {
        let log = dir.join(format!("round{round}.log"));
        let args: Vec<&str> = if round == 0 { forever.to_vec() } else { [&["--resume"][..], &forever[..]].concat() };
        if round == 2 {
            // What a kill during a save of the old trainer left: a full-size file that read as a
            // checkpoint with zeroed tensors. It is never read, and the next run removes it.
            let size = std::fs::metadata(&ck).unwrap().len() as usize;
            std::fs::write(dir.join(".m.safetensors.partial-4000000-0"), vec![0u8; size]).unwrap();
        }
        let mut child = spawn(&args, &log);
        step = wait_for_checkpoint(&mut child, &ck, step + 1, &log).step;
        std::thread::sleep(Duration::from_millis(rng.below(200)));
        signal(&child, libc::SIGKILL);
        let status = child.wait().unwrap();
        assert!(status.code().is_none(), "killed: {status}");
        let after = checkpoint::load(&ck).expect("a killed run leaves a checkpoint that loads");
        assert!(after.step >= step && after.non_finite().is_none());
        step = after.step;
        // Temporaries left now are the killed run's own (its pid is in their names).
        let own = format!(".partial-{}-", child.id());
        let left = partials(&dir);
        assert!(left.iter().all(|n| n.contains(&own)), "round {round}: {left:?}");
        eprintln!("round {round}: killed at step {step}; temporaries left: {left:?}");
    }
    // A run to the end removes every temporary.
    let to = (step + 1).to_string();
    cli(&["--resume", "--checkpoint", ckp, "--steps", &to, "--sample-bytes", "4"]).unwrap();
    assert_eq!(checkpoint::load(&ck).unwrap().step, step + 1);
    assert!(partials(&dir).is_empty(), "{:?}", partials(&dir));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_save_that_fails_at_the_end_keeps_the_state_elsewhere() {
    let Some(_gpu) = common::gpu() else { return };
    let dir = tmp("failed-save");
    let sub = dir.join("sub");
    let ck = sub.join("m.safetensors");
    let log = dir.join("run.log");
    let args =
        ["--checkpoint", ck.to_str().unwrap(), "--steps", "1000000", "--checkpoint-every", "2", "--log-every", "1"];
    let mut child = Command::new(TRAINER)
        .args(SMALL)
        .args(args)
        .arg("--quiet")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let last_good = wait_for_checkpoint(&mut child, &ck, 2, &log);
    // Every write into the checkpoint's directory fails from now on (as on a full disk).
    let moved = dir.join("sub.moved");
    std::fs::rename(&sub, &moved).unwrap();
    std::fs::write(&sub, b"not a directory any more").unwrap();
    // Wait for a periodic save to fail (so the run is past its last good checkpoint), then stop.
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    let started = Instant::now();
    loop {
        let mut line = String::new();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "the run ended:\n{said}");
        said.push_str(&line);
        if line.contains("warning: no periodic checkpoint") {
            break;
        }
        assert!(started.elapsed() < PATIENCE, "no failed periodic save:\n{said}");
    }
    signal(&child, libc::SIGTERM);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    said.push_str(&rest);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(exit::SAVE_FAILED), "{said}");
    let rescued = said.split("was written to ").nth(1).and_then(|r| r.split(" instead").next()).expect(&said);
    let state = checkpoint::load(Path::new(rescued)).unwrap();
    assert!(state.step > last_good.step && state.non_finite().is_none(), "{said}");
    assert!(said.contains("is kept"), "{said}");
    std::fs::remove_file(rescued).unwrap();
    // The last good checkpoint, moved away with its directory, is intact.
    assert!(checkpoint::load(&moved.join("m.safetensors")).unwrap().step >= last_good.step);
    std::fs::remove_dir_all(dir).unwrap();
}

/// Logs redirected to a full disk (`/dev/full`: every write fails with "No space left on
/// device") do not stop a run: it trains and saves; only output that cannot be written is a
/// failure (exit code 1), after the checkpoint is saved.
#[test]
fn a_full_disk_under_the_logs_does_not_stop_a_run() {
    let Some(_gpu) = common::gpu() else { return };
    let dir = tmp("full-logs");
    let ck = dir.join("m.safetensors");
    let full = || std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    let run = |stdout: Stdio, extra: &[&str]| {
        Command::new(TRAINER)
            .args(SMALL)
            .args(["--checkpoint", ck.to_str().unwrap(), "--log-every", "1", "--eval-every", "1"])
            .args(["--sample-bytes", "4"])
            .args(extra)
            .stdout(stdout)
            .stderr(full())
            .status()
            .unwrap()
    };
    assert_eq!(run(Stdio::null(), &["--steps", "3"]).code(), Some(0));
    assert_eq!(checkpoint::load(&ck).unwrap().step, 3);
    assert_eq!(run(Stdio::from(full()), &["--resume", "--steps", "5"]).code(), Some(exit::FAILED));
    assert_eq!(checkpoint::load(&ck).unwrap().step, 5);
    std::fs::remove_dir_all(dir).unwrap();
}
