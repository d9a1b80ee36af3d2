//! Data-parallel training over several GPUs: one process per GPU, each a rank.

use crate::Error;
use kernels::{Buffer, Gpu};

/// `Result` with the trainer's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(all(feature = "nccl", target_os = "linux"))]
pub mod nccl;

/// Which process this is among the ranks of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rank {
    /// This process's rank, `0..world`.
    pub rank: usize,
    /// The number of ranks.
    pub world: usize,
    /// The rank among the ranks of this machine (which GPU of it to use).
    pub local_rank: usize,
}

/// What the ranks of a run do together.
pub trait Collective {
    /// This process's rank.
    fn rank(&self) -> Rank;
    /// Averages the gradients over the ranks in place; every rank ends with the same bits.
    fn average_gradients(&mut self, gpu: &Gpu, grads: &[&Buffer<f32>]) -> Result<()>;
    /// Sums small host values (losses, flags, checksums) over the ranks.
    fn sum_f64(&mut self, values: &mut [f64]) -> Result<()>;
    /// Makes every rank's `bytes` equal to `root`'s.
    fn broadcast(&mut self, root: usize, bytes: &mut Vec<u8>) -> Result<()>;
    /// Returns once every rank has called it.
    fn barrier(&mut self) -> Result<()>;
}
