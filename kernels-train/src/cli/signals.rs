//! Ending a run early: SIGINT (Ctrl-C), SIGTERM (`kill`, a container stop, a scheduler's
//! preemption) and SIGHUP (the terminal went away) all ask the run to save after the current
//! step and exit with 128 + the signal's number; the same signal again quits at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};

/// Signal numbers (those of Linux and the BSDs).
pub const SIGHUP: i32 = 1;
/// Ctrl-C.
pub const SIGINT: i32 = 2;
/// `kill`'s default.
pub const SIGTERM: i32 = 15;

/// A request to stop, shared between the signal handler and the training loop: the number of
/// the first signal that came (0: none yet).
#[derive(Clone, Debug, Default)]
pub struct Stop(Arc<AtomicI32>);

impl Stop {
    /// No request yet.
    pub fn new() -> Stop {
        Stop::default()
    }

    /// A request already made, as if `signal` had come (for tests and tools).
    pub fn after(signal: i32) -> Stop {
        let s = Stop::new();
        s.request(signal);
        s
    }

    /// Asks the run to stop, as `signal` would; returns false if a request came before.
    pub fn request(&self, signal: i32) -> bool {
        self.0.compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst).is_ok()
    }

    /// The signal that asked, if one has.
    pub fn requested(&self) -> Option<i32> {
        match self.0.load(Ordering::SeqCst) {
            0 => None,
            s => Some(s),
        }
    }
}

/// Whether the training loop has begun: before it, a signal ends the run without a checkpoint
/// (nothing has been trained), and the handler's line says so.
static TRAINING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// While this lives, the signal handler says that a signal saves after the current step.
pub(super) struct Training(());

impl Training {
    /// The training loop begins.
    pub(super) fn begin() -> Training {
        TRAINING.store(true, Ordering::SeqCst);
        Training(())
    }
}

impl Drop for Training {
    fn drop(&mut self) {
        TRAINING.store(false, Ordering::SeqCst);
    }
}

/// A signal's name, for messages.
pub fn name(signal: i32) -> &'static str {
    match signal {
        SIGINT => "Ctrl-C (SIGINT)",
        SIGTERM => "SIGTERM",
        SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}

/// Routes SIGINT, SIGTERM and SIGHUP to `stop`: the first asks for a checkpoint and a clean
/// exit, a second quits at once with 128 + its number.
#[cfg(unix)]
pub fn install(stop: &Stop) -> Result<(), String> {
    use std::sync::atomic::AtomicPtr;
    static TARGET: AtomicPtr<AtomicI32> = AtomicPtr::new(std::ptr::null_mut());

    extern "C" fn on_signal(signal: libc::c_int) {
        // Only async-signal-safe work here: atomics, write(2), _exit(2).
        let target = TARGET.load(Ordering::SeqCst);
        if target.is_null() {
            return;
        }
        // SAFETY: `target` comes from `Arc::into_raw` below and is never released.
        let flag = unsafe { &*target };
        if flag.compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst).is_err() {
            // SAFETY: _exit is async-signal-safe and ends the process.
            unsafe { libc::_exit(128 + signal) };
        }
        let training = TRAINING.load(Ordering::SeqCst);
        let message: &[u8] = match (signal, training) {
            (libc::SIGINT, true) => b"\nCtrl-C: saving a checkpoint after this step (press again to quit at once)\n",
            (libc::SIGTERM, true) => b"\nSIGTERM: saving a checkpoint after this step (send again to quit at once)\n",
            (_, true) => b"\nSIGHUP: saving a checkpoint after this step (send again to quit at once)\n",
            (libc::SIGINT, false) => b"\nCtrl-C: stopping (nothing trained yet, nothing to save)\n",
            (libc::SIGTERM, false) => b"\nSIGTERM: stopping (nothing trained yet, nothing to save)\n",
            (_, false) => b"\nSIGHUP: stopping (nothing trained yet, nothing to save)\n",
        };
        // SAFETY: write(2) on stderr with a valid buffer is async-signal-safe.
        let _ = unsafe { libc::write(2, message.as_ptr().cast(), message.len()) };
    }

    debug_assert_eq!((libc::SIGHUP, libc::SIGINT, libc::SIGTERM), (SIGHUP, SIGINT, SIGTERM));
    // The flag lives for the rest of the process: one Arc is leaked on purpose (and that of an
    // earlier call too, which a running handler may still be reading).
    TARGET.store(Arc::into_raw(stop.0.clone()).cast_mut(), Ordering::SeqCst);
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction with an empty mask and a plain handler is valid input.
        let ok = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut()) == 0
        };
        if !ok {
            return Err(format!("cannot handle signal {signal}: {}", std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// Routes Ctrl-C to `stop` (SIGTERM and SIGHUP are Unix signals).
#[cfg(not(unix))]
pub fn install(stop: &Stop) -> Result<(), String> {
    let stop = stop.clone();
    ctrlc::set_handler(move || {
        if !stop.request(SIGINT) {
            std::process::exit(128 + SIGINT);
        }
        crate::note("\nCtrl-C: saving a checkpoint after this step (press again to quit at once)");
    })
    .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_request_wins() {
        let s = Stop::new();
        assert_eq!(s.requested(), None);
        assert!(s.request(SIGTERM));
        assert!(!s.request(SIGINT));
        assert_eq!(s.clone().requested(), Some(SIGTERM));
        assert_eq!(Stop::after(SIGHUP).requested(), Some(SIGHUP));
        assert_eq!(name(SIGTERM), "SIGTERM");
    }
}
