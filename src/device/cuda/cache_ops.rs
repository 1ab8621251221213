//! Launches the cache operations of kernels/cache_ops.cu: new tokens' K/V written through a slot
//! mapping, and whole blocks copied between block buffers — in device memory (copy-on-write) or
//! in pinned host memory mapped into the device's address space (swap out and in). Every pair of
//! one call goes in one launch (split only past the grid's 65,535 rows), where vLLM issues one
//! `cudaMemcpyAsync` per block; [`CudaDevice::copy_blocks_per_memcpy`] does it vLLM's way, to
//! compare. Pairs and slots are checked against the buffers before anything is launched.

use super::driver::{failed, DeviceBuffer, PinnedBuffer};
use super::{CudaDevice, DeviceError};
use crate::device::cpu::cache_ops::{check_pairs, check_slots};
use crate::kv::{KvElem, KvSpec};
use crate::launch::cache_ops::{BlockCopies, SlotWrites};
use cudarc::driver::{sys, DeviceRepr, LaunchConfig};

/// Where a block buffer lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockMemory {
    Device,
    /// Page-locked host memory, mapped so kernels read and write it over the bus.
    PinnedHost,
}

enum Storage {
    Device(DeviceBuffer<u8>),
    /// `cuMemFreeHost` waits for the copies still using it.
    Pinned(PinnedBuffer),
}

/// `num_blocks` blocks of `block_bytes` each, on the device or in mapped pinned host memory.
pub struct BlockBuffer {
    storage: Storage,
    /// The address kernels and copies use (for pinned memory, its device mapping).
    device_ptr: u64,
    pub num_blocks: usize,
    pub block_bytes: usize,
}

impl BlockBuffer {
    pub fn memory(&self) -> BlockMemory {
        match self.storage {
            Storage::Device(_) => BlockMemory::Device,
            Storage::Pinned(_) => BlockMemory::PinnedHost,
        }
    }

    pub fn bytes(&self) -> usize {
        self.num_blocks * self.block_bytes
    }
}

impl CudaDevice {
    /// A buffer of `num_blocks` blocks of `block_bytes` (a multiple of 16: the kernel moves
    /// 16-byte vectors), zeroed.
    pub fn alloc_blocks(
        &self,
        num_blocks: usize,
        block_bytes: usize,
        memory: BlockMemory,
    ) -> Result<BlockBuffer, DeviceError> {
        if block_bytes == 0 || !block_bytes.is_multiple_of(16) {
            return Err(DeviceError::Invalid(format!(
                "block of {block_bytes} bytes: block copies need a positive multiple of 16 bytes"
            )));
        }
        let bytes = num_blocks.checked_mul(block_bytes).ok_or_else(|| {
            DeviceError::Invalid(format!(
                "{num_blocks} blocks of {block_bytes} bytes overflow"
            ))
        })?;
        let (storage, device_ptr) = match memory {
            BlockMemory::Device => {
                let name = format!("{num_blocks} blocks of {block_bytes} bytes on the device");
                let buf = self.stream.alloc_zeros::<u8>(&name, bytes.max(1))?;
                let ptr = buf.ptr();
                (Storage::Device(buf), ptr)
            }
            BlockMemory::PinnedHost => {
                let name = format!("{num_blocks} blocks of {block_bytes} bytes on the host");
                let mut pinned = PinnedBuffer::mapped(&self.gpu, &name, bytes.max(1))?;
                pinned.as_mut().fill(0);
                let dev = pinned.device_ptr()?;
                (Storage::Pinned(pinned), dev)
            }
        };
        Ok(BlockBuffer {
            storage,
            device_ptr,
            num_blocks,
            block_bytes,
        })
    }

    /// Replaces the buffer's contents with `bytes` (its exact size).
    pub fn upload_blocks(&self, buf: &mut BlockBuffer, bytes: &[u8]) -> Result<(), DeviceError> {
        if bytes.len() != buf.bytes() {
            return Err(DeviceError::Invalid(format!(
                "{} bytes for a block buffer of {}",
                bytes.len(),
                buf.bytes()
            )));
        }
        match &mut buf.storage {
            Storage::Device(dev) => self.stream.write(dev, bytes)?,
            Storage::Pinned(pinned) => {
                self.stream
                    .synchronize(|| "before writing a pinned block buffer".into())?;
                pinned.as_mut()[..bytes.len()].copy_from_slice(bytes);
            }
        }
        Ok(())
    }

    /// The buffer's contents, after the work queued on the device stream.
    pub fn download_blocks(&self, buf: &BlockBuffer) -> Result<Vec<u8>, DeviceError> {
        let n = buf.bytes();
        match &buf.storage {
            Storage::Device(dev) => {
                let mut out = self.stream.download(dev)?;
                out.truncate(n);
                Ok(out)
            }
            Storage::Pinned(pinned) => {
                self.stream
                    .synchronize(|| "before reading a pinned block buffer".into())?;
                Ok(pinned.as_ref()[..n].to_vec())
            }
        }
    }

    /// Copies block `pairs[i][0]` of `src` to block `pairs[i][1]` of `dst`, every pair in one
    /// launch of `copy_blocks` (queued on the device stream, not waited for).
    pub fn copy_blocks(
        &self,
        src: &BlockBuffer,
        dst: &mut BlockBuffer,
        pairs: &[[i32; 2]],
    ) -> Result<(), DeviceError> {
        check_copy(src, dst, pairs)?;
        if pairs.is_empty() {
            return Ok(());
        }
        let flat: Vec<i32> = pairs.iter().flatten().copied().collect();
        let pairs_dev = self.stream.upload("copy_blocks' block pairs", &flat)?;
        let f = self.function("cache_ops", "copy_blocks")?;
        let plan = BlockCopies::new(src.block_bytes, pairs.len())?;
        for range in &plan.launches {
            let chunk_ptr = pairs_dev.ptr() + (range.start * 2 * std::mem::size_of::<i32>()) as u64;
            let cfg = LaunchConfig {
                grid_dim: (plan.ctas_per_block, range.len() as u32, 1),
                block_dim: (plan.threads, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut b = f.launch(&self.stream);
            b.arg(&dst.device_ptr)
                .arg(&src.device_ptr)
                .arg(&chunk_ptr)
                .arg(&plan.block_vecs);
            // SAFETY: the signature is copy_blocks(dst, src, pairs, block_vecs); every pair was
            // checked against both buffers, which stay alive (borrowed) while the stream runs it:
            // `pairs_dev` is freed on the stream, after the launches.
            unsafe { b.launch(cfg)? };
        }
        Ok(())
    }

    /// The same copies as [`Self::copy_blocks`], one `cuMemcpyAsync` per pair, as vLLM swaps.
    pub fn copy_blocks_per_memcpy(
        &self,
        src: &BlockBuffer,
        dst: &mut BlockBuffer,
        pairs: &[[i32; 2]],
    ) -> Result<(), DeviceError> {
        check_copy(src, dst, pairs)?;
        let bytes = src.block_bytes;
        for &[s, d] in pairs {
            let (from, to) = (s as usize * bytes, d as usize * bytes);
            // SAFETY: both ranges were checked to lie inside their live buffers.
            unsafe {
                self.memcpy(
                    src.device_ptr + from as u64,
                    dst.device_ptr + to as u64,
                    bytes,
                    || format!("copying block {s} to block {d} ({bytes} bytes)"),
                )
            }?;
        }
        Ok(())
    }

    /// One `cuMemcpyAsync` of `bytes` from the start of `src` to the start of `dst`: the
    /// bandwidth limit block copies between these two memories are measured against.
    pub fn copy_contiguous(
        &self,
        src: &BlockBuffer,
        dst: &mut BlockBuffer,
        bytes: usize,
    ) -> Result<(), DeviceError> {
        if bytes > src.bytes() || bytes > dst.bytes() {
            return Err(DeviceError::Invalid(format!(
                "copy of {bytes} bytes between buffers of {} and {}",
                src.bytes(),
                dst.bytes()
            )));
        }
        // SAFETY: both ranges lie inside live buffers (checked above).
        unsafe {
            self.memcpy(src.device_ptr, dst.device_ptr, bytes, || {
                format!("copying {bytes} bytes between block buffers")
            })
        }
    }

    /// One `cuMemcpyAsync` of `bytes` on the device stream; unified addressing lets it copy in
    /// any direction (either side may be mapped pinned host memory).
    ///
    /// # Safety
    /// Both ranges lie inside live allocations.
    unsafe fn memcpy(
        &self,
        src: u64,
        dst: u64,
        bytes: usize,
        doing: impl Fn() -> String,
    ) -> Result<(), DeviceError> {
        self.gpu.bind(&doing)?;
        // SAFETY: per the caller.
        unsafe { sys::cuMemcpyAsync(dst, src, bytes, self.stream.raw()) }
            .result()
            .map_err(failed("cuMemcpyAsync", doing))
    }

    /// Writes token `i`'s K and V (`k_new`, `v_new`: `[num_tokens, num_kv_heads, head_dim]`)
    /// into slot `slots[i]` of pools of `num_blocks` blocks of `spec`; negative slots are
    /// skipped. Slots are checked against the pools first.
    #[allow(clippy::too_many_arguments)]
    pub fn write_kv_slots<T: KvElem + DeviceRepr>(
        &self,
        spec: &KvSpec,
        num_blocks: usize,
        k_cache: &mut DeviceBuffer<T>,
        v_cache: &mut DeviceBuffer<T>,
        k_new: &DeviceBuffer<T>,
        v_new: &DeviceBuffer<T>,
        slots: &[i64],
    ) -> Result<(), DeviceError> {
        let pools = (k_cache, v_cache);
        self.slot_writes(spec, num_blocks, pools, (k_new, v_new), slots, None)
    }

    /// [`Self::write_kv_slots`] into fp8 pools (`KV`, `spec.dtype`) from new K/V of `T`,
    /// quantised with per-KV-head scales (`[num_kv_heads]` each, on the device). The scales must be
    /// finite and positive (`Problem` and `kv::fp8::calibration` make them so): they are not read
    /// back here, and a zero scale would saturate every element to the format's largest value.
    #[allow(clippy::too_many_arguments)]
    pub fn quantize_kv_slots<T: KvElem + DeviceRepr, KV: KvElem + DeviceRepr>(
        &self,
        spec: &KvSpec,
        num_blocks: usize,
        k_cache: &mut DeviceBuffer<KV>,
        v_cache: &mut DeviceBuffer<KV>,
        k_new: &DeviceBuffer<T>,
        v_new: &DeviceBuffer<T>,
        slots: &[i64],
        scales: (&DeviceBuffer<f32>, &DeviceBuffer<f32>),
    ) -> Result<(), DeviceError> {
        if KV::DTYPE.fp8().is_none() || T::DTYPE.fp8().is_some() {
            return Err(DeviceError::Invalid(format!(
                "quantising writes take new K/V in f16, bf16 or f32 into fp8 pools, not {} into {}",
                T::DTYPE,
                KV::DTYPE
            )));
        }
        if scales.0.len() != spec.num_kv_heads || scales.1.len() != spec.num_kv_heads {
            return Err(DeviceError::Invalid(format!(
                "{} K and {} V scales for {} KV heads",
                scales.0.len(),
                scales.1.len(),
                spec.num_kv_heads
            )));
        }
        let pools = (k_cache, v_cache);
        self.slot_writes(spec, num_blocks, pools, (k_new, v_new), slots, Some(scales))
    }

    /// Checks, then launches `write_kv_slots_*` or (with scales) `quantize_kv_slots_*`.
    fn slot_writes<T: KvElem + DeviceRepr, KV: KvElem + DeviceRepr>(
        &self,
        spec: &KvSpec,
        num_blocks: usize,
        (k_cache, v_cache): (&mut DeviceBuffer<KV>, &mut DeviceBuffer<KV>),
        (k_new, v_new): (&DeviceBuffer<T>, &DeviceBuffer<T>),
        slots: &[i64],
        scales: Option<(&DeviceBuffer<f32>, &DeviceBuffer<f32>)>,
    ) -> Result<(), DeviceError> {
        if spec.dtype != KV::DTYPE {
            return Err(DeviceError::Invalid(format!(
                "{} pools for a {} spec",
                KV::DTYPE,
                spec.dtype
            )));
        }
        let pool_elems = num_blocks * spec.elems_per_block();
        let new_elems = slots.len() * spec.elems_per_token();
        if k_cache.len() < pool_elems || v_cache.len() < pool_elems {
            return Err(DeviceError::Invalid(format!(
                "K/V pools hold {} and {} elements, {num_blocks} blocks need {pool_elems}",
                k_cache.len(),
                v_cache.len()
            )));
        }
        if k_new.len() != new_elems || v_new.len() != new_elems {
            return Err(DeviceError::Invalid(format!(
                "new K/V hold {} and {} elements, {} tokens need {new_elems}",
                k_new.len(),
                v_new.len(),
                slots.len()
            )));
        }
        check_slots(spec, num_blocks, slots).map_err(|e| DeviceError::Invalid(e.to_string()))?;
        if slots.is_empty() {
            return Ok(());
        }
        let plan = SlotWrites::new(spec, T::DTYPE, slots.len())?;
        let slots_dev = self.stream.upload("the slot mapping", slots)?;
        let f = self.function("cache_ops", &plan.kernel)?;
        let cfg = LaunchConfig {
            grid_dim: (plan.grid, 1, 1),
            block_dim: (plan.threads, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = f.launch(&self.stream);
        b.arg(&*k_cache)
            .arg(&*v_cache)
            .arg(k_new)
            .arg(v_new)
            .arg(&slots_dev);
        if let Some((k_scale, v_scale)) = scales {
            b.arg(k_scale).arg(v_scale);
        }
        for s in &plan.scalars {
            b.arg(s);
        }
        // SAFETY: the signature is write_kv_slots_<dtype>(k_cache, v_cache, k_new, v_new, slots,
        // num_kv_heads, head_dim, log2_block_size), or quantize_kv_slots_<dtype>_to_<fp8> with
        // (k_scale, v_scale) after the slots (kernels/cache_ops.cu; the plan picked the kernel from
        // the same dtypes); slots (in range, none twice), sizes and scales were checked above.
        unsafe { b.launch(cfg)? };
        Ok(())
    }
}

/// Pairs checked against both buffers, whose blocks must be the same size.
fn check_copy(src: &BlockBuffer, dst: &BlockBuffer, pairs: &[[i32; 2]]) -> Result<(), DeviceError> {
    if src.block_bytes != dst.block_bytes {
        return Err(DeviceError::Invalid(format!(
            "blocks of {} bytes copied into blocks of {}",
            src.block_bytes, dst.block_bytes
        )));
    }
    check_pairs(pairs, src.num_blocks, dst.num_blocks)
        .map_err(|e| DeviceError::Invalid(e.to_string()))
}
