//! Typed storage buffers.

use crate::context::{Gpu, next_id};
use crate::error::{Error, Result};
use std::marker::PhantomData;

/// A type a buffer can hold: plain data with a fixed layout (`f32`, `u32`, `i32`, `f16`,
/// arrays of them, and the structs `kernels!` generates).
pub trait Element: bytemuck::Pod + Send + Sync + 'static {}
impl<T: bytemuck::Pod + Send + Sync + 'static> Element for T {}

/// A storage buffer of `len` elements of `T` on one [`Gpu`].
///
/// Not `Clone`: a generated function takes `&Buffer` for `read` bindings and `&mut Buffer`
/// for `read_write` ones, so binding one buffer twice with a writable binding is rejected by the
/// borrow checker.
///
/// A buffer is either a whole allocation or a part of one ([`Buffer::part`]): many tensors in
/// one allocation let a single dispatch cover all of them (an optimizer step over every
/// parameter) while each is still bound on its own elsewhere.
pub struct Buffer<T> {
    pub(crate) raw: wgpu::Buffer,
    pub(crate) len: usize,
    pub(crate) gpu_id: u64,
    pub(crate) id: u64,
    /// The allocation's identity: the whole buffer's `id`, shared by its parts.
    pub(crate) root: u64,
    /// Where the buffer starts in `raw`, in bytes.
    pub(crate) offset: u64,
    /// Bytes bound and copied: the elements padded to 4 bytes (the whole of `raw` for a whole
    /// buffer).
    pub(crate) size: u64,
    _t: PhantomData<T>,
    // Declared last, dropped last: the device outlives its buffers, so it is always destroyed
    // by the context, under the lifecycle lock.
    _owner: Gpu,
}

impl<T> std::fmt::Debug for Buffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buffer")
            .field("type", &std::any::type_name::<T>())
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

/// Bytes a buffer of `len` elements occupies: at least 4, a multiple of 4 (wgpu's copy and
/// binding alignment). `None` past `u64`.
pub(crate) fn padded_bytes<T>(len: usize) -> Option<u64> {
    let bytes = (len as u64).checked_mul(std::mem::size_of::<T>() as u64)?;
    bytes.max(4).checked_next_multiple_of(4)
}

impl<T> Buffer<T> {
    /// `raw`, holding `len` elements, as a buffer of `gpu`.
    pub(crate) fn wrap(gpu: &Gpu, raw: wgpu::Buffer, len: usize) -> Buffer<T> {
        let (id, size) = (next_id(), raw.size());
        Buffer { raw, len, gpu_id: gpu.inner.id, id, root: id, offset: 0, size, _t: PhantomData, _owner: gpu.clone() }
    }

    /// The bytes `[offset, offset + size)` of `raw` this buffer binds.
    pub(crate) fn range(&self) -> (u64, u64) {
        (self.offset, self.offset + self.size)
    }

    /// The context the buffer belongs to.
    #[cfg_attr(not(all(feature = "external-memory", target_os = "linux")), allow(dead_code))]
    pub(crate) fn owner(&self) -> &Gpu {
        &self._owner
    }
}

impl<T: Element> Buffer<T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes the buffer spans (a multiple of 4, at least 4).
    pub fn byte_size(&self) -> u64 {
        self.size
    }

    /// The wgpu buffer: for a part ([`Buffer::part`]), the whole allocation, whose bytes from
    /// [`Buffer::byte_offset`] are this buffer's.
    pub fn raw(&self) -> &wgpu::Buffer {
        &self.raw
    }

    /// Where this buffer starts in [`Buffer::raw`], in bytes: 0 for a whole buffer.
    pub fn byte_offset(&self) -> u64 {
        self.offset
    }

    /// Whether this buffer is a part of a larger allocation ([`Buffer::part`]).
    pub fn is_part(&self) -> bool {
        self.root != self.id
    }

    /// A buffer over elements `range` of this one's memory: a second handle on the same
    /// allocation, not a copy. What a kernel writes through either is seen through the other.
    ///
    /// The start must lie on the device's storage offset alignment
    /// ([`Gpu::storage_alignment`] bytes; [`Gpu::part_layout`] places tensors so). Rust's borrows
    /// keep each handle exclusive, not the memory: the runtime checks each dispatch instead,
    /// and rejects ([`Error::Aliased`]) overlapping parts of one allocation when either is
    /// bound writable, and a part bound read-only beside another of the same allocation bound
    /// writable (graphics APIs track usage per allocation, not per range). Parts of one
    /// allocation that are all writable, or all read-only, bind together.
    pub fn part(&self, range: std::ops::Range<usize>) -> Result<Buffer<T>> {
        if range.start > range.end || range.end > self.len {
            return Err(Error::LengthMismatch {
                detail: format!("a part of elements {range:?} of a buffer of {}", self.len),
            });
        }
        let elem = std::mem::size_of::<T>() as u64;
        let offset = self.offset + range.start as u64 * elem;
        let align = self._owner.storage_alignment();
        if !offset.is_multiple_of(align) {
            return Err(Error::LengthMismatch {
                detail: format!(
                    "a part starting at element {} ({offset} bytes into its allocation) is not on the device's storage offset alignment of {align} bytes",
                    range.start
                ),
            });
        }
        let len = range.len();
        let size = padded_bytes::<T>(len).expect("inside an allocation");
        if offset + size > self.raw.size() {
            return Err(Error::LengthMismatch {
                detail: format!(
                    "a part of {len} elements at byte {offset} ends past its allocation of {} bytes (its last 4-byte word is partial)",
                    self.raw.size()
                ),
            });
        }
        Ok(Buffer {
            raw: self.raw.clone(),
            len,
            gpu_id: self.gpu_id,
            id: next_id(),
            root: self.root,
            offset,
            size,
            _t: PhantomData,
            _owner: self._owner.clone(),
        })
    }

    /// Copies the contents back to the host. Waits for all work submitted before. Not on the
    /// web, where nothing may block: use [`Buffer::read_async`] there.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn read(&self, gpu: &Gpu) -> Result<Vec<T>> {
        let staging = self.copy_to_staging(gpu, 0, self.size)?;
        map_blocking(gpu, &staging)?;
        self.unpack(&staging, 0, self.len)
    }

    /// Copies elements `range` back to the host (only those bytes cross the bus). Waits for all
    /// work submitted before. Not on the web.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn read_range(&self, gpu: &Gpu, range: std::ops::Range<usize>) -> Result<Vec<T>> {
        if range.start > range.end || range.end > self.len {
            return Err(Error::LengthMismatch {
                detail: format!("reading elements {range:?} of a buffer of {}", self.len),
            });
        }
        if range.is_empty() {
            gpu.alive()?;
            return Ok(Vec::new());
        }
        let size = std::mem::size_of::<T>() as u64;
        // Copies move whole 4-byte words: widen the byte range to them, then cut.
        let (start, end) = (range.start as u64 * size, range.end as u64 * size);
        let (a, z) = (start / 4 * 4, end.div_ceil(4) * 4);
        let staging = self.copy_to_staging(gpu, a, z - a)?;
        map_blocking(gpu, &staging)?;
        self.unpack(&staging, (start - a) as usize, range.len())
    }

    /// Copies the contents back to the host without blocking (for the web).
    pub async fn read_async(&self, gpu: &Gpu) -> Result<Vec<T>> {
        let staging = self.copy_to_staging(gpu, 0, self.size)?;
        map_async(gpu, &staging).await?;
        self.unpack(&staging, 0, self.len)
    }

    /// A mappable copy of `size` bytes from byte `offset` of this buffer, submitted.
    fn copy_to_staging(&self, gpu: &Gpu, offset: u64, size: u64) -> Result<wgpu::Buffer> {
        if self.gpu_id != gpu.inner.id {
            return Err(Error::Gpu("this buffer belongs to another GPU context".into()));
        }
        gpu.alive()?;
        let device = &gpu.inner.device;
        let (staging, error) = gpu.scoped(|| {
            let staging = device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("kernels readback"),
                size,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
            encoder.copy_buffer_to_buffer(&self.raw, self.offset + offset, &staging, 0, size);
            gpu.inner.queue.submit([encoder.finish()]);
            staging
        });
        match error {
            Some(message) => Err(gpu.wgpu_error(|| "reading a buffer".into(), message)),
            None => Ok(staging),
        }
    }

    /// `count` elements from byte `from` of a mapped staging buffer.
    fn unpack(&self, staging: &wgpu::Buffer, from: usize, count: usize) -> Result<Vec<T>> {
        let bytes = count * std::mem::size_of::<T>();
        let view = staging
            .slice(..)
            .get_mapped_range()
            .map_err(|e| Error::Gpu(format!("cannot read the mapped buffer: {e}")))?;
        // The mapped bytes need not be aligned for T: copy through a typed vector.
        let mut out: Vec<T> = vec![T::zeroed(); count];
        bytemuck::cast_slice_mut::<T, u8>(&mut out).copy_from_slice(&view[from..from + bytes]);
        drop(view);
        staging.unmap();
        Ok(out)
    }

    /// Overwrites the contents (the length must match). Ordered before work submitted after.
    pub fn write(&mut self, gpu: &Gpu, data: &[T]) -> Result<()> {
        if data.len() != self.len {
            return Err(Error::LengthMismatch {
                detail: format!("writing {} elements into a buffer of {}", data.len(), self.len),
            });
        }
        if self.gpu_id != gpu.inner.id {
            return Err(Error::Gpu("this buffer belongs to another GPU context".into()));
        }
        gpu.alive()?;
        let ((), error) = gpu.scoped(|| write_padded(gpu, &self.raw, self.offset, bytemuck::cast_slice(data)));
        match error {
            Some(message) => Err(gpu.wgpu_error(|| "writing a buffer".into(), message)),
            None => Ok(()),
        }
    }
}

/// Maps a submitted staging buffer for reading without blocking.
pub(crate) async fn map_async(gpu: &Gpu, staging: &wgpu::Buffer) -> Result<()> {
    let (tx, rx) = futures_channel::oneshot::channel();
    staging.slice(..).map_async(wgpu::MapMode::Read, move |r| {
        let _ = tx.send(r);
    });
    // Native backends need polling for the callback; on the web the browser drives it.
    #[cfg(not(target_arch = "wasm32"))]
    gpu.poll_wait()?;
    let mapped = rx.await;
    gpu.alive()?;
    mapped
        .map_err(|_| Error::Gpu("the buffer mapping never completed".into()))?
        .map_err(|e| gpu.wgpu_error(|| "reading a buffer".into(), format!("cannot map it: {e}")))
}

/// Maps a submitted staging buffer for reading and waits for it.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn map_blocking(gpu: &Gpu, staging: &wgpu::Buffer) -> Result<()> {
    let (tx, rx) = std::sync::mpsc::channel();
    staging.slice(..).map_async(wgpu::MapMode::Read, move |r| {
        let _ = tx.send(r);
    });
    gpu.poll_wait()?;
    rx.recv()
        .map_err(|_| Error::Gpu("the buffer mapping never completed".into()))?
        .map_err(|e| gpu.wgpu_error(|| "reading a buffer".into(), format!("cannot map it: {e}")))
}

/// Writes `bytes` at byte `offset` (a multiple of 4), padding the tail to 4 bytes.
fn write_padded(gpu: &Gpu, raw: &wgpu::Buffer, offset: u64, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    if bytes.len().is_multiple_of(4) {
        gpu.inner.queue.write_buffer(raw, offset, bytes);
    } else {
        let mut padded = bytes.to_vec();
        padded.resize(bytes.len().div_ceil(4) * 4, 0);
        gpu.inner.queue.write_buffer(raw, offset, &padded);
    }
}

/// Host memory `filled` writes through at a time.
const FILL_CHUNK_BYTES: usize = 4 << 20;

impl Gpu {
    /// The alignment, in bytes, of where a part of an allocation may start ([`Buffer::part`]):
    /// the device's `min_storage_buffer_offset_alignment` (256 on most GPUs).
    pub fn storage_alignment(&self) -> u64 {
        u64::from(self.inner.limits.min_storage_buffer_offset_alignment).max(4)
    }

    /// Where `lens.len()` tensors of the given element counts start in one allocation, each
    /// on the device's storage offset alignment for every element type of at least `min_elem`
    /// bytes (pass the smallest element type the layout will hold, such as 2 for f16 copies
    /// of f32 tensors at the same element offsets), and the allocation's length: the starts
    /// in elements, the length a multiple of the alignment. For [`Buffer::part`].
    pub fn part_layout(&self, lens: &[usize], min_elem: usize) -> (Vec<usize>, usize) {
        let step = (self.storage_alignment() as usize).div_ceil(min_elem.max(1));
        let mut at = 0usize;
        let starts = lens
            .iter()
            .map(|&n| {
                let start = at;
                at += n.next_multiple_of(step);
                start
            })
            .collect();
        (starts, at.max(step))
    }

    /// The padded size of `len` elements of `T`, checked against the device's limit before
    /// anything is allocated.
    pub(crate) fn checked_size<T: Element>(&self, len: usize) -> Result<u64> {
        let limit = self.inner.limits.max_buffer_size;
        match padded_bytes::<T>(len) {
            Some(bytes) if bytes <= limit => Ok(bytes),
            Some(bytes) => Err(Error::BufferTooLarge { bytes, limit }),
            None => Err(Error::BufferTooLarge { bytes: u64::MAX, limit }),
        }
    }

    /// A new buffer of `len` elements, then `init` on it, both inside error scopes.
    fn allocate<T: Element>(&self, len: usize, init: impl FnOnce(&wgpu::Buffer)) -> Result<Buffer<T>> {
        let bytes = self.checked_size::<T>(len)?;
        self.alive()?;
        let (raw, error) = self.scoped(|| {
            let raw = self.inner.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("kernels buffer"),
                size: bytes,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            init(&raw);
            raw
        });
        if let Some(message) = error {
            return Err(self.wgpu_error(|| format!("creating a buffer of {bytes} bytes"), message));
        }
        Ok(Buffer::wrap(self, raw, len))
    }

    /// A buffer holding a copy of `data`.
    pub fn upload<T: Element>(&self, data: &[T]) -> Result<Buffer<T>> {
        self.allocate(data.len(), |raw| write_padded(self, raw, 0, bytemuck::cast_slice(data)))
    }

    /// A buffer of `len` zeroed elements.
    pub fn zeros<T: Element>(&self, len: usize) -> Result<Buffer<T>> {
        // wgpu zero-initialises new buffers.
        self.allocate::<T>(len, |_| ())
    }

    /// A buffer of `len` copies of `value`. The size is checked first; the host side never
    /// holds more than a few MiB of copies.
    pub fn filled<T: Element>(&self, len: usize, value: T) -> Result<Buffer<T>> {
        self.checked_size::<T>(len)?;
        let size = std::mem::size_of::<T>().max(1);
        // Whole multiples of 4 elements keep every chunk's offset 4-byte aligned.
        let per_chunk = (FILL_CHUNK_BYTES / size).max(4) / 4 * 4;
        let chunk = vec![value; per_chunk.min(len)];
        self.allocate(len, |raw| {
            let mut done = 0;
            while done < len {
                let n = per_chunk.min(len - done);
                write_padded(self, raw, (done * size) as u64, bytemuck::cast_slice(&chunk[..n]));
                done += n;
            }
        })
    }
}

/// A storage buffer holding one `H` followed by `len` elements `E`: the value of a WGSL struct
/// whose last member is a runtime-sized array (`struct Particles { count: u32, particles:
/// array<Particle> }`). `kernels!` generates `H` (the struct's fixed part, padded to where the
/// array starts) and `E`; a kernel's `arrayLength` and `len(binding)` count the elements.
///
/// Not `Clone`, like [`Buffer`]: writable bindings take `&mut`.
pub struct StructBuffer<H, E> {
    pub(crate) bytes: Buffer<u8>,
    len: usize,
    _t: PhantomData<(H, E)>,
}

impl<H, E> std::fmt::Debug for StructBuffer<H, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StructBuffer")
            .field("header", &std::any::type_name::<H>())
            .field("element", &std::any::type_name::<E>())
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl<H: Element, E: Element> StructBuffer<H, E> {
    /// Bytes from `len` elements (the header's first): `None` past `usize`.
    fn bytes_for(len: usize) -> Option<usize> {
        len.checked_mul(std::mem::size_of::<E>())?.checked_add(std::mem::size_of::<H>())
    }

    /// Elements of the array part.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the array part is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes allocated.
    pub fn byte_size(&self) -> u64 {
        self.bytes.byte_size()
    }

    /// The wgpu buffer.
    pub fn raw(&self) -> &wgpu::Buffer {
        &self.bytes.raw
    }

    fn split(&self, bytes: &[u8]) -> (H, Vec<E>) {
        let h = std::mem::size_of::<H>();
        let header: H = bytemuck::pod_read_unaligned(&bytes[..h]);
        let mut elements: Vec<E> = vec![E::zeroed(); self.len];
        let n = self.len * std::mem::size_of::<E>();
        bytemuck::cast_slice_mut::<E, u8>(&mut elements).copy_from_slice(&bytes[h..h + n]);
        (header, elements)
    }

    /// Copies the header and the elements back to the host. Waits for all work submitted
    /// before. Not on the web: use [`StructBuffer::read_async`] there.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn read(&self, gpu: &Gpu) -> Result<(H, Vec<E>)> {
        Ok(self.split(&self.bytes.read(gpu)?))
    }

    /// Copies the header and the elements back to the host without blocking.
    pub async fn read_async(&self, gpu: &Gpu) -> Result<(H, Vec<E>)> {
        Ok(self.split(&self.bytes.read_async(gpu).await?))
    }

    /// Overwrites the header and the elements (as many as the buffer holds).
    pub fn write(&mut self, gpu: &Gpu, header: &H, elements: &[E]) -> Result<()> {
        if elements.len() != self.len {
            return Err(Error::LengthMismatch {
                detail: format!("writing {} elements into a struct buffer of {}", elements.len(), self.len),
            });
        }
        let data = Self::pack(header, elements);
        self.bytes.write(gpu, &data)
    }

    fn pack(header: &H, elements: &[E]) -> Vec<u8> {
        let mut data = Vec::with_capacity(Self::bytes_for(elements.len()).unwrap_or(0));
        data.extend_from_slice(bytemuck::bytes_of(header));
        data.extend_from_slice(bytemuck::cast_slice(elements));
        data
    }
}

impl Gpu {
    /// A [`StructBuffer`] holding `header` and then `elements`.
    pub fn upload_struct<H: Element, E: Element>(&self, header: &H, elements: &[E]) -> Result<StructBuffer<H, E>> {
        let bytes = self.upload(&StructBuffer::<H, E>::pack(header, elements))?;
        Ok(StructBuffer { bytes, len: elements.len(), _t: PhantomData })
    }

    /// A zeroed [`StructBuffer`] with room for `len` elements.
    pub fn struct_zeros<H: Element, E: Element>(&self, len: usize) -> Result<StructBuffer<H, E>> {
        let n = StructBuffer::<H, E>::bytes_for(len)
            .ok_or(Error::BufferTooLarge { bytes: u64::MAX, limit: self.inner.limits.max_buffer_size })?;
        Ok(StructBuffer { bytes: self.zeros(n)?, len, _t: PhantomData })
    }
}
