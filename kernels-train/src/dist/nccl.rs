//! Gradients averaged with NCCL, GPU to GPU, on NVIDIA GPUs (Linux, Vulkan backend).
//!
//! wgpu's buffers are Vulkan memory that CUDA cannot see, so the gradients are copied (by the
//! GPU, `copy_buffer_to_buffer`) into a bucket whose memory is exportable
//! ([`kernels::ExportableBuffer`]); CUDA imports that memory once (`cuImportExternalMemory`,
//! `cuExternalMemoryGetMappedBuffer`) and NCCL all-reduces it in place; the averages are copied
//! back. Vulkan work is ordered before NCCL by a host wait (submit, then [`Gpu::wait`]) and NCCL
//! before later Vulkan work by `cuStreamSynchronize`: both sides touch the bucket only when the
//! other has finished with it. See "NCCL interop" in `docs/DESIGN.md`.
//!
//! Nothing is needed at build time: cudarc loads the CUDA driver (`libcuda.so.1`) when the
//! first collective is made, and NCCL is loaded here, from `KERNELS_NCCL_LIB` (a file name or
//! path) or else `libnccl.so.2` (the name NCCL's own packages and PyTorch's `nvidia-nccl-cu12`
//! ship; cudarc's loader does not try it) or `libnccl.so`, through the usual library search
//! (`LD_LIBRARY_PATH`).

use super::{Collective, Rank};
use crate::Error;
use cudarc::driver::{CudaContext, CudaStream, DriverError, result, sys};
use kernels::{Buffer, Gpu};
use kernels_runtime::ExportableBuffer;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::os::fd::IntoRawFd;
use std::sync::{Arc, OnceLock};

type Result<T, E = Error> = std::result::Result<T, E>;

/// Bytes of gradients all-reduced at a time by default: large enough that NCCL runs near its
/// bandwidth, small enough that the bucket is a small part of a large model's memory.
pub const DEFAULT_BUCKET_BYTES: usize = 256 << 20;

/// The oldest NCCL with `ncclAvg` (2.10).
const MIN_NCCL_VERSION: i32 = 2_10_00;

// NCCL's ABI (nccl.h): result 0 is success; the data types and reduction operations used here.
const NCCL_SUCCESS: c_int = 0;
const NCCL_UINT8: c_int = 1;
const NCCL_FLOAT32: c_int = 7;
const NCCL_FLOAT64: c_int = 8;
const NCCL_SUM: c_int = 0;
const NCCL_AVG: c_int = 4;

/// `ncclUniqueId`: 128 opaque bytes.
#[repr(C)]
#[derive(Clone, Copy)]
struct UniqueId {
    internal: [c_char; 128],
}

type Comm = *mut c_void;
type Collective7 = unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, sys::CUstream) -> c_int;

/// The NCCL functions used here, from the library loaded at run time.
struct Nccl {
    /// What was loaded, for messages.
    name: String,
    /// `ncclGetVersion`: major × 10000 + minor × 100 + patch.
    version: i32,
    get_unique_id: unsafe extern "C" fn(*mut UniqueId) -> c_int,
    comm_init_rank: unsafe extern "C" fn(*mut Comm, c_int, UniqueId, c_int) -> c_int,
    comm_destroy: unsafe extern "C" fn(Comm) -> c_int,
    /// `ncclAllReduce(send, recv, count, type, op, comm, stream)`.
    all_reduce: Collective7,
    /// `ncclBroadcast(send, recv, count, type, root, comm, stream)`.
    broadcast: Collective7,
    get_error_string: unsafe extern "C" fn(c_int) -> *const c_char,
    // Declared last: the function pointers above point into it.
    _lib: libloading::Library,
}

impl Nccl {
    /// `Err` naming `what` and NCCL's reason unless `code` is success.
    fn check(&self, what: &str, code: c_int) -> Result<()> {
        if code == NCCL_SUCCESS {
            return Ok(());
        }
        // SAFETY: NCCL returns a static string for every result code.
        let reason = unsafe { (self.get_error_string)(code) };
        let reason = if reason.is_null() {
            "no message".into()
        } else {
            // SAFETY: non-null, NUL-terminated, static.
            unsafe { CStr::from_ptr(reason) }.to_string_lossy().into_owned()
        };
        Err(Error::Nccl(format!("{what} failed: {reason} (ncclResult_t {code})")))
    }

    /// `major.minor.patch`.
    fn version_text(&self) -> String {
        let v = self.version;
        format!("{}.{}.{}", v / 10000, v / 100 % 100, v % 100)
    }
}

/// NCCL, loaded once per process.
fn nccl() -> Result<&'static Nccl> {
    static NCCL: OnceLock<std::result::Result<Nccl, String>> = OnceLock::new();
    NCCL.get_or_init(|| {
        // NVLink SHARP (NVLS) makes NCCL create NVLink multicast objects (`cuMulticastCreate`);
        // on the machines this runs on, multicast can take every GPU of the host out of service.
        // It stays off unless the user set the variable. NCCL reads it when it initialises,
        // which is after this (every NCCL call goes through here first). Nothing in this crate
        // calls `cuMulticastCreate`.
        if std::env::var_os("NCCL_NVLS_ENABLE").is_none() {
            // SAFETY: `set_var` races with other threads reading the environment. This runs
            // once, when the first collective is made, which `NcclCollective::new` documents as
            // to be done before the run starts threads of its own; NCCL has not started any.
            unsafe { std::env::set_var("NCCL_NVLS_ENABLE", "0") };
        }
        load()
    })
    .as_ref()
    .map_err(|e| Error::Nccl(e.clone()))
}

/// The library names tried, in order.
fn candidates() -> Vec<String> {
    match std::env::var("KERNELS_NCCL_LIB") {
        Ok(name) if !name.trim().is_empty() => vec![name.trim().to_string()],
        _ => vec!["libnccl.so.2".into(), "libnccl.so".into()],
    }
}

fn load() -> std::result::Result<Nccl, String> {
    let names = candidates();
    let mut failures = Vec::new();
    for name in &names {
        // SAFETY: loading NCCL runs its initialisers, which only set up its own state.
        match unsafe { libloading::Library::new(name) } {
            Ok(lib) => return bind(name, lib),
            Err(e) => failures.push(format!("{name}: {}", with_cause(&e))),
        }
    }
    Err(format!(
        "cannot load NCCL ({}). Put the directory holding libnccl.so.2 on LD_LIBRARY_PATH (PyTorch's: \
         python3 -c \"import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))\"/lib), \
         or name the library in KERNELS_NCCL_LIB",
        failures.join("; ")
    ))
}

/// An error and what caused it (libloading keeps `dlerror`'s text in the cause).
fn with_cause(e: &dyn std::error::Error) -> String {
    match e.source() {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}

fn bind(name: &str, lib: libloading::Library) -> std::result::Result<Nccl, String> {
    fn symbol<T: Copy>(lib: &libloading::Library, name: &str, symbol: &str) -> std::result::Result<T, String> {
        // SAFETY: each symbol is given its type from nccl.h.
        unsafe { lib.get::<T>(symbol.as_bytes()) }
            .map(|s| *s)
            .map_err(|e| format!("{name} has no {symbol} (is it NCCL?): {}", with_cause(&e)))
    }
    let get_version: unsafe extern "C" fn(*mut c_int) -> c_int = symbol(&lib, name, "ncclGetVersion")?;
    let mut version = 0;
    // SAFETY: writes one int.
    let code = unsafe { get_version(&mut version) };
    if code != NCCL_SUCCESS {
        return Err(format!("{name}: ncclGetVersion failed (ncclResult_t {code})"));
    }
    let nccl = Nccl {
        name: name.to_string(),
        version,
        get_unique_id: symbol(&lib, name, "ncclGetUniqueId")?,
        comm_init_rank: symbol(&lib, name, "ncclCommInitRank")?,
        comm_destroy: symbol(&lib, name, "ncclCommDestroy")?,
        all_reduce: symbol(&lib, name, "ncclAllReduce")?,
        broadcast: symbol(&lib, name, "ncclBroadcast")?,
        get_error_string: symbol(&lib, name, "ncclGetErrorString")?,
        _lib: lib,
    };
    if version < MIN_NCCL_VERSION {
        return Err(format!("{name} is NCCL {}; averaging needs ncclAvg, NCCL 2.10 or newer", nccl.version_text()));
    }
    Ok(nccl)
}

/// A CUDA driver error as the trainer's.
fn cuda(what: &str) -> impl FnOnce(DriverError) -> Error + '_ {
    move |e| Error::Nccl(format!("CUDA: {what} failed: {e}"))
}

/// The rendezvous token of one NCCL communicator (`ncclUniqueId`): made by one rank
/// ([`NcclId::new`]) and handed to every other (as [`NcclId::as_bytes`], through the launcher's
/// rendezvous) before each makes its [`NcclCollective`].
#[derive(Clone)]
pub struct NcclId(UniqueId);

impl std::fmt::Debug for NcclId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NcclId(..)")
    }
}

impl NcclId {
    /// Bytes of an id.
    pub const BYTES: usize = 128;

    /// A new id (`ncclGetUniqueId`; loads NCCL).
    pub fn new() -> Result<NcclId> {
        let nccl = nccl()?;
        let mut id = UniqueId { internal: [0; 128] };
        // SAFETY: writes one `ncclUniqueId`.
        nccl.check("ncclGetUniqueId", unsafe { (nccl.get_unique_id)(&mut id) })?;
        Ok(NcclId(id))
    }

    /// The id's bytes, to send to the other ranks.
    pub fn as_bytes(&self) -> [u8; Self::BYTES] {
        self.0.internal.map(|c| c as u8)
    }

    /// The id another rank sent.
    pub fn from_bytes(bytes: &[u8]) -> Result<NcclId> {
        let bytes: &[u8; Self::BYTES] = bytes
            .try_into()
            .map_err(|_| Error::Nccl(format!("an NCCL id is {} bytes, not {}", Self::BYTES, bytes.len())))?;
        Ok(NcclId(UniqueId { internal: bytes.map(|b| b as c_char) }))
    }
}

/// The CUDA device of `gpu`: the one with its UUID.
fn cuda_device(gpu: &Gpu) -> Result<usize> {
    let uuid = gpu.device_uuid()?;
    // SAFETY: only asks whether the driver library can be opened.
    if !unsafe { sys::is_culib_present() } {
        return Err(Error::Nccl(
            "cannot load the CUDA driver (libcuda.so.1): NCCL needs an NVIDIA driver with CUDA".into(),
        ));
    }
    result::init().map_err(cuda("cuInit"))?;
    let count = CudaContext::device_count().map_err(cuda("cuDeviceGetCount"))?;
    let mut seen = Vec::new();
    for ordinal in 0..count {
        let device = result::device::get(ordinal).map_err(cuda("cuDeviceGet"))?;
        let id = result::device::get_uuid(device).map_err(cuda("cuDeviceGetUuid"))?;
        let id = id.bytes.map(|c| c as u8);
        if id == uuid {
            return Ok(ordinal as usize);
        }
        seen.push(hex(&id));
    }
    Err(Error::Nccl(format!(
        "no CUDA device is `{}` (Vulkan device UUID {}; CUDA devices: {})",
        gpu.report().name,
        hex(&uuid),
        if seen.is_empty() { "none".to_string() } else { seen.join(", ") }
    )))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An exportable buffer of `f32` that CUDA has imported: the same memory seen by wgpu (as a
/// [`Buffer`], through [`SharedBuffer::buffer`]) and by CUDA (at [`SharedBuffer::device_ptr`]).
/// Made by [`NcclCollective::shared_buffer`].
pub struct SharedBuffer {
    ptr: sys::CUdeviceptr,
    memory: sys::CUexternalMemory,
    stream: Arc<CudaStream>,
    ctx: Arc<CudaContext>,
    // Dropped after CUDA's mapping and import are released.
    buffer: ExportableBuffer<f32>,
}

// SAFETY: the raw CUDA handles are only used with the context bound on the calling thread, and
// a `SharedBuffer` is used by one thread at a time (`&mut` for CUDA writes).
unsafe impl Send for SharedBuffer {}

impl std::fmt::Debug for SharedBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedBuffer").field("len", &self.buffer.len()).field("info", &self.buffer.info()).finish()
    }
}

impl Drop for SharedBuffer {
    fn drop(&mut self) {
        let released = self
            .ctx
            .bind_to_thread()
            .and_then(|()| self.stream.synchronize())
            // SAFETY: the mapping and the import were made here and are released once; nothing
            // on the stream uses them any more.
            .and_then(|()| unsafe { result::free_sync(self.ptr) })
            .and_then(|()| unsafe { result::external_memory::destroy_external_memory(self.memory) });
        if let Err(e) = released {
            eprintln!("kernels-train: releasing CUDA's import of a shared buffer failed: {e}");
        }
    }
}

impl SharedBuffer {
    /// The buffer as wgpu sees it.
    pub fn buffer(&self) -> &Buffer<f32> {
        &self.buffer
    }

    /// The buffer as wgpu sees it, for kernels that write it.
    pub fn buffer_mut(&mut self) -> &mut Buffer<f32> {
        &mut self.buffer
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.buffer.len()
    }

    /// Whether it holds no elements.
    pub fn is_empty(&self) -> bool {
        self.buffer.is_empty()
    }

    /// Where CUDA sees the first element.
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }

    /// What the memory holds, copied to the host by CUDA. Vulkan writes must have finished
    /// ([`Gpu::wait`]).
    pub fn cuda_read(&self) -> Result<Vec<f32>> {
        let mut out = vec![0f32; self.len()];
        self.ctx.bind_to_thread().map_err(cuda("binding the context"))?;
        // SAFETY: `out` has the mapping's length and outlives the synchronised copy.
        unsafe { result::memcpy_dtoh_async(&mut out, self.ptr, self.stream.cu_stream()) }
            .map_err(cuda("cuMemcpyDtoHAsync"))?;
        self.stream.synchronize().map_err(cuda("cuStreamSynchronize"))?;
        Ok(out)
    }

    /// Overwrites the memory from the host through CUDA; finished when this returns, so Vulkan
    /// work submitted after sees it.
    pub fn cuda_write(&mut self, data: &[f32]) -> Result<()> {
        if data.len() != self.len() {
            return Err(Error::Nccl(format!("writing {} values into a shared buffer of {}", data.len(), self.len())));
        }
        self.ctx.bind_to_thread().map_err(cuda("binding the context"))?;
        // SAFETY: `data` has the mapping's length and outlives the synchronised copy.
        unsafe { result::memcpy_htod_async(self.ptr, data, self.stream.cu_stream()) }
            .map_err(cuda("cuMemcpyHtoDAsync"))?;
        self.stream.synchronize().map_err(cuda("cuStreamSynchronize"))
    }
}

/// Device memory for a few host values, freed on drop.
struct Scratch {
    ptr: sys::CUdeviceptr,
}

impl Scratch {
    fn new(bytes: usize) -> Result<Scratch> {
        // SAFETY: a plain allocation, freed on drop.
        let ptr = unsafe { result::malloc_sync(bytes.max(8)) }.map_err(cuda("cuMemAlloc"))?;
        Ok(Scratch { ptr })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // SAFETY: allocated by `new`, freed once; the stream was synchronised by the user.
        let _ = unsafe { result::free_sync(self.ptr) };
    }
}

/// One rank's NCCL communicator on the CUDA device of its [`Gpu`], with the bucket its
/// gradients go through. Implements [`Collective`].
pub struct NcclCollective {
    rank: Rank,
    nccl: &'static Nccl,
    comm: Comm,
    /// Elements of `f32` per bucket.
    bucket_len: usize,
    bucket: Option<SharedBuffer>,
    stream: Arc<CudaStream>,
    ctx: Arc<CudaContext>,
}

// SAFETY: an NCCL communicator may be used from any thread, one call at a time, which `&mut self`
// guarantees; the CUDA context is bound on the calling thread before each use.
unsafe impl Send for NcclCollective {}

impl std::fmt::Debug for NcclCollective {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclCollective")
            .field("rank", &self.rank)
            .field("nccl", &self.nccl.name)
            .field("version", &self.nccl.version_text())
            .field("bucket_len", &self.bucket_len)
            .finish_non_exhaustive()
    }
}

impl Drop for NcclCollective {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        let _ = self.stream.synchronize();
        // SAFETY: the communicator was made by `new` and is destroyed once, with nothing queued.
        let code = unsafe { (self.nccl.comm_destroy)(self.comm) };
        if let Err(e) = self.nccl.check("ncclCommDestroy", code) {
            eprintln!("kernels-train: {e}");
        }
    }
}

impl NcclCollective {
    /// This rank's communicator, on the CUDA device that is `gpu` (matched by UUID). Every rank
    /// passes the same `id` (made by one of them, [`NcclId::new`]); returns once all `world`
    /// ranks have joined. Make it before the run starts threads of its own: the first one sets
    /// `NCCL_NVLS_ENABLE=0` in the process environment unless it is set.
    pub fn new(gpu: &Gpu, rank: Rank, id: &NcclId) -> Result<NcclCollective> {
        if rank.world == 0 || rank.rank >= rank.world {
            return Err(Error::Nccl(format!("rank {} of {} ranks", rank.rank, rank.world)));
        }
        let nccl = nccl()?;
        let ordinal = cuda_device(gpu)?;
        let ctx = CudaContext::new(ordinal).map_err(cuda("opening the device's primary context"))?;
        let stream = ctx.new_stream().map_err(cuda("cuStreamCreate"))?;
        let world = c_int::try_from(rank.world).map_err(|_| Error::Nccl(format!("{} ranks", rank.world)))?;
        let mut comm: Comm = std::ptr::null_mut();
        // SAFETY: `comm` receives the communicator; the id is 128 bytes by value, as declared.
        let code = unsafe { (nccl.comm_init_rank)(&mut comm, world, id.0, rank.rank as c_int) };
        nccl.check(&format!("ncclCommInitRank (rank {} of {})", rank.rank, rank.world), code)?;
        Ok(NcclCollective { rank, nccl, comm, bucket_len: DEFAULT_BUCKET_BYTES / 4, bucket: None, stream, ctx })
    }

    /// A communicator of one rank (no rendezvous needed): the whole path runs, NCCL included.
    pub fn single(gpu: &Gpu) -> Result<NcclCollective> {
        // The CUDA device first: without one, that is the error to report.
        cuda_device(gpu)?;
        NcclCollective::new(gpu, Rank { rank: 0, world: 1, local_rank: 0 }, &NcclId::new()?)
    }

    /// Gradients go through a bucket of at most `bytes` (at least one `f32`) at a time.
    pub fn set_bucket_bytes(&mut self, bytes: usize) {
        self.bucket_len = (bytes / 4).max(1);
        self.bucket = None;
    }

    /// The NCCL library loaded and its version, e.g. `libnccl.so.2 (NCCL 2.21.5)`.
    pub fn library(&self) -> String {
        format!("{} (NCCL {})", self.nccl.name, self.nccl.version_text())
    }

    /// The CUDA device ordinal in use.
    pub fn cuda_ordinal(&self) -> usize {
        self.ctx.ordinal()
    }

    /// A new exportable buffer of `len` zeroed `f32` on `gpu`, imported into this rank's CUDA
    /// context.
    pub fn shared_buffer(&self, gpu: &Gpu, len: usize) -> Result<SharedBuffer> {
        let buffer = gpu.exportable_zeros::<f32>(len)?;
        let info = buffer.info();
        let fd = buffer.export_fd()?;
        self.ctx.bind_to_thread().map_err(cuda("binding the context"))?;
        let desc = sys::CUDA_EXTERNAL_MEMORY_HANDLE_DESC {
            type_: sys::CUexternalMemoryHandleType::CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD,
            handle: sys::CUDA_EXTERNAL_MEMORY_HANDLE_DESC_st__bindgen_ty_1 { fd: std::os::fd::AsRawFd::as_raw_fd(&fd) },
            size: info.allocation_size,
            flags: if info.dedicated { sys::CUDA_EXTERNAL_MEMORY_DEDICATED } else { 0 },
            reserved: [0; 16],
        };
        let mut memory = std::mem::MaybeUninit::uninit();
        // SAFETY: a descriptor of the exported memory with its allocation size.
        unsafe { sys::cuImportExternalMemory(memory.as_mut_ptr(), &desc) }
            .result()
            .map_err(cuda("cuImportExternalMemory"))?;
        // CUDA owns the descriptor once the import succeeded (it closes it itself).
        let _ = fd.into_raw_fd();
        // SAFETY: written by the successful import.
        let memory = unsafe { memory.assume_init() };
        // SAFETY: the buffer starts at offset 0 of the memory and fits in it.
        let ptr = match unsafe { result::external_memory::get_mapped_buffer(memory, 0, info.buffer_size) } {
            Ok(p) => p,
            Err(e) => {
                // SAFETY: imported above, nothing mapped.
                let _ = unsafe { result::external_memory::destroy_external_memory(memory) };
                return Err(cuda("cuExternalMemoryGetMappedBuffer")(e));
            }
        };
        Ok(SharedBuffer { ptr, memory, stream: self.stream.clone(), ctx: self.ctx.clone(), buffer })
    }

    /// Averages the first `count` elements of `shared` over the ranks in place (`ncclAllReduce`
    /// with `ncclAvg`), waiting first for Vulkan work on `gpu` and then for NCCL: when this
    /// returns, wgpu work submitted after sees the averages.
    pub fn average_shared(&mut self, gpu: &Gpu, shared: &mut SharedBuffer, count: usize) -> Result<()> {
        if count > shared.len() {
            return Err(Error::Nccl(format!("averaging {count} values of a shared buffer of {}", shared.len())));
        }
        if !Arc::ptr_eq(&shared.ctx, &self.ctx) {
            return Err(Error::Nccl("the shared buffer was imported by another collective".into()));
        }
        gpu.wait()?;
        self.ctx.bind_to_thread().map_err(cuda("binding the context"))?;
        let ptr = shared.ptr as *mut c_void;
        // SAFETY: in place over `count` floats of the mapped buffer, on this rank's stream.
        let code = unsafe {
            (self.nccl.all_reduce)(ptr, ptr, count, NCCL_FLOAT32, NCCL_AVG, self.comm, self.stream.cu_stream())
        };
        self.nccl.check("ncclAllReduce (f32, average)", code)?;
        self.stream.synchronize().map_err(cuda("cuStreamSynchronize"))
    }

    /// Runs a collective over `bytes` host bytes staged in device memory, on this rank's stream.
    fn staged<T: bytemuck::Pod>(
        &self,
        values: &mut [T],
        op: impl FnOnce(sys::CUdeviceptr) -> c_int,
        what: &str,
    ) -> Result<()> {
        self.ctx.bind_to_thread().map_err(cuda("binding the context"))?;
        let scratch = Scratch::new(std::mem::size_of_val(values))?;
        let stream = self.stream.cu_stream();
        // SAFETY: the scratch holds `values`' bytes; every copy is synchronised before return.
        unsafe { result::memcpy_htod_async(scratch.ptr, values, stream) }.map_err(cuda("cuMemcpyHtoDAsync"))?;
        self.nccl.check(what, op(scratch.ptr))?;
        // SAFETY: as above.
        unsafe { result::memcpy_dtoh_async(values, scratch.ptr, stream) }.map_err(cuda("cuMemcpyDtoHAsync"))?;
        self.stream.synchronize().map_err(cuda("cuStreamSynchronize"))
    }
}

/// One piece of a gradient in the bucket: gradient `grad`, its elements from `start`, `len` of
/// them, at element `at` of the bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Piece {
    grad: usize,
    start: usize,
    len: usize,
    at: usize,
}

/// The gradients of `lens` elements cut into buckets of at most `bucket` elements, in order:
/// each bucket is a list of pieces that fill it from element 0.
fn buckets(lens: &[usize], bucket: usize) -> Vec<Vec<Piece>> {
    let mut out = Vec::new();
    let mut current = Vec::new();
    let mut fill = 0;
    for (grad, &len) in lens.iter().enumerate() {
        let mut start = 0;
        while start < len {
            let n = (len - start).min(bucket - fill);
            current.push(Piece { grad, start, len: n, at: fill });
            start += n;
            fill += n;
            if fill == bucket {
                out.push(std::mem::take(&mut current));
                fill = 0;
            }
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

impl Collective for NcclCollective {
    fn rank(&self) -> Rank {
        self.rank
    }

    fn average_gradients(&mut self, gpu: &Gpu, grads: &[&Buffer<f32>]) -> Result<()> {
        let lens: Vec<usize> = grads.iter().map(|g| g.len()).collect();
        let total: usize = lens.iter().sum();
        if total == 0 {
            return Ok(());
        }
        let want = self.bucket_len.min(total);
        if self.bucket.as_ref().is_none_or(|b| b.len() < want) {
            self.bucket = None;
            self.bucket = Some(self.shared_buffer(gpu, want)?);
        }
        let mut bucket = self.bucket.take().expect("made above");
        let result = (|| {
            for pieces in buckets(&lens, bucket.len()) {
                let count = pieces.iter().map(|p| p.len).sum();
                let copy = |bucket: &SharedBuffer, into_bucket: bool| {
                    let mut encoder = gpu.device().create_command_encoder(&Default::default());
                    for p in &pieces {
                        let (g, b) = (grads[p.grad].raw(), bucket.buffer().raw());
                        // A gradient may be a part of one allocation (`Buffer::part`).
                        let gs = grads[p.grad].byte_offset() + 4 * p.start as u64;
                        let (bs, n) = (bucket.buffer().byte_offset() + 4 * p.at as u64, 4 * p.len as u64);
                        if into_bucket {
                            encoder.copy_buffer_to_buffer(g, gs, b, bs, n);
                        } else {
                            encoder.copy_buffer_to_buffer(b, bs, g, gs, n);
                        }
                    }
                    gpu.queue().submit([encoder.finish()]);
                };
                copy(&bucket, true);
                // Waits for the copies (Vulkan before NCCL), then for NCCL (before the copies back).
                self.average_shared(gpu, &mut bucket, count)?;
                copy(&bucket, false);
            }
            // Reports the copies' errors (a buffer of another device, say); later work on the
            // gradients is ordered after the copies back by the queue.
            gpu.wait()?;
            Ok(())
        })();
        self.bucket = Some(bucket);
        result
    }

    fn sum_f64(&mut self, values: &mut [f64]) -> Result<()> {
        if values.is_empty() {
            return Ok(());
        }
        let (nccl, comm, stream, n) = (self.nccl, self.comm, self.stream.cu_stream(), values.len());
        self.staged(
            values,
            // SAFETY: in place over the `n` staged doubles.
            |p| unsafe {
                (nccl.all_reduce)(p as *const c_void, p as *mut c_void, n, NCCL_FLOAT64, NCCL_SUM, comm, stream)
            },
            "ncclAllReduce (f64, sum)",
        )
    }

    fn broadcast(&mut self, root: usize, bytes: &mut Vec<u8>) -> Result<()> {
        if root >= self.rank.world {
            return Err(Error::Nccl(format!("broadcast from rank {root} of {} ranks", self.rank.world)));
        }
        let (nccl, comm, stream) = (self.nccl, self.comm, self.stream.cu_stream());
        let root_c = root as c_int;
        // The root's length first, so that every rank has room for its bytes.
        let mut len = [if self.rank.rank == root { bytes.len() as u64 } else { 0 }];
        self.staged(
            &mut len,
            // SAFETY: in place over one staged u64 (8 bytes).
            |p| unsafe { (nccl.broadcast)(p as *const c_void, p as *mut c_void, 8, NCCL_UINT8, root_c, comm, stream) },
            "ncclBroadcast (length)",
        )?;
        let len = usize::try_from(len[0]).map_err(|_| Error::Nccl(format!("a broadcast of {} bytes", len[0])))?;
        bytes.resize(len, 0);
        if len == 0 {
            return Ok(());
        }
        self.staged(
            bytes.as_mut_slice(),
            // SAFETY: in place over the `len` staged bytes.
            |p| unsafe {
                (nccl.broadcast)(p as *const c_void, p as *mut c_void, len, NCCL_UINT8, root_c, comm, stream)
            },
            "ncclBroadcast",
        )
    }

    fn barrier(&mut self) -> Result<()> {
        // An all-reduce returns on a rank only once every rank has contributed.
        self.sum_f64(&mut [0.0])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every element of every gradient lands in exactly one bucket slot, in order, and no
    /// bucket is over size or has a hole.
    #[test]
    fn gradients_are_cut_into_full_buckets_in_order() {
        let cases: &[(&[usize], usize)] =
            &[(&[5, 0, 7, 3], 4), (&[1], 1), (&[10], 3), (&[3, 3, 3], 3), (&[2, 9, 1, 1, 40], 16), (&[0, 0], 5)];
        for &(lens, size) in cases {
            let total: usize = lens.iter().sum();
            let cut = buckets(lens, size);
            let mut next = (0usize, 0usize);
            let mut seen = 0;
            for (i, bucket) in cut.iter().enumerate() {
                let fill: usize = bucket.iter().map(|p| p.len).sum();
                assert!(fill <= size, "{lens:?}/{size}: bucket {i} holds {fill}");
                if i + 1 < cut.len() {
                    assert_eq!(fill, size, "{lens:?}/{size}: bucket {i} is not full");
                }
                let mut at = 0;
                for p in bucket {
                    assert!(p.len > 0, "{lens:?}/{size}: empty piece {p:?}");
                    assert_eq!(p.at, at, "{lens:?}/{size}: hole before {p:?}");
                    // Pieces follow the gradients' order, skipping empty gradients.
                    while next.0 < lens.len() && next.1 == lens[next.0] {
                        next = (next.0 + 1, 0);
                    }
                    assert_eq!((p.grad, p.start), next, "{lens:?}/{size}: {p:?}");
                    assert!(p.start + p.len <= lens[p.grad]);
                    next.1 += p.len;
                    at += p.len;
                    seen += p.len;
                }
            }
            assert_eq!(seen, total, "{lens:?}/{size}");
        }
    }

    #[test]
    fn an_nccl_id_round_trips_through_its_bytes_and_other_lengths_are_refused() {
        let bytes: Vec<u8> = (0..128u32).map(|i| (i * 37 + 11) as u8).collect();
        let id = NcclId::from_bytes(&bytes).unwrap();
        assert_eq!(id.as_bytes().to_vec(), bytes);
        let e = NcclId::from_bytes(&bytes[..127]).unwrap_err().to_string();
        assert!(e.contains("128 bytes, not 127"), "{e}");
    }
}
