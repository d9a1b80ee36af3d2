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
pub struct Buffer<T> {
    pub(crate) raw: wgpu::Buffer,
    pub(crate) len: usize,
    pub(crate) gpu_id: u64,
    pub(crate) id: u64,
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
/// binding alignment).
pub(crate) fn padded_bytes<T>(len: usize) -> u64 {
    let bytes = (len as u64).saturating_mul(std::mem::size_of::<T>() as u64);
    bytes.max(4).div_ceil(4) * 4
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

    /// Bytes allocated (a multiple of 4, at least 4).
    pub fn byte_size(&self) -> u64 {
        self.raw.size()
    }

    /// The wgpu buffer.
    pub fn raw(&self) -> &wgpu::Buffer {
        &self.raw
    }

    /// Copies the contents back to the host. Waits for all work submitted before. Not on the
    /// web, where nothing may block: use [`Buffer::read_async`] there.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn read(&self, gpu: &Gpu) -> Result<Vec<T>> {
        let staging = self.copy_to_staging(gpu)?;
        let slice = staging.slice(..);
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        gpu.inner.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| Error::Gpu(e.to_string()))?;
        rx.recv()
            .map_err(|_| Error::Gpu("the buffer mapping never completed".into()))?
            .map_err(|e| Error::Gpu(format!("cannot map the buffer: {e}")))?;
        gpu.take_errors()?;
        self.unpack(&staging)
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
        if self.gpu_id != gpu.inner.id {
            return Err(Error::Gpu("this buffer belongs to another GPU context".into()));
        }
        if range.is_empty() {
            return Ok(Vec::new());
        }
        let size = std::mem::size_of::<T>() as u64;
        // Copies move whole 4-byte words: widen the byte range to them, then cut.
        let (start, end) = (range.start as u64 * size, range.end as u64 * size);
        let (a, z) = (start / 4 * 4, end.div_ceil(4) * 4);
        let device = &gpu.inner.device;
        let staging = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("kernels readback"),
            size: z - a,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        encoder.copy_buffer_to_buffer(&self.raw, a, &staging, 0, z - a);
        gpu.inner.queue.submit([encoder.finish()]);
        let (tx, rx) = std::sync::mpsc::channel();
        staging.slice(..).map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| Error::Gpu(e.to_string()))?;
        rx.recv()
            .map_err(|_| Error::Gpu("the buffer mapping never completed".into()))?
            .map_err(|e| Error::Gpu(format!("cannot map the buffer: {e}")))?;
        gpu.take_errors()?;
        let view = staging
            .slice(..)
            .get_mapped_range()
            .map_err(|e| Error::Gpu(format!("cannot read the mapped buffer: {e}")))?;
        let mut out: Vec<T> = vec![T::zeroed(); range.len()];
        let from = (start - a) as usize;
        bytemuck::cast_slice_mut::<T, u8>(&mut out).copy_from_slice(&view[from..from + (end - start) as usize]);
        drop(view);
        staging.unmap();
        Ok(out)
    }

    /// Copies the contents back to the host without blocking (for the web).
    pub async fn read_async(&self, gpu: &Gpu) -> Result<Vec<T>> {
        let staging = self.copy_to_staging(gpu)?;
        let slice = staging.slice(..);
        let (tx, rx) = futures_channel::oneshot::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        // Native backends need polling for the callback; on the web the browser drives it.
        #[cfg(not(target_arch = "wasm32"))]
        gpu.inner.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| Error::Gpu(e.to_string()))?;
        rx.await
            .map_err(|_| Error::Gpu("the buffer mapping never completed".into()))?
            .map_err(|e| Error::Gpu(format!("cannot map the buffer: {e}")))?;
        self.unpack(&staging)
    }

    fn copy_to_staging(&self, gpu: &Gpu) -> Result<wgpu::Buffer> {
        if self.gpu_id != gpu.inner.id {
            return Err(Error::Gpu("this buffer belongs to another GPU context".into()));
        }
        let device = &gpu.inner.device;
        let staging = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("kernels readback"),
            size: self.raw.size(),
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        encoder.copy_buffer_to_buffer(&self.raw, 0, &staging, 0, self.raw.size());
        gpu.inner.queue.submit([encoder.finish()]);
        Ok(staging)
    }

    fn unpack(&self, staging: &wgpu::Buffer) -> Result<Vec<T>> {
        let bytes = self.len * std::mem::size_of::<T>();
        let view = staging
            .slice(..)
            .get_mapped_range()
            .map_err(|e| Error::Gpu(format!("cannot read the mapped buffer: {e}")))?;
        // The mapped bytes need not be aligned for T: copy through a typed vector.
        let mut out: Vec<T> = vec![T::zeroed(); self.len];
        bytemuck::cast_slice_mut::<T, u8>(&mut out).copy_from_slice(&view[..bytes]);
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
        write_padded(gpu, &self.raw, bytemuck::cast_slice(data));
        Ok(())
    }
}

fn write_padded(gpu: &Gpu, raw: &wgpu::Buffer, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    if bytes.len().is_multiple_of(4) {
        gpu.inner.queue.write_buffer(raw, 0, bytes);
    } else {
        let mut padded = bytes.to_vec();
        padded.resize(bytes.len().div_ceil(4) * 4, 0);
        gpu.inner.queue.write_buffer(raw, 0, &padded);
    }
}

impl Gpu {
    fn allocate<T: Element>(&self, len: usize, label: &str) -> Result<Buffer<T>> {
        let bytes = padded_bytes::<T>(len);
        let limit = self.inner.limits.max_buffer_size;
        if bytes > limit || len as u64 > u64::MAX / (std::mem::size_of::<T>() as u64).max(1) {
            return Err(Error::BufferTooLarge { bytes, limit });
        }
        let raw = self.inner.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        Ok(Buffer { raw, len, gpu_id: self.inner.id, id: next_id(), _t: PhantomData, _owner: self.clone() })
    }

    /// A buffer holding a copy of `data`.
    pub fn upload<T: Element>(&self, data: &[T]) -> Result<Buffer<T>> {
        let buffer = self.allocate::<T>(data.len(), "kernels buffer")?;
        write_padded(self, &buffer.raw, bytemuck::cast_slice(data));
        Ok(buffer)
    }

    /// A buffer of `len` zeroed elements.
    pub fn zeros<T: Element>(&self, len: usize) -> Result<Buffer<T>> {
        // wgpu zero-initialises new buffers.
        self.allocate::<T>(len, "kernels buffer")
    }

    /// A buffer of `len` copies of `value`.
    pub fn filled<T: Element>(&self, len: usize, value: T) -> Result<Buffer<T>> {
        self.upload(&vec![value; len])
    }
}
