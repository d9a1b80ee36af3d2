//! A host-staged [`Collective`] through MPI (feature `mpi`): the gradients are read back, summed
//! with `MPI_Ireduce` onto rank 0, scaled there, and sent to every rank with `MPI_Ibcast`, so
//! every rank gets rank 0's bits whatever order the library's reduction adds in.
//!
//! The library is loaded when the run starts (`dlopen`), not linked: the build needs no MPI
//! (no headers, no `mpicc`, no libclang for bindings), and the default build of the trainer
//! carries none of this. `KERNELS_MPI_LIBRARY` names the library; otherwise Open MPI's
//! `libmpi.so.40` and MPICH's `libmpi.so.12` are tried. The two differ in how handles are
//! spelled: Open MPI's are addresses of exported objects (`&ompi_mpi_comm_world`), MPICH's are
//! fixed integers of its ABI; both fit a register-sized argument, which is how they are passed.
//!
//! Every wait is a poll (`MPI_Test`) with a deadline, so a rank that hangs is reported after
//! the timeout instead of blocking forever, and a stop asked for meanwhile (the launcher ending
//! the job after a rank died) ends the wait at once with a message saying so.

use super::{Collective, Rank, read_gradients, write_gradients};
use crate::Error;
use kernels::{Buffer, Gpu};
use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW, Symbol};
use std::ffi::{c_int, c_void};
use std::time::{Duration, Instant};

/// An MPI handle (communicator, datatype, operation, request) as either ABI passes it.
type Handle = usize;

type InitFn = unsafe extern "C" fn(*mut c_int, *mut *mut *mut i8) -> c_int;
type FlagFn = unsafe extern "C" fn(*mut c_int) -> c_int;
type FinalizeFn = unsafe extern "C" fn() -> c_int;
type CommIntFn = unsafe extern "C" fn(Handle, *mut c_int) -> c_int;
type IreduceFn =
    unsafe extern "C" fn(*const c_void, *mut c_void, c_int, Handle, Handle, c_int, Handle, *mut Handle) -> c_int;
type IbcastFn = unsafe extern "C" fn(*mut c_void, c_int, Handle, c_int, Handle, *mut Handle) -> c_int;
type IbarrierFn = unsafe extern "C" fn(Handle, *mut Handle) -> c_int;
type TestFn = unsafe extern "C" fn(*mut Handle, *mut c_int, *mut c_void) -> c_int;

/// The most elements one call moves (MPI counts are C `int`s).
const CHUNK: usize = 1 << 28;

struct Api {
    // Kept loaded while the functions below are used.
    _lib: Library,
    finalize: FinalizeFn,
    finalized: FlagFn,
    ireduce: IreduceFn,
    ibcast: IbcastFn,
    ibarrier: IbarrierFn,
    test: TestFn,
    world: Handle,
    float: Handle,
    double: Handle,
    byte: Handle,
    sum: Handle,
}

fn load() -> Result<(Api, InitFn, FlagFn, CommIntFn, CommIntFn), Error> {
    let asked = std::env::var("KERNELS_MPI_LIBRARY").ok().filter(|s| !s.is_empty());
    let names: Vec<String> = match &asked {
        Some(n) => vec![n.clone()],
        None => ["libmpi.so.40", "libmpi.so.12", "libmpi.so"].iter().map(|s| s.to_string()).collect(),
    };
    let mut tried = Vec::new();
    // MPI's components are plugins that look up the library's symbols: it must be global.
    let lib = names.iter().find_map(|n| match unsafe { Library::open(Some(n), RTLD_NOW | RTLD_GLOBAL) } {
        Ok(l) => Some(l),
        Err(e) => {
            tried.push(format!("{n}: {e}"));
            None
        }
    });
    let Some(lib) = lib else {
        return Err(Error::Dist(format!(
            "cannot load MPI ({}): install Open MPI (`apt-get install openmpi-bin`) or MPICH, or set KERNELS_MPI_LIBRARY to its libmpi",
            tried.join("; ")
        )));
    };
    let missing = |name: &str, e: libloading::Error| Error::Dist(format!("the MPI library has no {name}: {e}"));
    // SAFETY: each symbol is looked up with the C signature the MPI standard gives it.
    unsafe {
        macro_rules! f {
            ($name:literal, $t:ty) => {{
                let s: Symbol<$t> = lib.get(concat!($name, "\0").as_bytes()).map_err(|e| missing($name, e))?;
                *s
            }};
        }
        let init = f!("MPI_Init", InitFn);
        let initialized = f!("MPI_Initialized", FlagFn);
        let rank = f!("MPI_Comm_rank", CommIntFn);
        let size = f!("MPI_Comm_size", CommIntFn);
        let finalize = f!("MPI_Finalize", FinalizeFn);
        let finalized = f!("MPI_Finalized", FlagFn);
        let ireduce = f!("MPI_Ireduce", IreduceFn);
        let ibcast = f!("MPI_Ibcast", IbcastFn);
        let ibarrier = f!("MPI_Ibarrier", IbarrierFn);
        let test = f!("MPI_Test", TestFn);
        let object = |name: &str| -> Option<Handle> {
            let s: Symbol<*mut c_void> = lib.get(format!("{name}\0").as_bytes()).ok()?;
            Some(*s as Handle)
        };
        let (world, float, double, byte, sum) = match object("ompi_mpi_comm_world") {
            // Open MPI: the handles are the predefined objects' addresses.
            Some(world) => {
                let o = |name: &str| object(name).ok_or_else(|| Error::Dist(format!("Open MPI without {name}")));
                (world, o("ompi_mpi_float")?, o("ompi_mpi_double")?, o("ompi_mpi_byte")?, o("ompi_mpi_op_sum")?)
            }
            // MPICH and its derivatives: the constants of its ABI.
            None => (0x4400_0000, 0x4c00_040a, 0x4c00_080b, 0x4c00_010d, 0x5800_0003),
        };
        let api =
            Api { _lib: lib, finalize, finalized, ireduce, ibcast, ibarrier, test, world, float, double, byte, sum };
        Ok((api, init, initialized, rank, size))
    }
}

/// The ranks of an `mpirun` job ([`super::mpi`]).
pub struct MpiCollective {
    api: Api,
    rank: Rank,
    timeout: Duration,
    interrupt: Option<super::Interrupt>,
    broken: Option<String>,
}

impl std::fmt::Debug for MpiCollective {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpiCollective").field("rank", &self.rank).finish_non_exhaustive()
    }
}

impl MpiCollective {
    /// Initialises MPI and checks that its rank and size are the launcher's (`rank`, from the
    /// environment, which also gives the local rank MPI does not).
    pub fn init(rank: Rank, timeout: Duration) -> Result<MpiCollective, Error> {
        let (api, init, initialized, comm_rank, comm_size) = load()?;
        let (mut r, mut n, mut done) = (0, 0, 0);
        // SAFETY: MPI's calls with pointers to locals; MPI_Init once per process.
        unsafe {
            initialized(&mut done);
            if done == 0 && init(std::ptr::null_mut(), std::ptr::null_mut()) != 0 {
                return Err(Error::Dist("MPI_Init failed".into()));
            }
            comm_rank(api.world, &mut r);
            comm_size(api.world, &mut n);
        }
        if (r as usize, n as usize) != (rank.rank, rank.world) {
            return Err(Error::Dist(format!(
                "MPI says rank {r} of {n}, the launcher's environment {}: was the trainer started by another MPI than the library loaded? (KERNELS_MPI_LIBRARY)",
                rank
            )));
        }
        Ok(MpiCollective { api, rank, timeout, interrupt: None, broken: None })
    }

    /// A check made while waiting: `Some(why)` ends the wait with `why` (a signal asked the run
    /// to stop: under mpirun, the launcher ending the job because a rank died).
    pub fn set_interrupt(&mut self, check: super::Interrupt) {
        self.interrupt = Some(check);
    }

    fn check(&self, code: c_int, call: &str) -> Result<(), Error> {
        if code != 0 {
            return Err(Error::Dist(format!("{call} failed with MPI error {code}")));
        }
        Ok(())
    }

    fn start(&self) -> Result<(), Error> {
        match &self.broken {
            Some(why) => Err(Error::Dist(format!("an earlier collective failed ({why})"))),
            None => Ok(()),
        }
    }

    /// Polls `request` until it completes, the timeout passes, or the interrupt fires.
    fn wait(&mut self, mut request: Handle, what: &str) -> Result<(), Error> {
        let started = Instant::now();
        let mut status = [0u64; 8];
        let mut polls = 0u32;
        loop {
            let mut flag: c_int = 0;
            // SAFETY: a live request, a flag and a status larger than either ABI's.
            let code = unsafe { (self.api.test)(&mut request, &mut flag, status.as_mut_ptr().cast()) };
            self.check(code, "MPI_Test")?;
            if flag != 0 {
                return Ok(());
            }
            if let Some(why) = self.interrupt.as_ref().and_then(|f| f()) {
                let m = format!("{why} while rank {} waited for the other ranks in {what}", self.rank.rank);
                self.broken = Some(m.clone());
                return Err(Error::Dist(m));
            }
            if started.elapsed() >= self.timeout {
                let m = format!(
                    "rank {} waited {} s for the other ranks in {what} (--collective-timeout): a rank died, hangs or is far behind",
                    self.rank.rank,
                    self.timeout.as_secs_f64()
                );
                self.broken = Some(m.clone());
                return Err(Error::Dist(m));
            }
            // Spin briefly (a step's collectives are short), then yield the core.
            polls += 1;
            if polls > 200 {
                std::thread::sleep(Duration::from_micros(500));
            }
        }
    }

    /// `values` summed over the ranks onto rank 0 (in `out` there), chunk by chunk.
    fn reduce<T>(&mut self, values: &[T], out: &mut [T], datatype: Handle, what: &str) -> Result<(), Error> {
        for (k, chunk) in values.chunks(CHUNK).enumerate() {
            let at = k * CHUNK;
            let recv: *mut c_void =
                if self.rank.rank == 0 { out[at..at + chunk.len()].as_mut_ptr().cast() } else { std::ptr::null_mut() };
            let mut request: Handle = 0;
            // SAFETY: buffers of `chunk.len()` elements of `datatype` that outlive the wait below.
            let code = unsafe {
                (self.api.ireduce)(
                    chunk.as_ptr().cast(),
                    recv,
                    chunk.len() as c_int,
                    datatype,
                    self.api.sum,
                    0,
                    self.api.world,
                    &mut request,
                )
            };
            self.check(code, "MPI_Ireduce")?;
            self.wait(request, what)?;
        }
        Ok(())
    }

    /// Rank 0's `values` on every rank, chunk by chunk.
    fn send_from_zero<T>(&mut self, values: &mut [T], datatype: Handle, what: &str) -> Result<(), Error> {
        self.bcast(0, values, datatype, what)
    }

    fn bcast<T>(&mut self, root: usize, values: &mut [T], datatype: Handle, what: &str) -> Result<(), Error> {
        for chunk in values.chunks_mut(CHUNK) {
            let mut request: Handle = 0;
            // SAFETY: a buffer of `chunk.len()` elements that outlives the wait below.
            let code = unsafe {
                (self.api.ibcast)(
                    chunk.as_mut_ptr().cast(),
                    chunk.len() as c_int,
                    datatype,
                    root as c_int,
                    self.api.world,
                    &mut request,
                )
            };
            self.check(code, "MPI_Ibcast")?;
            self.wait(request, what)?;
        }
        Ok(())
    }
}

impl Drop for MpiCollective {
    fn drop(&mut self) {
        // After a failed collective the others may never join a finalize: exit without one,
        // which makes mpirun end the job.
        if self.broken.is_some() {
            return;
        }
        let mut done = 0;
        // SAFETY: MPI calls on an initialised library.
        unsafe {
            (self.api.finalized)(&mut done);
            if done == 0 {
                (self.api.finalize)();
            }
        }
    }
}

impl Collective for MpiCollective {
    fn rank(&self) -> Rank {
        self.rank
    }

    fn average_gradients(&mut self, gpu: &Gpu, grads: &[&Buffer<f32>]) -> Result<(), Error> {
        self.start()?;
        let mine = read_gradients(gpu, grads)?;
        let what = "the all-reduce of the gradients";
        let mut all = vec![0.0f32; if self.rank.rank == 0 { mine.len() } else { 0 }];
        self.reduce(&mine, &mut all, self.api.float, what)?;
        let mut all = if self.rank.rank == 0 {
            let scale = 1.0 / self.rank.world as f32;
            all.iter_mut().for_each(|g| *g *= scale);
            all
        } else {
            mine
        };
        self.send_from_zero(&mut all, self.api.float, what)?;
        write_gradients(gpu, grads, &all)
    }

    fn sum_f64(&mut self, values: &mut [f64]) -> Result<(), Error> {
        self.start()?;
        let mine = values.to_vec();
        self.reduce(&mine, values, self.api.double, "a sum over the ranks")?;
        self.send_from_zero(values, self.api.double, "a sum over the ranks")
    }

    fn broadcast(&mut self, root: usize, bytes: &mut Vec<u8>) -> Result<(), Error> {
        self.start()?;
        super::check_root(root, self.rank.world)?;
        let what = format!("a broadcast from rank {root}");
        let mut len = [bytes.len() as u64];
        self.bcast(root, &mut len, self.api.byte_of_u64(), &what)?;
        bytes.resize(len[0] as usize, 0);
        self.bcast(root, bytes, self.api.byte, &what)
    }

    fn barrier(&mut self) -> Result<(), Error> {
        self.start()?;
        let mut request: Handle = 0;
        // SAFETY: the world communicator and a request slot.
        let code = unsafe { (self.api.ibarrier)(self.api.world, &mut request) };
        self.check(code, "MPI_Ibarrier")?;
        self.wait(request, "a barrier")
    }
}

impl Api {
    /// A u64 travels as a double's 8 bytes: MPI's integer types differ between the ABIs, and a
    /// broadcast copies bits without arithmetic.
    fn byte_of_u64(&self) -> Handle {
        self.double
    }
}
