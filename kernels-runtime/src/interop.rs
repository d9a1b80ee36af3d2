//! Storage buffers whose memory another API can import: the `VkDeviceMemory` under an
//! [`ExportableBuffer`] is allocated exportable as an opaque POSIX file descriptor
//! (`VK_KHR_external_memory_fd`), so CUDA (`cuImportExternalMemory`) can map the same bytes and
//! a library such as NCCL can work on them in place. Linux, Vulkan backend only.
//!
//! wgpu 30 enables `VK_KHR_external_memory_fd` on every Vulkan device whose driver offers it,
//! so the runtime's ordinary device is used as it is: nothing changes for runs that never
//! export. What wgpu does not do is allocate exportable memory; this module does that through
//! the raw Vulkan handles and hands the buffer to wgpu, which from then on tracks, binds, copies
//! and finally frees it like any other.

use crate::Element;
use crate::buffer::Buffer;
use crate::context::Gpu;
use crate::error::{Error, Result};
use ash::vk;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};

type Vulkan = wgpu::hal::api::Vulkan;

/// The handle type every export uses: what `cuImportExternalMemory` calls
/// `CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD`.
const HANDLE: vk::ExternalMemoryHandleTypeFlags = vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD;

/// The usages of an exportable buffer: a storage buffer that copies go in and out of.
const USAGE: wgpu::BufferUsages =
    wgpu::BufferUsages::STORAGE.union(wgpu::BufferUsages::COPY_SRC).union(wgpu::BufferUsages::COPY_DST);

/// What an importer needs besides the file descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryInfo {
    /// Bytes of the `VkDeviceMemory` (the allocation, at least the buffer's size): the size to
    /// import (`CUDA_EXTERNAL_MEMORY_HANDLE_DESC::size`).
    pub allocation_size: u64,
    /// Bytes of the buffer, from offset 0 of the memory (`CUDA_EXTERNAL_MEMORY_BUFFER_DESC::size`).
    pub buffer_size: u64,
    /// The memory is a dedicated allocation (always, here): an importer must say so
    /// (`CUDA_EXTERNAL_MEMORY_DEDICATED`).
    pub dedicated: bool,
    /// The physical device's UUID (`VkPhysicalDeviceIDProperties::deviceUUID`), equal to CUDA's
    /// `cuDeviceGetUuid` for the same GPU: how an importer finds the device that holds the memory.
    pub device_uuid: [u8; 16],
}

/// A [`Buffer`] whose memory can be exported (see the module documentation). Dereferences to the
/// buffer, so kernels, copies and reads take it as they take any other.
pub struct ExportableBuffer<T> {
    buffer: Buffer<T>,
    memory: vk::DeviceMemory,
    info: MemoryInfo,
}

impl<T> std::fmt::Debug for ExportableBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExportableBuffer").field("buffer", &self.buffer).field("info", &self.info).finish()
    }
}

impl<T> std::ops::Deref for ExportableBuffer<T> {
    type Target = Buffer<T>;
    fn deref(&self) -> &Buffer<T> {
        &self.buffer
    }
}

impl<T> std::ops::DerefMut for ExportableBuffer<T> {
    fn deref_mut(&mut self) -> &mut Buffer<T> {
        &mut self.buffer
    }
}

impl<T: Element> ExportableBuffer<T> {
    /// Sizes and the device, for an importer.
    pub fn info(&self) -> MemoryInfo {
        self.info
    }

    /// A new file descriptor referring to the buffer's memory (`vkGetMemoryFdKHR`). Each call
    /// makes a new one; whoever imports it takes it over (CUDA closes it itself once the import
    /// succeeds: pass it with [`std::os::fd::IntoRawFd`]); dropped unimported, it is closed.
    /// The memory lives while the buffer or any import of it does.
    pub fn export_fd(&self) -> Result<OwnedFd> {
        let gpu = self.buffer.owner();
        gpu.alive()?;
        // SAFETY: the device is the one the memory was allocated on, and it is alive (the
        // buffer holds its context).
        let hal = unsafe { gpu.inner.device.as_hal::<Vulkan>() }
            .ok_or_else(|| Error::ExternalMemory("the device is not a Vulkan device".into()))?;
        let raw = hal.raw_device();
        let fd_fns = ash::khr::external_memory_fd::Device::new(hal.shared_instance().raw_instance(), raw);
        let get = vk::MemoryGetFdInfoKHR::default().memory(self.memory).handle_type(HANDLE);
        // SAFETY: the memory was allocated exportable with `HANDLE`, on this device.
        let fd = unsafe { fd_fns.get_memory_fd(&get) }
            .map_err(|e| Error::ExternalMemory(format!("vkGetMemoryFdKHR failed: {e}")))?;
        if fd < 0 {
            return Err(Error::ExternalMemory(format!("vkGetMemoryFdKHR returned the descriptor {fd}")));
        }
        // SAFETY: the driver gave this new descriptor to the caller, who owns it from now on.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// The buffer itself, giving up the ability to export more descriptors.
    pub fn into_buffer(self) -> Buffer<T> {
        self.buffer
    }
}

impl Gpu {
    /// Why this device cannot allocate exportable memory, or `Ok` if it can: it must be a Vulkan
    /// device with `VK_KHR_external_memory_fd` enabled whose driver can export storage buffers as
    /// opaque file descriptors.
    pub fn can_export_memory(&self) -> Result<()> {
        self.with_vulkan(|_| Ok(()))
    }

    /// The GPU's UUID (`VkPhysicalDeviceIDProperties::deviceUUID`, what CUDA's `cuDeviceGetUuid`
    /// gives for the same GPU), where this device can export memory.
    pub fn device_uuid(&self) -> Result<[u8; 16]> {
        self.with_vulkan(|v| Ok(v.uuid()))
    }

    /// An exportable buffer of `len` zeroed elements (its memory is a dedicated, device-local
    /// allocation; see [`ExportableBuffer`]).
    pub fn exportable_zeros<T: Element>(&self, len: usize) -> Result<ExportableBuffer<T>> {
        let bytes = self.checked_size::<T>(len)?;
        self.alive()?;
        let (vk_buffer, memory, info) = self.with_vulkan(|v| v.allocate(bytes))?;
        let desc = wgpu::BufferDescriptor {
            label: Some("kernels exportable buffer"),
            size: bytes,
            usage: USAGE,
            mapped_at_creation: false,
        };
        let (raw, error) = self.scoped(|| {
            // SAFETY: the buffer was created with `desc`'s size and usages (`USAGE` maps to
            // `vulkan_usage`), its memory is bound, and from here wgpu owns both: it destroys
            // the buffer and frees the memory when the last handle is dropped.
            let raw = unsafe {
                let hal = wgpu::hal::vulkan::Buffer::from_raw_managed(vk_buffer, memory, 0, info.allocation_size);
                self.inner.device.create_buffer_from_hal::<Vulkan>(hal, &desc)
            };
            // Fresh Vulkan memory holds anything; wgpu believes a buffer from the hal is
            // initialised, so it is cleared here.
            let mut encoder = self.inner.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
            encoder.clear_buffer(&raw, 0, None);
            self.inner.queue.submit([encoder.finish()]);
            raw
        });
        if let Some(message) = error {
            return Err(self.wgpu_error(|| format!("creating an exportable buffer of {bytes} bytes"), message));
        }
        let buffer = Buffer::wrap(self, raw, len);
        Ok(ExportableBuffer { buffer, memory, info })
    }

    /// A buffer of `len` elements on the memory another Vulkan device exported (`fd`, described by
    /// `info`, from [`ExportableBuffer::export_fd`] and [`ExportableBuffer::info`]), e.g. in
    /// another process or another context on the same GPU: both see the same bytes. The
    /// descriptor is taken over once the import succeeds (closed on failure). The GPU must be
    /// the one that exported (same device UUID). Writes on one side are seen by the other once
    /// they have finished ([`Gpu::wait`]) before the other side's work is submitted.
    pub fn import_buffer<T: Element>(&self, fd: OwnedFd, info: &MemoryInfo, len: usize) -> Result<Buffer<T>> {
        let bytes = self.checked_size::<T>(len)?;
        if bytes > info.buffer_size {
            return Err(Error::ExternalMemory(format!(
                "{len} elements need {bytes} bytes; the exported buffer holds {}",
                info.buffer_size
            )));
        }
        self.alive()?;
        let (vk_buffer, memory) = self.with_vulkan(|v| {
            let uuid = v.uuid();
            if uuid != info.device_uuid {
                return Err(Error::ExternalMemory(format!(
                    "the memory was exported by another GPU (device UUID {}), not `{}` ({})",
                    hex(&info.device_uuid),
                    v.name,
                    hex(&uuid)
                )));
            }
            v.import(bytes, fd, info)
        })?;
        let desc = wgpu::BufferDescriptor {
            label: Some("kernels imported buffer"),
            size: bytes,
            usage: USAGE,
            mapped_at_creation: false,
        };
        let (raw, error) = self.scoped(|| {
            // SAFETY: created with `desc`'s size and usages and bound to the imported memory;
            // wgpu destroys the buffer and frees this device's reference to the memory.
            unsafe {
                let hal = wgpu::hal::vulkan::Buffer::from_raw_managed(vk_buffer, memory, 0, info.allocation_size);
                self.inner.device.create_buffer_from_hal::<Vulkan>(hal, &desc)
            }
        });
        if let Some(message) = error {
            return Err(self.wgpu_error(|| format!("importing a buffer of {bytes} bytes"), message));
        }
        Ok(Buffer::wrap(self, raw, len))
    }

    /// Runs `f` with the device's Vulkan handles, once the device is known to be able to export.
    fn with_vulkan<R>(&self, f: impl FnOnce(&VulkanDevice<'_>) -> Result<R>) -> Result<R> {
        let info = self.inner.adapter.get_info();
        if info.backend != wgpu::Backend::Vulkan {
            return Err(Error::ExternalMemory(format!(
                "exportable memory needs the Vulkan backend; `{}` runs on {} (pick a Vulkan adapter: KERNELS_ADAPTER=vulkan)",
                info.name,
                info.backend.to_str()
            )));
        }
        // SAFETY: only the raw handles are read; nothing is destroyed through them.
        let hal = unsafe { self.inner.device.as_hal::<Vulkan>() }
            .ok_or_else(|| Error::ExternalMemory("the device is not a Vulkan device".into()))?;
        if !hal.enabled_device_extensions().contains(&ash::khr::external_memory_fd::NAME) {
            return Err(Error::ExternalMemory(format!(
                "the Vulkan driver of `{}` ({} {}) does not offer VK_KHR_external_memory_fd",
                info.name, info.driver, info.driver_info
            )));
        }
        let device = VulkanDevice {
            instance: hal.shared_instance().raw_instance(),
            device: hal.raw_device(),
            physical: hal.raw_physical_device(),
            name: &info.name,
        };
        device.check_export()?;
        f(&device)
    }
}

/// The raw handles of a Vulkan device.
struct VulkanDevice<'a> {
    instance: &'a ash::Instance,
    device: &'a ash::Device,
    physical: vk::PhysicalDevice,
    name: &'a str,
}

impl VulkanDevice<'_> {
    /// Whether the driver can export a storage buffer's memory as an opaque descriptor.
    fn check_export(&self) -> Result<()> {
        let query = vk::PhysicalDeviceExternalBufferInfo::default().usage(vulkan_usage()).handle_type(HANDLE);
        let mut out = vk::ExternalBufferProperties::default();
        // SAFETY: a query on a live physical device (Vulkan 1.1, which wgpu requires for it).
        unsafe { self.instance.get_physical_device_external_buffer_properties(self.physical, &query, &mut out) };
        let features = out.external_memory_properties.external_memory_features;
        if !features.contains(vk::ExternalMemoryFeatureFlags::EXPORTABLE) {
            return Err(Error::ExternalMemory(format!(
                "the Vulkan driver of `{}` cannot export storage buffers as opaque file descriptors",
                self.name
            )));
        }
        Ok(())
    }

    /// The physical device's UUID.
    fn uuid(&self) -> [u8; 16] {
        let mut id = vk::PhysicalDeviceIDProperties::default();
        let mut props = vk::PhysicalDeviceProperties2::default().push_next(&mut id);
        // SAFETY: a query on a live physical device.
        unsafe { self.instance.get_physical_device_properties2(self.physical, &mut props) };
        id.device_uuid
    }

    /// A buffer of `bytes` bound to a new dedicated, exportable, device-local allocation.
    fn allocate(&self, bytes: u64) -> Result<(vk::Buffer, vk::DeviceMemory, MemoryInfo)> {
        let d = self.device;
        let mut external = vk::ExternalMemoryBufferCreateInfo::default().handle_types(HANDLE);
        let create = vk::BufferCreateInfo::default()
            .size(bytes)
            .usage(vulkan_usage())
            .sharing_mode(vk::SharingMode::EXCLUSIVE)
            .push_next(&mut external);
        let fail = |what: &str, e: vk::Result| Error::ExternalMemory(format!("{what} ({bytes} bytes) failed: {e}"));
        // SAFETY: a valid create info on a live device; the buffer is destroyed below on every
        // failure path, and handed to wgpu otherwise.
        let buffer = unsafe { d.create_buffer(&create, None) }.map_err(|e| fail("vkCreateBuffer", e))?;
        let destroy = |memory: Option<vk::DeviceMemory>| unsafe {
            // SAFETY: nothing else refers to them yet.
            d.destroy_buffer(buffer, None);
            if let Some(m) = memory {
                d.free_memory(m, None);
            }
        };
        // SAFETY: a live buffer.
        let needs = unsafe { d.get_buffer_memory_requirements(buffer) };
        // SAFETY: a query on a live physical device.
        let types = unsafe { self.instance.get_physical_device_memory_properties(self.physical) };
        let Some(type_index) = memory_type(&types, needs.memory_type_bits) else {
            destroy(None);
            return Err(Error::ExternalMemory(format!(
                "`{}` has no device-local memory type for a buffer (allowed types {:#b})",
                self.name, needs.memory_type_bits
            )));
        };
        let mut export = vk::ExportMemoryAllocateInfo::default().handle_types(HANDLE);
        // CUDA imports a dedicated allocation as one object (NVIDIA's drivers prefer, and some
        // require, dedicated allocations for exported memory).
        let mut dedicated = vk::MemoryDedicatedAllocateInfo::default().buffer(buffer);
        let allocate = vk::MemoryAllocateInfo::default()
            .allocation_size(needs.size)
            .memory_type_index(type_index)
            .push_next(&mut export)
            .push_next(&mut dedicated);
        // SAFETY: a valid allocate info naming a live buffer of this device.
        let memory = match unsafe { d.allocate_memory(&allocate, None) } {
            Ok(m) => m,
            Err(e) => {
                destroy(None);
                return Err(fail("vkAllocateMemory of exportable memory", e));
            }
        };
        // SAFETY: a fresh buffer and a fresh allocation that fits it, at offset 0.
        if let Err(e) = unsafe { d.bind_buffer_memory(buffer, memory, 0) } {
            destroy(Some(memory));
            return Err(fail("vkBindBufferMemory", e));
        }
        let info =
            MemoryInfo { allocation_size: needs.size, buffer_size: bytes, dedicated: true, device_uuid: self.uuid() };
        Ok((buffer, memory, info))
    }

    /// A buffer of `bytes` bound to the memory `fd` refers to (taken over on success).
    fn import(&self, bytes: u64, fd: OwnedFd, info: &MemoryInfo) -> Result<(vk::Buffer, vk::DeviceMemory)> {
        let d = self.device;
        let mut external = vk::ExternalMemoryBufferCreateInfo::default().handle_types(HANDLE);
        let create = vk::BufferCreateInfo::default()
            .size(bytes)
            .usage(vulkan_usage())
            .sharing_mode(vk::SharingMode::EXCLUSIVE)
            .push_next(&mut external);
        let fail = |what: &str, e: vk::Result| Error::ExternalMemory(format!("{what} ({bytes} bytes) failed: {e}"));
        // SAFETY: as in `allocate`.
        let buffer = unsafe { d.create_buffer(&create, None) }.map_err(|e| fail("vkCreateBuffer", e))?;
        // SAFETY: a live buffer.
        let needs = unsafe { d.get_buffer_memory_requirements(buffer) };
        // SAFETY: a query on a live physical device.
        let types = unsafe { self.instance.get_physical_device_memory_properties(self.physical) };
        let Some(type_index) = memory_type(&types, needs.memory_type_bits) else {
            // SAFETY: nothing else refers to it.
            unsafe { d.destroy_buffer(buffer, None) };
            return Err(Error::ExternalMemory(format!("`{}` has no device-local memory type for a buffer", self.name)));
        };
        let mut import = vk::ImportMemoryFdInfoKHR::default().handle_type(HANDLE).fd(fd.as_raw_fd());
        let mut dedicated = vk::MemoryDedicatedAllocateInfo::default().buffer(buffer);
        let mut allocate = vk::MemoryAllocateInfo::default()
            .allocation_size(info.allocation_size)
            .memory_type_index(type_index)
            .push_next(&mut import);
        if info.dedicated {
            allocate = allocate.push_next(&mut dedicated);
        }
        // SAFETY: a valid allocate info; on success the driver owns the descriptor.
        let memory = match unsafe { d.allocate_memory(&allocate, None) } {
            Ok(m) => {
                // The driver closes it when the memory is freed.
                let _ = fd.into_raw_fd();
                m
            }
            Err(e) => {
                // SAFETY: nothing else refers to it; `fd` is still ours and closed on return.
                unsafe { d.destroy_buffer(buffer, None) };
                return Err(fail("vkAllocateMemory importing an opaque file descriptor", e));
            }
        };
        // SAFETY: a fresh buffer and memory that fits it, at offset 0.
        if let Err(e) = unsafe { d.bind_buffer_memory(buffer, memory, 0) } {
            // SAFETY: nothing else refers to them.
            unsafe {
                d.destroy_buffer(buffer, None);
                d.free_memory(memory, None);
            }
            return Err(fail("vkBindBufferMemory", e));
        }
        Ok((buffer, memory))
    }
}

/// Lower-case hexadecimal.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The Vulkan usages wgpu-hal gives a buffer of `USAGE` (storage, transfer source and
/// destination), so the buffer created here is one wgpu may use as `USAGE`.
fn vulkan_usage() -> vk::BufferUsageFlags {
    vk::BufferUsageFlags::STORAGE_BUFFER | vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST
}

/// The first device-local memory type among `allowed`, preferring one that is not also
/// host-visible (the GPU's own memory rather than a window onto it).
fn memory_type(props: &vk::PhysicalDeviceMemoryProperties, allowed: u32) -> Option<u32> {
    let types = &props.memory_types[..props.memory_type_count as usize];
    let candidates = || {
        types.iter().enumerate().filter(move |(i, t)| {
            allowed & (1 << i) != 0 && t.property_flags.contains(vk::MemoryPropertyFlags::DEVICE_LOCAL)
        })
    };
    candidates()
        .find(|(_, t)| !t.property_flags.contains(vk::MemoryPropertyFlags::HOST_VISIBLE))
        .or_else(|| candidates().next())
        .map(|(i, _)| i as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(flags: &[vk::MemoryPropertyFlags]) -> vk::PhysicalDeviceMemoryProperties {
        let mut p = vk::PhysicalDeviceMemoryProperties { memory_type_count: flags.len() as u32, ..Default::default() };
        for (i, &f) in flags.iter().enumerate() {
            p.memory_types[i].property_flags = f;
        }
        p
    }

    #[test]
    fn the_memory_type_is_device_local_and_allowed_preferring_the_gpus_own() {
        use vk::MemoryPropertyFlags as F;
        let p = props(&[F::HOST_VISIBLE, F::DEVICE_LOCAL | F::HOST_VISIBLE, F::DEVICE_LOCAL]);
        assert_eq!(memory_type(&p, 0b111), Some(2));
        assert_eq!(memory_type(&p, 0b011), Some(1));
        assert_eq!(memory_type(&p, 0b001), None);
        assert_eq!(memory_type(&p, 0), None);
    }
}
