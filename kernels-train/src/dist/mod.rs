//! Data-parallel training: one process per GPU, each a rank of the run. The launcher (torchrun,
//! Slurm's `srun`, Open MPI's or MPICH's `mpirun`) says which rank a process is ([`launch`]);
//! a [`Collective`] moves what the ranks must share: the gradients of every step (averaged, so
//! that every rank applies the same update and the weights stay identical), a few host values
//! (the loss, the loss scaler's overflow flag, whether to stop) and checksums of the weights.
//!
//! Implementations: [`Single`] (one process, every call a no-op), [`tcp::TcpCollective`] (over
//! the launcher's rendezvous address, host-staged, for launchers without MPI),
//! `mpi::MpiCollective` (feature `mpi`: Open MPI or MPICH loaded at run time, host-staged), and
//! NCCL on NVIDIA GPUs (`nccl`). Every blocking call is bounded by a timeout: a rank that dies
//! or hangs ends the others with an [`Error::Dist`] that names it, instead of a hang.

pub mod launch;
#[cfg(all(feature = "mpi", unix))]
pub mod mpi;
#[cfg(all(feature = "nccl", target_os = "linux"))]
pub mod nccl;
#[cfg(not(target_arch = "wasm32"))]
pub mod tcp;

use crate::Error;
use kernels::{Buffer, Gpu};

pub use launch::Launch;

/// Which process of a data-parallel run this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rank {
    /// This process's rank, `0 … world − 1`; rank 0 writes the checkpoints, logs and metrics.
    pub rank: usize,
    /// How many processes take part.
    pub world: usize,
    /// This process's rank among those on its machine: the GPU it opens.
    pub local_rank: usize,
}

impl Rank {
    /// A run of one process.
    pub const SINGLE: Rank = Rank { rank: 0, world: 1, local_rank: 0 };

    /// Whether this rank writes the run's files (checkpoints, logs, metrics).
    pub fn writes(&self) -> bool {
        self.rank == 0
    }
}

impl std::fmt::Display for Rank {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "rank {} of {} (local rank {})", self.rank, self.world, self.local_rank)
    }
}

/// What the ranks of a data-parallel run exchange. Every rank calls the same methods in the same
/// order (a collective call returns only when every rank has made it), and every call is bounded
/// by a timeout.
pub trait Collective {
    /// This process's rank.
    fn rank(&self) -> Rank;
    /// Averages the gradients over the ranks in place; every rank ends with the same bits.
    fn average_gradients(&mut self, gpu: &Gpu, grads: &[&Buffer<f32>]) -> Result<(), Error>;
    /// Sums small host values (losses, flags, checksums) over the ranks; every rank ends with
    /// the same bits.
    fn sum_f64(&mut self, values: &mut [f64]) -> Result<(), Error>;
    /// Replaces `bytes` on every rank with `root`'s.
    fn broadcast(&mut self, root: usize, bytes: &mut Vec<u8>) -> Result<(), Error>;
    /// Returns when every rank has called it.
    fn barrier(&mut self) -> Result<(), Error>;
}

/// One process: nothing to exchange.
#[derive(Clone, Copy, Debug, Default)]
pub struct Single;

impl Collective for Single {
    fn rank(&self) -> Rank {
        Rank::SINGLE
    }
    fn average_gradients(&mut self, _: &Gpu, _: &[&Buffer<f32>]) -> Result<(), Error> {
        Ok(())
    }
    fn sum_f64(&mut self, _: &mut [f64]) -> Result<(), Error> {
        Ok(())
    }
    fn broadcast(&mut self, root: usize, _: &mut Vec<u8>) -> Result<(), Error> {
        check_root(root, 1)
    }
    fn barrier(&mut self) -> Result<(), Error> {
        Ok(())
    }
}

fn check_root(root: usize, world: usize) -> Result<(), Error> {
    if root >= world {
        return Err(Error::Dist(format!("a broadcast from rank {root} in a run of {world}")));
    }
    Ok(())
}

/// The gradients of every buffer in `grads`, read back and laid end to end (the host staging of
/// [`Collective::average_gradients`]).
#[cfg(not(target_arch = "wasm32"))]
pub fn read_gradients(gpu: &Gpu, grads: &[&Buffer<f32>]) -> Result<Vec<f32>, Error> {
    let mut all = Vec::with_capacity(grads.iter().map(|g| g.len()).sum());
    for g in grads {
        all.extend_from_slice(&g.read(gpu)?);
    }
    Ok(all)
}

/// Writes `all` ([`read_gradients`]'s layout) back into the buffers.
#[cfg(not(target_arch = "wasm32"))]
pub fn write_gradients(gpu: &Gpu, grads: &[&Buffer<f32>], all: &[f32]) -> Result<(), Error> {
    let total: usize = grads.iter().map(|g| g.len()).sum();
    if all.len() != total {
        return Err(Error::Dist(format!("{} averaged gradients for buffers of {total}", all.len())));
    }
    let mut at = 0;
    for g in grads {
        let n = g.len();
        // Through the queue: the trait hands out shared references (the gradients stay the
        // model's), and a queue write is ordered before the update submitted after it.
        gpu.queue().write_buffer(g.raw(), g.byte_offset(), bytemuck::cast_slice(&all[at..at + n]));
        at += n;
    }
    Ok(())
}

/// The sum of `parts` (one slice per rank, in rank order) divided by their count, element by
/// element: the same additions in the same order on every host, so every rank that computes it
/// from the same parts gets the same bits.
pub fn mean_in_rank_order(parts: &[&[f32]], out: &mut [f32]) {
    let scale = 1.0 / parts.len() as f32;
    for (k, o) in out.iter_mut().enumerate() {
        let mut s = 0.0f32;
        for p in parts {
            s += p[k];
        }
        *o = s * scale;
    }
}

/// Something checked while a collective waits: `Some(why)` ends the wait with `why` (a signal
/// that asked the run to stop).
pub type Interrupt = Box<dyn Fn() -> Option<String>>;

/// The collective of a run started by `launch` (`None`: one process): `kind` picks the
/// implementation ([`CollectiveKind`]); `timeout` bounds every call; `interrupt` is checked
/// while MPI waits (a TCP wait ends by itself when a peer's process ends).
#[cfg(not(target_arch = "wasm32"))]
pub fn connect(
    launch: Option<&Launch>,
    kind: CollectiveKind,
    timeout: std::time::Duration,
    interrupt: Option<Interrupt>,
) -> Result<Box<dyn Collective>, Error> {
    let Some(launch) = launch.filter(|l| l.rank.world > 1) else { return Ok(Box::new(Single)) };
    let kind = match kind {
        CollectiveKind::Auto if launch.launcher.is_mpi() && cfg!(all(feature = "mpi", unix)) => CollectiveKind::Mpi,
        CollectiveKind::Auto => CollectiveKind::Tcp,
        k => k,
    };
    match kind {
        CollectiveKind::Mpi => connect_mpi(launch, timeout, interrupt),
        CollectiveKind::Nccl if !cfg!(all(feature = "nccl", target_os = "linux")) => Err(Error::Dist(
            "--collective nccl needs a trainer built with NCCL: `cargo build --release -p kernels-train --features nccl` (Linux, NVIDIA)".into(),
        )),
        // Tcp, and Nccl's meeting: the ranks meet over TCP; `on_gpu` moves to NCCL once the
        // GPU is open.
        _ => {
            let Some(address) = launch.address.clone() else {
                return Err(Error::Dist(format!(
                    "{} of a run started by {}, with no rendezvous address: set MASTER_ADDR and MASTER_PORT (rank 0's host and a free port){}",
                    launch.rank,
                    launch.launcher.name(),
                    if launch.launcher.is_mpi() { ", or build with `--features mpi` to use MPI" } else { "" }
                )));
            };
            Ok(Box::new(tcp::TcpCollective::connect(launch.rank, &address, timeout)?))
        }
    }
}

#[cfg(all(not(target_arch = "wasm32"), feature = "mpi", unix))]
fn connect_mpi(
    launch: &Launch,
    timeout: std::time::Duration,
    interrupt: Option<Interrupt>,
) -> Result<Box<dyn Collective>, Error> {
    let mut c = mpi::MpiCollective::init(launch.rank, timeout)?;
    if let Some(i) = interrupt {
        c.set_interrupt(i);
    }
    Ok(Box::new(c))
}

#[cfg(all(not(target_arch = "wasm32"), not(all(feature = "mpi", unix))))]
fn connect_mpi(_: &Launch, _: std::time::Duration, _: Option<Interrupt>) -> Result<Box<dyn Collective>, Error> {
    Err(Error::Dist(
        "this trainer was built without MPI: build it with `cargo build --release -p kernels-train --features mpi`, or use --collective tcp with MASTER_ADDR and MASTER_PORT".into(),
    ))
}

/// The collective a run keeps once its GPU is open. For [`CollectiveKind::Nccl`]: rank 0 makes
/// NCCL's unique id and sends it through `meeting` (the host collective the ranks met with),
/// every rank joins the communicator on `gpu`, and NCCL carries everything from then on
/// (gradients GPU to GPU, the host values through small device buffers). Any other kind, and a
/// run of one process, keep `meeting`.
pub fn on_gpu(meeting: Box<dyn Collective>, kind: CollectiveKind, gpu: &Gpu) -> Result<Box<dyn Collective>, Error> {
    if kind != CollectiveKind::Nccl || meeting.rank().world <= 1 {
        return Ok(meeting);
    }
    nccl_on_gpu(meeting, gpu)
}

#[cfg(all(feature = "nccl", target_os = "linux"))]
fn nccl_on_gpu(mut meeting: Box<dyn Collective>, gpu: &Gpu) -> Result<Box<dyn Collective>, Error> {
    let rank = meeting.rank();
    let mut id = if rank.rank == 0 { nccl::NcclId::new()?.as_bytes().to_vec() } else { Vec::new() };
    meeting.broadcast(0, &mut id)?;
    let id = nccl::NcclId::from_bytes(&id)?;
    Ok(Box::new(nccl::NcclCollective::new(gpu, rank, &id)?))
}

#[cfg(not(all(feature = "nccl", target_os = "linux")))]
fn nccl_on_gpu(_: Box<dyn Collective>, _: &Gpu) -> Result<Box<dyn Collective>, Error> {
    Err(Error::Dist("this trainer was built without NCCL (`--features nccl`)".into()))
}

/// Which implementation of [`Collective`] a multi-process run uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CollectiveKind {
    /// MPI where the launcher is `mpirun` and the trainer was built with MPI; TCP otherwise.
    #[default]
    Auto,
    /// Host-staged over TCP through rank 0 ([`tcp::TcpCollective`]).
    Tcp,
    /// Host-staged through MPI (feature `mpi`).
    Mpi,
    /// GPU to GPU through NCCL (feature `nccl`, NVIDIA): the ranks meet over TCP, then
    /// [`on_gpu`] joins NCCL's communicator.
    Nccl,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mean_adds_in_rank_order_and_scales_once() {
        let (a, b, c) = ([1.0f32, 1e8, -3.0], [2.0f32, 1.0, 0.5], [3.0f32, -1e8, 0.25]);
        let mut out = [f32::NAN; 3];
        mean_in_rank_order(&[&a, &b, &c], &mut out);
        assert_eq!(out[0], 2.0);
        // (1e8 + 1) rounds to 1e8 in f32, then − 1e8: the order is rank order, not another.
        assert_eq!(out[1], ((1e8f32 + 1.0) - 1e8) * (1.0 / 3.0));
        assert_eq!(out[2], (-3.0f32 + 0.5 + 0.25) * (1.0 / 3.0));
    }

    #[test]
    fn one_process_exchanges_nothing() {
        let mut s = Single;
        let mut v = [1.5, -2.0];
        s.sum_f64(&mut v).unwrap();
        assert_eq!(v, [1.5, -2.0]);
        let mut bytes = vec![7u8];
        s.broadcast(0, &mut bytes).unwrap();
        assert_eq!(bytes, [7]);
        assert!(s.broadcast(1, &mut bytes).is_err());
        assert_eq!(s.rank(), Rank::SINGLE);
    }
}
