//! The CPU bandwidth probe: host memory through the CPU reference gathers
//! (`device::cpu::gather::{gather_copy, gather_sum}`), with one page size per probe.
//!
//! K, V and the copy-out buffer are [`HostBuf`]s of `pool_bytes / 2` each, filled with random
//! values of the layer's dtype on first use. The gather's table spreads every block of the pool
//! over sequences of `seq_tokens` tokens in shuffled physical order, so each block is read once per
//! pass and neighbouring logical blocks are far apart in memory, as in a long-running engine.
//!
//! Attention: the CPU decode attention (`device::cpu::attention`) on the options' batch, its K and
//! V pools in memory of the probe's page size (see [`super::attention_probe`]).
//!
//! Limits: the crate's one CPU memory limit ([`crate::device::cpu::stream`], huge pages where
//! available whatever the probe's page size) over the bytes the read-only gather reads, so a 4 KiB
//! probe shows what its page size costs against what the memory can give.

use super::attention_probe::cpu_attention_gbps;
use super::bandwidth::{BandwidthProbe, GatherRates, LimitSet, Limits, ProbeError, ProbeOptions};
use crate::device::cpu::gather::{gather_copy, gather_sum};
use crate::device::cpu::last_level_cache::last_level_cache;
use crate::device::cpu::pages::{thp_available, HostBuf, Pages};
use crate::device::cpu::stream::{limit_bytes, MemoryProbe, LLC_MULTIPLE};
use crate::kv::{BlockTable, Dtype, Fp8E4m3, Fp8E5m2, KvElem, KvSpec, MAX_BLOCK_SIZE};
use crate::timing::median_secs;
use half::{bf16, f16};
use rand::{seq::SliceRandom, SeedableRng};
use rayon::prelude::*;
use std::cell::RefCell;
use std::rc::Rc;

/// Elements per parallel task of the limit loops.
const CHUNK: usize = 1 << 16;
/// Copies take a tenth of the time of an f16 sum over the same bytes, so a scheduler hiccup
/// weighs more on them: they get this many times the repetitions.
const FAST_REPS: usize = 3;

struct Buffers {
    k: HostBuf,
    v: HostBuf,
    out: HostBuf,
    dtype: Option<Dtype>,
}

pub struct CpuProbe {
    pages: Pages,
    opts: ProbeOptions,
    bufs: Option<Buffers>,
    /// The limits' buffer, one for every probe of the sweep: it is the same memory whatever the
    /// probe's page size (huge pages where available), so a second would only double the
    /// footprint.
    limit: Rc<RefCell<Option<MemoryProbe>>>,
}

/// Host bytes the CPU probes with `opts` map (checked before they map anything): the limits'
/// buffer, which they share, and for each probe ([`cpu_page_sizes`]) K, V and
/// the copy-out buffer of half the pool each unless only attention and the stream beside it are
/// measured (`answer_only` with attention: no gather, no conversion pass).
pub fn host_bytes(opts: &ProbeOptions) -> u64 {
    let pools = if opts.answer_only && opts.attention.is_some() {
        0
    } else {
        3 * (opts.pool_bytes / 2) * cpu_page_sizes(opts).len()
    };
    (pools + limit_bytes(opts.pool_bytes)) as u64
}

impl CpuProbe {
    /// Maps nothing yet: buffers are mapped and filled on first use, and freed with the probe.
    pub fn new(pages: Pages, opts: ProbeOptions) -> Result<Self, ProbeError> {
        Ok(CpuProbe {
            pages,
            opts,
            bufs: None,
            limit: Rc::default(),
        })
    }

    /// A probe of the same options with `pages`, sharing this one's limits' buffer.
    pub fn beside(&self, pages: Pages) -> Self {
        CpuProbe {
            pages,
            opts: self.opts.clone(),
            bufs: None,
            limit: self.limit.clone(),
        }
    }

    fn half_bytes(&self) -> usize {
        // Whole 2-byte and 4-byte elements.
        super::bandwidth::half_pool_bytes(self.opts.pool_bytes)
    }

    /// The buffers, mapped and filled with random `dtype` values.
    fn buffers(&mut self, dtype: Dtype) -> Result<&mut Buffers, ProbeError> {
        let bytes = self.half_bytes();
        let map = |pages| {
            HostBuf::new(bytes, pages).map_err(|source| ProbeError::Memory { bytes, source })
        };
        if self.bufs.is_none() {
            self.bufs = Some(Buffers {
                k: map(self.pages)?,
                v: map(self.pages)?,
                out: map(self.pages)?,
                dtype: None,
            });
        }
        let b = self.bufs.as_mut().expect("just mapped");
        if b.dtype != Some(dtype) {
            let seed = self.opts.seed;
            for (i, buf) in [&mut b.k, &mut b.v, &mut b.out].into_iter().enumerate() {
                let seed = seed + i as u64;
                match dtype {
                    Dtype::F16 => fill::<f16>(buf.as_mut_slice(), seed),
                    Dtype::Bf16 => fill::<bf16>(buf.as_mut_slice(), seed),
                    Dtype::F32 => fill::<f32>(buf.as_mut_slice(), seed),
                    Dtype::Fp8E4m3 => fill::<Fp8E4m3>(buf.as_mut_slice(), seed),
                    Dtype::Fp8E5m2 => fill::<Fp8E5m2>(buf.as_mut_slice(), seed),
                }
            }
            b.dtype = Some(dtype);
        }
        Ok(b)
    }

    /// The scalar conversion pass over K and V (GB/s of elements read).
    fn measure_convert<T: KvElem>(&mut self) -> Result<f64, ProbeError> {
        let reps = self.opts.reps;
        let b = self.buffers(T::DTYPE)?;
        let (k, v) = (b.k.as_slice::<T>(), b.v.as_slice::<T>());
        let bytes = b.k.len() as f64;
        let convert_s = median_secs(1, reps, || {
            let sum: f32 = [k, v]
                .into_par_iter()
                .flat_map(|p| p.par_chunks(CHUNK))
                .map(|c| c.iter().map(|x| x.to_f32()).sum::<f32>())
                .sum();
            std::hint::black_box(sum);
        });
        Ok(2.0 * bytes / convert_s / 1e9)
    }

    fn measure_limits(&mut self, set: LimitSet) -> Result<Limits, ProbeError> {
        let reps = self.opts.reps;
        let pool_bytes = 2 * self.half_bytes();
        let mut shared = self.limit.borrow_mut();
        if shared.is_none() {
            let probe = MemoryProbe::new(pool_bytes).map_err(|source| ProbeError::Memory {
                bytes: pool_bytes,
                source,
            })?;
            *shared = Some(probe);
        }
        let limit = shared.as_mut().expect("just made");
        // The copy first, as `MemoryProbe::measure` orders them.
        let copy_gbps = (set == LimitSet::CopyAndStream).then(|| limit.measure_copy(reps));
        Ok(Limits {
            copy_gbps,
            stream_gbps: limit.measure_stream(reps),
        })
    }

    fn measure_gather<T: KvElem>(&mut self, spec: &KvSpec) -> Result<GatherRates, ProbeError> {
        let (reps, seq_tokens, seed) = (self.opts.reps, self.opts.seq_tokens, self.opts.seed);
        let half = self.half_bytes();
        let table = shuffled_table(spec, half, seq_tokens, seed)?;
        let tokens: usize = table.lens.iter().map(|&l| l as usize).sum();
        let elems = tokens * spec.elems_per_token();
        let b = self.buffers(T::DTYPE)?;
        let k = &b.k.as_slice::<T>()[..elems];
        let v = &b.v.as_slice::<T>()[..elems];
        let out = &mut b.out.as_mut_slice::<T>()[..elems];
        let mut sums = vec![0.0f32; table.num_seqs() * spec.num_kv_heads];
        let copy_s = median_secs(1, FAST_REPS * reps, || gather_copy(spec, k, &table, out));
        let read_s = median_secs(1, reps, || gather_sum(spec, k, v, &table, &mut sums));
        std::hint::black_box(&sums);
        let bytes = (elems * std::mem::size_of::<T>()) as f64;
        Ok(GatherRates {
            copy_gbps: 2.0 * bytes / copy_s / 1e9,
            read_gbps: 2.0 * bytes / read_s / 1e9,
        })
    }
}

impl BandwidthProbe for CpuProbe {
    fn device(&self) -> String {
        format!("cpu ({} threads)", rayon::current_num_threads())
    }

    fn memory(&self) -> String {
        self.pages.label().into()
    }

    fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if let Some(share) = self.bufs.as_ref().and_then(|b| b.k.huge_page_share()) {
            notes.push(format!(
                "{} probe: {:.0}% of the K pool's resident memory in huge pages",
                self.pages.label(),
                100.0 * share
            ));
        }
        notes.push(last_level_cache().describe());
        let floor = limit_bytes(1);
        if self.opts.pool_bytes < floor {
            notes.push(format!(
                "{} probe: a pool of {} MiB is under {LLC_MULTIPLE}x the last-level cache ({} MiB): \
                 gathers may be served partly from cache and exceed the DRAM stream",
                self.pages.label(),
                self.opts.pool_bytes >> 20,
                floor >> 20
            ));
        }
        if let Some(limit) = self.limit.borrow().as_ref() {
            let share = limit.huge_page_share().unwrap_or(0.0);
            notes.push(format!(
                "limits over {} MiB on every core, best pass, {:.0}% in huge pages",
                limit.bytes() >> 20,
                100.0 * share
            ));
        }
        notes
    }

    fn limits(&mut self, _spec: &KvSpec, set: LimitSet) -> Result<Limits, ProbeError> {
        // Raw words, whatever the dtype: the memory's own limits.
        self.measure_limits(set)
    }

    fn convert_stream_gbps(&mut self, spec: &KvSpec) -> Result<Option<f64>, ProbeError> {
        let gbps = match spec.dtype {
            Dtype::F16 => self.measure_convert::<f16>(),
            Dtype::Bf16 => self.measure_convert::<bf16>(),
            Dtype::F32 => self.measure_convert::<f32>(),
            Dtype::Fp8E4m3 => self.measure_convert::<Fp8E4m3>(),
            Dtype::Fp8E5m2 => self.measure_convert::<Fp8E5m2>(),
        }?;
        Ok(Some(gbps))
    }

    fn gather(&mut self, spec: &KvSpec) -> Result<GatherRates, ProbeError> {
        match spec.dtype {
            Dtype::F16 => self.measure_gather::<f16>(spec),
            Dtype::Bf16 => self.measure_gather::<bf16>(spec),
            Dtype::F32 => self.measure_gather::<f32>(spec),
            Dtype::Fp8E4m3 => self.measure_gather::<Fp8E4m3>(spec),
            Dtype::Fp8E5m2 => self.measure_gather::<Fp8E5m2>(spec),
        }
    }

    fn attention_gbps(&mut self, spec: &KvSpec) -> Result<Option<f64>, ProbeError> {
        let Some(batch) = &self.opts.attention else {
            return Ok(None);
        };
        let (pages, reps, seed) = (self.pages, self.opts.reps, self.opts.seed);
        let gbps = match spec.dtype {
            Dtype::F16 => cpu_attention_gbps::<f16, f16>(spec, batch, pages, reps, seed),
            Dtype::Bf16 => cpu_attention_gbps::<bf16, bf16>(spec, batch, pages, reps, seed),
            Dtype::F32 => cpu_attention_gbps::<f32, f32>(spec, batch, pages, reps, seed),
            // An fp8 cache is read with q in f16 (the models' dtype: q is never quantised).
            Dtype::Fp8E4m3 => cpu_attention_gbps::<f16, Fp8E4m3>(spec, batch, pages, reps, seed),
            Dtype::Fp8E5m2 => cpu_attention_gbps::<f16, Fp8E5m2>(spec, batch, pages, reps, seed),
        }?;
        Ok(Some(gbps))
    }
}

/// Random finite values in [-1, 1), in parallel, deterministic for `seed` (also the GPU probe's).
pub(super) fn fill<T: KvElem>(elems: &mut [T], seed: u64) {
    elems
        .par_chunks_mut(CHUNK)
        .enumerate()
        .for_each(|(c, chunk)| {
            let mut x = seed ^ (c as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            for e in chunk {
                // xorshift64*: cheap, and any value pattern serves a bandwidth test.
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *e = T::from_f32((x >> 40) as f32 / (1u64 << 23) as f32 - 1.0);
            }
        });
}

/// A table over every block of a pool of `pool_bytes` (one of K or V) at `spec`'s block size:
/// physical blocks shuffled, sequences of `seq_tokens` tokens (rounded to whole blocks of the
/// largest block size, so every block size reads the same tokens). Also used by the bench.
pub fn shuffled_table(
    spec: &KvSpec,
    pool_bytes: usize,
    seq_tokens: usize,
    seed: u64,
) -> Result<BlockTable, ProbeError> {
    let token_bytes = spec.elems_per_token() * spec.dtype.bytes();
    let tokens = pool_bytes / token_bytes / MAX_BLOCK_SIZE * MAX_BLOCK_SIZE;
    if tokens == 0 {
        return Err(ProbeError::PoolTooSmall {
            pool_bytes,
            block_bytes: token_bytes * MAX_BLOCK_SIZE,
        });
    }
    let bs = spec.block_size;
    let seq = (seq_tokens / MAX_BLOCK_SIZE).max(1) * MAX_BLOCK_SIZE;
    let mut ids: Vec<u32> = (0..(tokens / bs) as u32).collect();
    ids.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
    let rows: Vec<Vec<u32>> = ids.chunks(seq / bs).map(<[u32]>::to_vec).collect();
    let lens: Vec<usize> = rows.iter().map(|r| r.len() * bs).collect();
    Ok(BlockTable::from_rows(&rows, &lens, bs)?)
}

/// The page sizes of the CPU probes a sweep with `opts` runs, the answer's first: huge pages where
/// the kernel offers them, then 4 KiB pages (not with `answer_only` when huge pages come first).
pub fn cpu_page_sizes(opts: &ProbeOptions) -> Vec<Pages> {
    match (thp_available(), opts.answer_only) {
        (true, true) => vec![Pages::Huge],
        (true, false) => vec![Pages::Huge, Pages::Small],
        (false, _) => vec![Pages::Small],
    }
}

#[cfg(test)]
mod tests {
    use super::super::attention_probe::AttentionBatch;
    use super::*;

    #[test]
    fn the_table_uses_every_block_once_and_the_same_tokens_for_every_block_size() {
        let mut tokens = Vec::new();
        for log_bs in 0..=8 {
            let spec = KvSpec::new(2, 16, 1 << log_bs, Dtype::F16).unwrap();
            // 64 bytes a token: 700 tokens → 512 usable (two blocks of 256).
            let t = shuffled_table(&spec, 700 * 64, 300, 1).unwrap();
            let blocks = 512 >> log_bs;
            t.validate(blocks).unwrap();
            let mut seen: Vec<i32> = t.entries.iter().copied().filter(|&e| e >= 0).collect();
            seen.sort();
            assert_eq!(seen, (0..blocks as i32).collect::<Vec<_>>());
            assert!(t.lens.iter().all(|&l| l == 256));
            tokens.push(t.lens.iter().sum::<i32>());
        }
        assert!(tokens.iter().all(|&t| t == 512));
        let spec = KvSpec::new(2, 16, 4, Dtype::F16).unwrap();
        assert!(matches!(
            shuffled_table(&spec, 100, 256, 1),
            Err(ProbeError::PoolTooSmall { .. })
        ));
    }

    #[test]
    fn answer_only_with_attention_maps_the_limits_buffer_alone() {
        let mut opts = ProbeOptions {
            pool_bytes: 64 << 20,
            reps: 1,
            rounds: 1,
            seq_tokens: 256,
            seed: 1,
            attention: Some(AttentionBatch::fixed(32, 1, 16)),
            answer_only: false,
        };
        let limits = limit_bytes(64 << 20) as u64;
        // The full sweep: a huge-page probe and a 4 KiB one where the kernel offers huge pages,
        // each with its pools, and one limits' buffer for both.
        let probes = if crate::device::cpu::pages::thp_available() {
            2
        } else {
            1
        };
        assert_eq!(host_bytes(&opts), probes * 3 * (32 << 20) + limits);
        opts.answer_only = true;
        assert_eq!(host_bytes(&opts), limits);
        // Without attention the read-only gather carries the answer: the first probe's pools are
        // mapped.
        opts.attention = None;
        assert_eq!(host_bytes(&opts), 3 * (32 << 20) + limits);
    }

    #[test]
    fn a_tiny_probe_measures_positive_rates() {
        let opts = ProbeOptions {
            pool_bytes: 2 << 20,
            reps: 1,
            rounds: 1,
            seq_tokens: 256,
            seed: 1,
            attention: Some(AttentionBatch::fixed(32, 2, 40)),
            answer_only: false,
        };
        // Both limits with the first probe, the stream alone with the second (the limits' buffer
        // is the same memory whatever the probe's page size: one check each keeps this cheap).
        let mut set = LimitSet::CopyAndStream;
        for pages in [Pages::Huge, Pages::Small] {
            if pages == Pages::Huge && !crate::device::cpu::pages::thp_available() {
                continue;
            }
            let mut p = CpuProbe::new(pages, opts.clone()).unwrap();
            let spec = KvSpec::new(8, 128, 16, Dtype::F16).unwrap();
            let g = p.gather(&spec).unwrap();
            let l = p.limits(&spec, set).unwrap();
            let raw = p.convert_stream_gbps(&spec).unwrap().unwrap();
            for x in [g.copy_gbps, g.read_gbps, l.stream_gbps, raw] {
                assert!(x.is_finite() && x > 0.0);
            }
            match (set, l.copy_gbps) {
                (LimitSet::CopyAndStream, Some(copy)) => assert!(copy.is_finite() && copy > 0.0),
                (LimitSet::Stream, None) => {}
                other => panic!("{other:?}"),
            }
            set = LimitSet::Stream;
            // Llama-3-8B's one-layer shape: 32 query heads over 8 KV heads.
            let a = p.attention_gbps(&spec).unwrap().unwrap();
            assert!(a.is_finite() && a > 0.0);
            assert!((a / l.stream_gbps).is_finite());
            let mut without = CpuProbe::new(
                pages,
                ProbeOptions {
                    attention: None,
                    ..opts.clone()
                },
            )
            .unwrap();
            assert_eq!(without.attention_gbps(&spec).unwrap(), None);
        }
    }
}
