//! A LLaMA-style decoder trained entirely on the GPU with the `kernels` library: byte tokens,
//! tied embedding, RMSNorm, rotary grouped-query attention, SwiGLU, cross-entropy, global-norm
//! clipping and AdamW — forward, backward and update recorded into one submission per step.

pub mod checkpoint;
pub mod cli;
pub mod config;
pub mod data;
pub mod model;
pub mod params;
pub mod plot;
pub mod rng;
pub mod sample;
pub mod trainer;

/// What can go wrong, with messages a user can act on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A bad model or training setting.
    #[error("configuration: {0}")]
    Config(String),
    /// A problem with the training text.
    #[error("data: {0}")]
    Data(String),
    /// A problem reading or writing a checkpoint.
    #[error("checkpoint: {0}")]
    Checkpoint(String),
    /// The GPU runtime failed.
    #[error("GPU: {0}")]
    Gpu(#[from] kernels::Error),
}
