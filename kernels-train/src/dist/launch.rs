//! Which rank a process is, from the environment its launcher sets: torchrun (`RANK`,
//! `WORLD_SIZE`, `LOCAL_RANK`), Open MPI's `mpirun` (`OMPI_COMM_WORLD_*`), MPICH's Hydra
//! (`PMI_RANK`, `PMI_SIZE`, `MPI_LOCALRANKID`) and Slurm's `srun` (`SLURM_PROCID`,
//! `SLURM_NTASKS`, `SLURM_LOCALID`); the rendezvous address (rank 0's host and a port) from
//! `MASTER_ADDR` and `MASTER_PORT`, as torchrun sets them.
//!
//! Where several launchers' variables are set, the innermost launcher wins: torchrun or mpirun
//! started inside a Slurm allocation see Slurm's variables of the allocation too, which describe
//! the batch script, not the processes they started.

use super::Rank;
use crate::Error;

/// The port the rendezvous listens on when `MASTER_PORT` is not set (torchrun's default).
pub const DEFAULT_PORT: u16 = 29500;

/// The launcher a process was started by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launcher {
    /// torchrun (or anything that sets `RANK` and `WORLD_SIZE`).
    Torchrun,
    /// Open MPI's `mpirun`.
    OpenMpi,
    /// MPICH's (Hydra's) `mpiexec`.
    Mpich,
    /// Slurm's `srun`.
    Slurm,
}

impl Launcher {
    /// The launcher's name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Launcher::Torchrun => "torchrun",
            Launcher::OpenMpi => "Open MPI's mpirun",
            Launcher::Mpich => "MPICH's mpiexec",
            Launcher::Slurm => "srun",
        }
    }

    /// Whether the processes are an MPI job (MPI can connect them without a rendezvous address).
    pub fn is_mpi(self) -> bool {
        matches!(self, Launcher::OpenMpi | Launcher::Mpich)
    }
}

/// What the launcher said: the rank, who said it, and where rank 0 listens (if it said).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// This process's rank.
    pub rank: Rank,
    /// The launcher whose variables gave it.
    pub launcher: Launcher,
    /// `host:port` of the rendezvous (rank 0 listens there), where known.
    pub address: Option<String>,
}

/// The launch of this process from its environment; `None` when no launcher's variables are
/// set (a run of one process).
pub fn from_env() -> Result<Option<Launch>, Error> {
    from_lookup(|name| std::env::var(name).ok())
}

/// [`from_env`] over any source of variables.
pub fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Result<Option<Launch>, Error> {
    let given = |name: &str| var(name).filter(|v| !v.trim().is_empty());
    // (launcher, rank, world, local rank) variable names, innermost launcher first.
    const LAUNCHERS: [(Launcher, &str, &str, &str); 4] = [
        (Launcher::Torchrun, "RANK", "WORLD_SIZE", "LOCAL_RANK"),
        (Launcher::OpenMpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
        (Launcher::Mpich, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
        (Launcher::Slurm, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
    ];
    let Some(&(launcher, rank_var, world_var, local_var)) =
        LAUNCHERS.iter().find(|(_, rank, _, _)| given(rank).is_some())
    else {
        return Ok(None);
    };
    let number = |name: &str| -> Result<Option<usize>, Error> {
        given(name)
            .map(|v| {
                v.trim().parse::<usize>().map_err(|_| {
                    Error::Dist(format!("{name}={v:?} (set by {}) is not a whole number", launcher.name()))
                })
            })
            .transpose()
    };
    let rank = number(rank_var)?.unwrap_or_default();
    // Slurm spells the task count two ways.
    let world = match number(world_var)? {
        Some(w) => w,
        None if launcher == Launcher::Slurm => number("SLURM_NPROCS")?.ok_or_else(|| missing(launcher, world_var))?,
        None => return Err(missing(launcher, world_var)),
    };
    // Without a local rank (RANK and WORLD_SIZE set by hand), the processes are taken to share
    // one machine.
    let local_rank = number(local_var)?.unwrap_or(rank);
    if world == 0 || rank >= world || local_rank >= world {
        return Err(Error::Dist(format!(
            "{} says {rank_var}={rank}, {world_var}={world}, {local_var}={local_rank}: a rank must be below the world size",
            launcher.name()
        )));
    }
    let port = match given("MASTER_PORT") {
        None => DEFAULT_PORT,
        Some(p) => p
            .trim()
            .parse::<u16>()
            .ok()
            .filter(|&p| p > 0)
            .ok_or_else(|| Error::Dist(format!("MASTER_PORT={p:?} is not a port number (1 … 65535)")))?,
    };
    // Slurm does not set MASTER_ADDR; the host srun was started from is in the allocation.
    let host = given("MASTER_ADDR")
        .or_else(|| (launcher == Launcher::Slurm).then(|| given("SLURM_LAUNCH_NODE_IPADDR")).flatten());
    let address = host.map(|h| {
        let h = h.trim();
        // An IPv6 literal takes brackets before the port.
        if h.contains(':') && !h.starts_with('[') { format!("[{h}]:{port}") } else { format!("{h}:{port}") }
    });
    Ok(Some(Launch { rank: Rank { rank, world, local_rank }, launcher, address }))
}

fn missing(launcher: Launcher, var: &str) -> Error {
    Error::Dist(format!("{} set a rank but not {var}, the number of processes", launcher.name()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let pairs: Vec<(String, String)> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |name| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    fn launch(pairs: &[(&str, &str)]) -> Launch {
        from_lookup(env(pairs)).unwrap().unwrap()
    }

    #[test]
    fn no_launcher_is_a_run_of_one() {
        assert_eq!(from_lookup(env(&[("HOME", "/root")])).unwrap(), None);
        assert_eq!(from_lookup(env(&[("RANK", " ")])).unwrap(), None);
    }

    #[test]
    fn torchrun() {
        let l = launch(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_RANK", "1"),
            ("MASTER_ADDR", "node7"),
            ("MASTER_PORT", "29400"),
        ]);
        assert_eq!(l.rank, Rank { rank: 3, world: 8, local_rank: 1 });
        assert_eq!((l.launcher, l.address.as_deref()), (Launcher::Torchrun, Some("node7:29400")));
        // RANK and WORLD_SIZE by hand: one machine, torchrun's default port.
        let l = launch(&[("RANK", "1"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "::1")]);
        assert_eq!(l.rank, Rank { rank: 1, world: 2, local_rank: 1 });
        assert_eq!(l.address.as_deref(), Some("[::1]:29500"));
    }

    #[test]
    fn open_mpi_and_mpich() {
        let l = launch(&[
            ("OMPI_COMM_WORLD_RANK", "5"),
            ("OMPI_COMM_WORLD_SIZE", "6"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "2"),
        ]);
        assert_eq!(
            (l.rank, l.launcher, l.address),
            (Rank { rank: 5, world: 6, local_rank: 2 }, Launcher::OpenMpi, None)
        );
        assert!(l.launcher.is_mpi());
        let l = launch(&[("PMI_RANK", "1"), ("PMI_SIZE", "4"), ("MPI_LOCALRANKID", "0")]);
        assert_eq!((l.rank, l.launcher), (Rank { rank: 1, world: 4, local_rank: 0 }, Launcher::Mpich));
    }

    #[test]
    fn slurm_and_the_innermost_launcher_wins() {
        let slurm = [
            ("SLURM_PROCID", "0"),
            ("SLURM_NPROCS", "16"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_LAUNCH_NODE_IPADDR", "10.0.0.4"),
        ];
        let l = launch(&slurm);
        assert_eq!((l.rank, l.launcher), (Rank { rank: 0, world: 16, local_rank: 0 }, Launcher::Slurm));
        assert_eq!(l.address.as_deref(), Some("10.0.0.4:29500"));
        // mpirun inside the allocation: its variables, not the batch script's.
        let mut inner = slurm.to_vec();
        inner.extend([
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "3"),
        ]);
        assert_eq!(launch(&inner).rank, Rank { rank: 3, world: 4, local_rank: 3 });
        inner.extend([("RANK", "2"), ("WORLD_SIZE", "4"), ("LOCAL_RANK", "0"), ("MASTER_ADDR", "h")]);
        let l = launch(&inner);
        assert_eq!((l.rank.rank, l.launcher, l.address.as_deref()), (2, Launcher::Torchrun, Some("h:29500")));
    }

    #[test]
    fn inconsistent_variables_are_errors_that_name_them() {
        let e = |pairs: &[(&str, &str)]| from_lookup(env(pairs)).unwrap_err().to_string();
        assert!(e(&[("RANK", "2"), ("WORLD_SIZE", "2")]).contains("RANK=2, WORLD_SIZE=2"));
        assert!(e(&[("RANK", "0")]).contains("not WORLD_SIZE"));
        assert!(e(&[("RANK", "one"), ("WORLD_SIZE", "2")]).contains("RANK=\"one\""));
        assert!(e(&[("SLURM_PROCID", "0")]).contains("not SLURM_NTASKS"));
        assert!(e(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_PORT", "70000")]).contains("MASTER_PORT=\"70000\""));
        assert!(e(&[("PMI_RANK", "0"), ("PMI_SIZE", "0")]).contains("below the world size"));
    }
}
