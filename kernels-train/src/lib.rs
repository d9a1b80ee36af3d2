#![doc = include_str!("../README.md")]

pub mod checkpoint;
#[cfg(not(target_arch = "wasm32"))]
pub mod cli;
pub mod config;
pub mod data;
pub mod dist;
#[cfg(not(target_arch = "wasm32"))]
pub mod eval;
#[cfg(not(target_arch = "wasm32"))]
pub mod export;
#[cfg(not(target_arch = "wasm32"))]
pub mod files;
#[cfg(not(target_arch = "wasm32"))]
pub mod metrics;
pub mod model;
pub mod optim;
pub mod params;
pub mod plot;
pub mod precision;
pub mod rng;
pub mod sample;
pub mod scaler;
#[cfg(not(target_arch = "wasm32"))]
pub mod shards;
pub mod tokenizer;
pub mod trainer;

/// A line on stderr. A stderr that cannot be written (a full disk under a redirect, a closed
/// pipe) is no reason to stop a run, so unlike `eprintln!` this never panics.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn note(line: impl std::fmt::Display) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// What can go wrong, with messages a user can act on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A bad model or training setting.
    #[error("configuration: {0}")]
    Config(String),
    /// A problem with the training text.
    #[error("data: {0}")]
    Data(String),
    /// A checkpoint that cannot be used: missing, of another model, or a `--checkpoint` path
    /// that cannot be written.
    #[error("checkpoint: {0}")]
    Checkpoint(String),
    /// A damaged checkpoint file: its checksum does not match, it does not parse, or its
    /// metadata is out of bounds.
    #[error("damaged checkpoint: {0}")]
    Corrupt(String),
    /// Writing a checkpoint (or the loss curve) failed: a full disk, an I/O error.
    #[error("saving: {0}")]
    Save(String),
    /// Another run holds the checkpoint's lock.
    #[error("checkpoint in use: {0}")]
    Busy(String),
    /// The training state holds NaN or infinite values (so it is not written over a checkpoint).
    #[error("the training diverged: {0}")]
    Diverged(String),
    /// A data-parallel run cannot go on: another rank died, hangs or disagrees, or the
    /// launcher's settings are wrong ([`dist`]).
    #[error("data-parallel run: {0}")]
    Dist(String),
    /// The GPU runtime failed.
    #[error("GPU: {0}")]
    Gpu(#[from] kernels::Error),
}
