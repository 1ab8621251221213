//! Swapping KV blocks out of the pool into host memory and back: all of a call's blocks in one
//! batched operation against one copy per block (what vLLM's `swap_blocks` does), each against
//! the contiguous copy of the same bytes between the same memories, measured in the same run.
//!
//! On a GPU the pool is device memory and the host side is pinned memory mapped into the device:
//! the batch is one `copy_blocks` launch, the per-block way one `cuMemcpyAsync` per block, the
//! limit one `cuMemcpyAsync` of all the bytes. On the CPU both sides are host memory: the batch
//! copies blocks on every core, the per-block way one after another, the limit is a parallel
//! contiguous copy.
//!
//! Every measurement is checked: blocks are swapped out of random places of a random pool into
//! shuffled host slots and back into other places of a second, poisoned pool; each block must come
//! back bit for bit where it was sent, by both methods, and every other block must stay poisoned.

use crate::device::cpu::cache_ops::{check_pairs, CacheOpError};
use crate::device::{Device, DeviceError};
use crate::host_memory::{self, TooLarge};
use crate::stats::median;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;
use serde::Serialize;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum SwapError {
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error(transparent)]
    CacheOp(#[from] CacheOpError),
    #[error(transparent)]
    TooLarge(#[from] TooLarge),
}

/// One swap measurement: `swap_blocks` blocks of `block_bytes` out of a pool of `pool_blocks`.
#[derive(Debug, Clone, Serialize)]
pub struct SwapOptions {
    pub block_bytes: usize,
    pub pool_blocks: usize,
    pub swap_blocks: usize,
    /// Timed runs per figure (the median is reported), after one warm-up.
    pub iters: usize,
    pub seed: u64,
}

/// One direction at one block size.
#[derive(Debug, Clone, Serialize)]
pub struct DirectionReport {
    pub batched_us: f64,
    pub per_block_us: f64,
    pub contiguous_us: f64,
    pub batched_gbps: f64,
    pub per_block_gbps: f64,
    /// The contiguous copy of the same bytes between the same memories.
    pub limit_gbps: f64,
    pub batched_frac_of_limit: f64,
    pub per_block_frac_of_limit: f64,
    /// per-block time / batched time.
    pub batched_speedup: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SwapReport {
    pub block_bytes: usize,
    pub swap_blocks: usize,
    pub swap_bytes: usize,
    /// Device pool to host.
    pub swap_out: DirectionReport,
    /// Host back to the device pool.
    pub swap_in: DirectionReport,
    /// Every block came back where it was sent, by both methods, and nothing else was written.
    pub data_intact: bool,
}

/// A device's three buffers (the pool, the host slots, a second pool) and the three ways of
/// moving a direction's bytes, timed.
trait SwapDevice: Sized {
    /// Which copies the methods below make: pool → host slots (`out`), else host slots →
    /// second pool.
    fn set_direction(&mut self, out: bool);
    /// Fills the second pool with [`POISON`].
    fn poison_second_pool(&mut self) -> Result<(), SwapError>;
    fn second_pool(&self) -> Result<Vec<u8>, SwapError>;
    /// Copies the pairs (src block, dst block) in one batched operation.
    fn batched(&mut self, pairs: &[[i32; 2]]) -> Result<(), SwapError>;
    /// The same pairs one copy at a time.
    fn per_block(&mut self, pairs: &[[i32; 2]]) -> Result<(), SwapError>;
    /// `bytes` contiguous bytes between the same two memories.
    fn contiguous(&mut self, bytes: usize) -> Result<(), SwapError>;
    /// Seconds of `runs` back-to-back runs of `f`, one value per run.
    fn time(
        &mut self,
        runs: usize,
        f: &mut dyn FnMut(&mut Self) -> Result<(), SwapError>,
    ) -> Result<Vec<f64>, SwapError>;
}

/// Random pool contents, shuffled pairs out and back, and the check of the result.
struct Plan {
    pool: Vec<u8>,
    out_pairs: Vec<[i32; 2]>,
    in_pairs: Vec<[i32; 2]>,
}

const POISON: u8 = 0xA5;

/// Host copies of the pool a measurement holds at once: the plan's, the expected result, the
/// downloaded second pool, and on the CPU the source and second pools themselves.
fn host_pools(pools_on_host: bool) -> u64 {
    if pools_on_host {
        5
    } else {
        3
    }
}

fn plan(opts: &SwapOptions, pools_on_host: bool) -> Result<Plan, SwapError> {
    if opts.block_bytes == 0 || !opts.block_bytes.is_multiple_of(16) {
        return Err(SwapError::Invalid(format!(
            "blocks of {} bytes: block copies need a positive multiple of 16 bytes",
            opts.block_bytes
        )));
    }
    if opts.swap_blocks == 0 || opts.swap_blocks > opts.pool_blocks {
        return Err(SwapError::Invalid(format!(
            "{} blocks to swap out of a pool of {}: need 1 to the pool size",
            opts.swap_blocks, opts.pool_blocks
        )));
    }
    if opts.pool_blocks > i32::MAX as usize {
        return Err(SwapError::Invalid(format!(
            "{} blocks: block numbers are 32-bit",
            opts.pool_blocks
        )));
    }
    let bytes = opts
        .pool_blocks
        .checked_mul(opts.block_bytes)
        .filter(|&b| b <= 64 << 30)
        .ok_or_else(|| {
            SwapError::Invalid(format!(
                "{} blocks of {} bytes: pools over 64 GiB are refused",
                opts.pool_blocks, opts.block_bytes
            ))
        })?;
    let slots = opts.swap_blocks as u64 * opts.block_bytes as u64;
    let need = (bytes as u64 * host_pools(pools_on_host)).saturating_add(slots);
    let what = format!("a swap over a pool of {}", host_memory::bytes(bytes as u64));
    host_memory::ensure_fits(need, &what)?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(opts.seed);
    let mut pool = vec![0u8; bytes];
    pool.par_chunks_mut(1 << 20).enumerate().for_each(|(i, c)| {
        let mut r = rand::rngs::StdRng::seed_from_u64(opts.seed ^ ((i as u64 + 1) << 20));
        r.fill(c);
    });
    let pick = |rng: &mut rand::rngs::StdRng| {
        let mut blocks: Vec<i32> = (0..opts.pool_blocks as i32).collect();
        blocks.shuffle(rng);
        blocks.truncate(opts.swap_blocks);
        blocks
    };
    let sources = pick(&mut rng);
    let destinations = pick(&mut rng);
    let mut slots: Vec<i32> = (0..opts.swap_blocks as i32).collect();
    slots.shuffle(&mut rng);
    let out_pairs = sources.iter().zip(&slots).map(|(&s, &h)| [s, h]).collect();
    let in_pairs = slots
        .iter()
        .zip(&destinations)
        .map(|(&h, &d)| [h, d])
        .collect();
    Ok(Plan {
        pool,
        out_pairs,
        in_pairs,
    })
}

impl Plan {
    /// The second pool as it must be after the round trip.
    fn expected(&self, block_bytes: usize) -> Vec<u8> {
        let mut want = vec![POISON; self.pool.len()];
        for (&[src, _], &[_, dst]) in self.out_pairs.iter().zip(&self.in_pairs) {
            let (s, d) = (src as usize * block_bytes, dst as usize * block_bytes);
            want[d..d + block_bytes].copy_from_slice(&self.pool[s..s + block_bytes]);
        }
        want
    }
}

fn direction(
    bytes: usize,
    batched: &[f64],
    per_block: &[f64],
    contiguous: &[f64],
) -> DirectionReport {
    let (b, p, c) = (median(batched), median(per_block), median(contiguous));
    let gbps = |s: f64| bytes as f64 / s / 1e9;
    DirectionReport {
        batched_us: b * 1e6,
        per_block_us: p * 1e6,
        contiguous_us: c * 1e6,
        batched_gbps: gbps(b),
        per_block_gbps: gbps(p),
        limit_gbps: gbps(c),
        batched_frac_of_limit: c / b,
        per_block_frac_of_limit: c / p,
        batched_speedup: p / b,
    }
}

/// Measures one block size on `device`.
pub fn measure(device: &Device, opts: &SwapOptions) -> Result<SwapReport, SwapError> {
    let plan = plan(opts, !device.is_cuda())?;
    match device {
        Device::Cpu => run(&plan, opts, CpuSwap::new(&plan, opts)),
        Device::Cuda(dev) => run(&plan, opts, cuda::CudaSwap::new(dev.clone(), &plan, opts)?),
    }
}

fn run<M: SwapDevice>(plan: &Plan, opts: &SwapOptions, mut m: M) -> Result<SwapReport, SwapError> {
    let want = plan.expected(opts.block_bytes);
    let bytes = opts.swap_blocks * opts.block_bytes;
    let iters = opts.iters.max(1);
    // Correctness first, each method on its own poisoned destination.
    let mut intact = true;
    for batched in [true, false] {
        m.poison_second_pool()?;
        m.set_direction(true);
        if batched {
            m.batched(&plan.out_pairs)?;
        } else {
            m.per_block(&plan.out_pairs)?;
        }
        m.set_direction(false);
        if batched {
            m.batched(&plan.in_pairs)?;
        } else {
            m.per_block(&plan.in_pairs)?;
        }
        intact &= m.second_pool()? == want;
    }
    let mut report = |out: bool, pairs: &[[i32; 2]]| -> Result<DirectionReport, SwapError> {
        m.set_direction(out);
        let b = m.time(iters, &mut |m| m.batched(pairs))?;
        let p = m.time(iters, &mut |m| m.per_block(pairs))?;
        let c = m.time(iters, &mut |m| m.contiguous(bytes))?;
        Ok(direction(bytes, &b, &p, &c))
    };
    let swap_out = report(true, &plan.out_pairs)?;
    let swap_in = report(false, &plan.in_pairs)?;
    Ok(SwapReport {
        block_bytes: opts.block_bytes,
        swap_blocks: opts.swap_blocks,
        swap_bytes: bytes,
        swap_out,
        swap_in,
        data_intact: intact,
    })
}

/// The CPU: pool, host slots and second pool are host memory.
struct CpuSwap {
    pool: Vec<u8>,
    host: Vec<u8>,
    second: Vec<u8>,
    block_bytes: usize,
    out: bool,
}

impl CpuSwap {
    fn new(plan: &Plan, opts: &SwapOptions) -> CpuSwap {
        CpuSwap {
            pool: plan.pool.clone(),
            host: vec![0u8; opts.swap_blocks * opts.block_bytes],
            second: vec![POISON; plan.pool.len()],
            block_bytes: opts.block_bytes,
            out: true,
        }
    }

    /// (source, destination) of the current direction.
    fn buffers(&mut self) -> (&[u8], &mut [u8]) {
        if self.out {
            (&self.pool, &mut self.host)
        } else {
            (&self.host, &mut self.second)
        }
    }
}

impl SwapDevice for CpuSwap {
    fn set_direction(&mut self, out: bool) {
        self.out = out;
    }
    fn poison_second_pool(&mut self) -> Result<(), SwapError> {
        self.second.fill(POISON);
        Ok(())
    }
    fn second_pool(&self) -> Result<Vec<u8>, SwapError> {
        Ok(self.second.clone())
    }

    fn batched(&mut self, pairs: &[[i32; 2]]) -> Result<(), SwapError> {
        let bb = self.block_bytes;
        let (src, dst) = self.buffers();
        check_pairs(pairs, src.len() / bb, dst.len() / bb)?;
        // Each destination block is written by at most one pair (the last one, as in a
        // sequential loop), so the blocks can be copied in parallel.
        let mut source_of = vec![None; dst.len() / bb];
        for &[s, d] in pairs {
            source_of[d as usize] = Some(s as usize);
        }
        dst.par_chunks_mut(bb)
            .zip(source_of)
            .for_each(|(block, s)| {
                if let Some(s) = s {
                    block.copy_from_slice(&src[s * bb..(s + 1) * bb]);
                }
            });
        Ok(())
    }

    fn per_block(&mut self, pairs: &[[i32; 2]]) -> Result<(), SwapError> {
        let bb = self.block_bytes;
        let (src, dst) = self.buffers();
        crate::device::cpu::cache_ops::copy_blocks(bb, src, dst, pairs)?;
        Ok(())
    }

    fn contiguous(&mut self, bytes: usize) -> Result<(), SwapError> {
        let (src, dst) = self.buffers();
        dst[..bytes]
            .par_chunks_mut(1 << 20)
            .zip(src[..bytes].par_chunks(1 << 20))
            .for_each(|(d, s)| d.copy_from_slice(s));
        Ok(())
    }

    fn time(
        &mut self,
        runs: usize,
        f: &mut dyn FnMut(&mut Self) -> Result<(), SwapError>,
    ) -> Result<Vec<f64>, SwapError> {
        crate::timing::try_samples_secs(1, runs, || f(self))
    }
}

mod cuda {
    //! The GPU: the pool and the second pool in device memory, the host slots in mapped pinned
    //! memory; times from CUDA events.

    use super::{Plan, SwapDevice, SwapError, SwapOptions, POISON};
    use crate::device::cuda::cache_ops::{BlockBuffer, BlockMemory};
    use crate::device::cuda::CudaDevice;
    use std::sync::Arc;

    pub struct CudaSwap {
        dev: Arc<CudaDevice>,
        pool: BlockBuffer,
        host: BlockBuffer,
        second: BlockBuffer,
        out: bool,
    }

    impl CudaSwap {
        pub fn new(
            dev: Arc<CudaDevice>,
            plan: &Plan,
            opts: &SwapOptions,
        ) -> Result<CudaSwap, SwapError> {
            let bb = opts.block_bytes;
            let mut pool = dev.alloc_blocks(opts.pool_blocks, bb, BlockMemory::Device)?;
            dev.upload_blocks(&mut pool, &plan.pool)?;
            let host = dev.alloc_blocks(opts.swap_blocks, bb, BlockMemory::PinnedHost)?;
            let second = dev.alloc_blocks(opts.pool_blocks, bb, BlockMemory::Device)?;
            Ok(CudaSwap {
                dev,
                pool,
                host,
                second,
                out: true,
            })
        }

        /// Runs `f` on (source, destination) of the current direction.
        fn with<R>(
            &mut self,
            f: impl FnOnce(&CudaDevice, &BlockBuffer, &mut BlockBuffer) -> R,
        ) -> R {
            if self.out {
                f(&self.dev, &self.pool, &mut self.host)
            } else {
                f(&self.dev, &self.host, &mut self.second)
            }
        }
    }

    impl SwapDevice for CudaSwap {
        fn set_direction(&mut self, out: bool) {
            self.out = out;
        }
        fn poison_second_pool(&mut self) -> Result<(), SwapError> {
            let poison = vec![POISON; self.second.bytes()];
            self.dev.upload_blocks(&mut self.second, &poison)?;
            Ok(())
        }
        fn second_pool(&self) -> Result<Vec<u8>, SwapError> {
            Ok(self.dev.download_blocks(&self.second)?)
        }

        fn batched(&mut self, pairs: &[[i32; 2]]) -> Result<(), SwapError> {
            Ok(self.with(|d, s, t| d.copy_blocks(s, t, pairs))?)
        }
        fn per_block(&mut self, pairs: &[[i32; 2]]) -> Result<(), SwapError> {
            Ok(self.with(|d, s, t| d.copy_blocks_per_memcpy(s, t, pairs))?)
        }
        fn contiguous(&mut self, bytes: usize) -> Result<(), SwapError> {
            Ok(self.with(|d, s, t| d.copy_contiguous(s, t, bytes))?)
        }
        fn time(
            &mut self,
            runs: usize,
            f: &mut dyn FnMut(&mut Self) -> Result<(), SwapError>,
        ) -> Result<Vec<f64>, SwapError> {
            let dev = self.dev.clone();
            let mut err = None;
            let ms = dev.time_ms(1, runs, || {
                f(self).map_err(|e| {
                    let text = e.to_string();
                    err = Some(e);
                    crate::device::DeviceError::Invalid(text)
                })
            });
            match (ms, err) {
                (_, Some(e)) => Err(e),
                (Ok(ms), None) => Ok(ms.into_iter().map(|m| m / 1e3).collect()),
                (Err(e), None) => Err(e.into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(block_bytes: usize, pool: usize, swap: usize) -> SwapOptions {
        SwapOptions {
            block_bytes,
            pool_blocks: pool,
            swap_blocks: swap,
            iters: 2,
            seed: 7,
        }
    }

    #[test]
    fn blocks_come_back_where_they_were_sent_on_the_cpu() {
        for (bb, pool, swap) in [(16, 1, 1), (64, 37, 5), (4096, 300, 300)] {
            let r = measure(&Device::Cpu, &opts(bb, pool, swap)).unwrap();
            assert!(r.data_intact, "{bb} {pool} {swap}");
            assert_eq!(r.swap_bytes, bb * swap);
            for d in [&r.swap_out, &r.swap_in] {
                assert!(d.batched_gbps > 0.0 && d.limit_gbps.is_finite());
            }
        }
    }

    #[test]
    fn the_check_sees_a_wrong_copy() {
        let o = opts(32, 20, 6);
        let p = plan(&o, true).unwrap();
        let mut m = CpuSwap::new(&p, &o);
        m.set_direction(true);
        m.batched(&p.out_pairs).unwrap();
        m.set_direction(false);
        // One pair sent to the wrong block (one no other pair writes: two writers are refused).
        let mut wrong = p.in_pairs.clone();
        let unused = (0..20)
            .find(|b| wrong.iter().all(|&[_, d]| d != *b))
            .unwrap();
        wrong[0][1] = unused;
        m.batched(&wrong).unwrap();
        assert_ne!(m.second_pool().unwrap(), p.expected(32));
        m.poison_second_pool().unwrap();
        m.batched(&p.in_pairs).unwrap();
        assert_eq!(m.second_pool().unwrap(), p.expected(32));
    }

    #[test]
    fn bad_sizes_are_errors() {
        for o in [
            opts(0, 4, 1),
            opts(24, 4, 1),
            opts(16, 4, 0),
            opts(16, 4, 5),
        ] {
            assert!(matches!(plan(&o, true), Err(SwapError::Invalid(_))));
        }
    }
}
