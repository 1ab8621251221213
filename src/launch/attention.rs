//! Decode attention's launches (kernels/attention.cuh): the kernel instance by name, grid, block,
//! dynamic shared memory, the scalar arguments in signature order, and the merge of split-K
//! partitions. The buffers are bound by the launchers in the signature's order: out, part_out,
//! part_max, part_sum, q, k, v, k_scale, v_scale, then (paged) block_tables, seq_lens or
//! (contiguous) seq_lens.

use super::split::SplitPlan;
use super::{instances, to_i32, to_u32, LaunchError};
use crate::kernels::ATTENTION_THREADS;
use crate::kv::{BlockTable, Dtype, KvSpec};

pub use crate::kernels::names::{kernel_name, Engine, Layout};

/// The shape of one decode step: query heads, KV heads (GQA when fewer), head dim, softmax scale.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct AttentionShape {
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub scale: f32,
}

impl AttentionShape {
    pub fn group(&self) -> usize {
        self.num_heads / self.num_kv_heads
    }
}

/// What one decode step reads, in host memory, laid out as the kernels take it: q (and the output)
/// of `T`, K and V stored as `KV` (`T` itself, or fp8 with scales).
#[derive(Debug, Clone, Copy)]
pub struct AttentionData<'a, T, KV = T> {
    pub shape: AttentionShape,
    pub spec: &'a KvSpec,
    /// `[num_seqs]`
    pub lens: &'a [i32],
    /// `[num_seqs, num_heads, head_dim]`
    pub q: &'a [T],
    /// The paged pools, `[num_blocks, num_kv_heads, block_size, head_dim]`.
    pub k: &'a [KV],
    pub v: &'a [KV],
    pub num_blocks: usize,
    pub table: &'a BlockTable,
    /// The contiguous caches, `[num_seqs, num_kv_heads, max_len, head_dim]`.
    pub k_contiguous: &'a [KV],
    pub v_contiguous: &'a [KV],
    pub max_len: usize,
    /// `[num_kv_heads]`: K = stored * k_scale, V = stored * v_scale (1 unless quantised).
    pub k_scale: &'a [f32],
    pub v_scale: &'a [f32],
}

impl<T, KV> AttentionData<'_, T, KV> {
    /// Every buffer as long as the kernels will read it, and the table, lengths and spec telling
    /// one story; scales finite and positive. A GPU reads past a short buffer silently (the
    /// emulator's pointers are bounds-checked), so the CUDA upload refuses such data first.
    pub fn check_buffers(&self) -> Result<(), LaunchError> {
        let bad = |what: String| Err(LaunchError::Geometry(what));
        let (s, spec, table) = (&self.shape, self.spec, self.table);
        if (spec.num_kv_heads, spec.head_dim) != (s.num_kv_heads, s.head_dim) {
            return bad(format!(
                "the pool holds {} KV heads of dim {}, the shape {} of dim {}",
                spec.num_kv_heads, spec.head_dim, s.num_kv_heads, s.head_dim
            ));
        }
        if spec.block_size != table.block_size || self.lens != table.lens.as_slice() {
            return bad(format!(
                "the table (block size {}, {} sequences) is not the pool's (block size {}) or \
                 the lengths' ({} sequences)",
                table.block_size,
                table.lens.len(),
                spec.block_size,
                self.lens.len()
            ));
        }
        table
            .validate(self.num_blocks)
            .map_err(|e| LaunchError::Geometry(e.to_string()))?;
        let longest = self.lens.iter().copied().max().unwrap_or(0).max(0) as usize;
        if longest > self.max_len {
            return bad(format!(
                "a sequence of {longest} tokens is longer than the contiguous cache's {}",
                self.max_len
            ));
        }
        let seqs = self.lens.len();
        let paged = self.num_blocks * spec.elems_per_block();
        let contiguous = seqs * s.num_kv_heads * self.max_len * s.head_dim;
        for (what, got, want) in [
            ("q", self.q.len(), seqs * s.num_heads * s.head_dim),
            ("paged K", self.k.len(), paged),
            ("paged V", self.v.len(), paged),
            ("contiguous K", self.k_contiguous.len(), contiguous),
            ("contiguous V", self.v_contiguous.len(), contiguous),
        ] {
            if got < want {
                return bad(format!(
                    "{what} holds {got} elements, the kernels read {want}"
                ));
            }
        }
        for (what, scales) in [("K", self.k_scale), ("V", self.v_scale)] {
            if let Some(x) = scales.iter().find(|x| !(x.is_finite() && **x > 0.0)) {
                return bad(format!(
                    "{what} scale {x}: scales must be finite and positive"
                ));
            }
        }
        Ok(())
    }
}

/// A scalar argument of a kernel.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    I32(i32),
    F32(f32),
}

/// One kernel launch: what to call, how, and its scalar arguments (after its buffers).
#[derive(Debug, Clone, PartialEq)]
pub struct KernelLaunch {
    /// The kernels/*.cu file (the GPU module).
    pub module: &'static str,
    pub kernel: String,
    pub grid: (u32, u32, u32),
    pub threads: u32,
    pub smem_bytes: u32,
    /// In signature order, after the buffers.
    pub scalars: Vec<Scalar>,
}

/// A decode-attention step: the attention kernel, and the merge when the context is split.
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionLaunch {
    pub engine: Engine,
    pub attention: KernelLaunch,
    /// `merge_partitions_*` (buffers: out, part_out, part_max, part_sum) when split.
    pub merge: Option<KernelLaunch>,
    /// Elements of `out`: `[num_seqs, num_heads, head_dim]`.
    pub out_elems: usize,
    /// Elements of `part_max` and `part_sum`, `[num_seqs, num_heads, num_partitions]` (1 when not
    /// split: a launch still passes a buffer); `part_out` holds `head_dim` times as many.
    pub partial_elems: usize,
}

/// The kernels/*.cu file of an instance: fp8 storage and tensor cores have files of their own.
pub fn module(layout: Layout, engine: Engine, kv_dtype: Dtype) -> &'static str {
    match (layout, engine, kv_dtype.fp8().is_some()) {
        (Layout::Paged, Engine::CudaCores, false) => "paged_attention",
        (Layout::Paged, Engine::CudaCores, true) => "paged_attention_fp8",
        (Layout::Contiguous, Engine::CudaCores, false) => "contiguous_attention",
        (Layout::Contiguous, Engine::CudaCores, true) => "contiguous_attention_fp8",
        (Layout::Paged, Engine::TensorCores, _) => "paged_attention_tc",
        (Layout::Contiguous, Engine::TensorCores, _) => "contiguous_attention_tc",
    }
}

/// Whether `engine` has a kernel for the shape.
pub fn has_instance(
    engine: Engine,
    dtype: Dtype,
    kv_dtype: Dtype,
    head_dim: usize,
    group: usize,
) -> bool {
    let name = kernel_name(Layout::Paged, engine, dtype, kv_dtype, head_dim, group);
    instances::compiled(module(Layout::Paged, engine, kv_dtype), &name)
}

/// The engine the launchers use for a shape: tensor cores wherever they have an instance (they
/// were built for the shapes where the CUDA-core kernel runs out of issue slots before memory
/// bandwidth: KERNELS.md, "Tensor cores"), CUDA cores otherwise.
pub fn dispatched(dtype: Dtype, kv_dtype: Dtype, head_dim: usize, group: usize) -> Engine {
    if has_instance(Engine::TensorCores, dtype, kv_dtype, head_dim, group) {
        Engine::TensorCores
    } else {
        Engine::CudaCores
    }
}

/// One shape the kernels are built for and what the launchers run for it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Dispatch {
    pub dtype: Dtype,
    pub kv_dtype: Dtype,
    pub head_dim: usize,
    pub group: usize,
    pub engine: Engine,
    /// The paged kernel the launchers call for the shape (its contiguous twin has the same engine).
    pub kernel: String,
}

/// Every shape built, with the engine and paged kernel dispatched for it, in instance order.
pub fn dispatch_table() -> Vec<Dispatch> {
    instances::attention_instances()
        .into_iter()
        .map(|i| {
            let engine = dispatched(i.dtype, i.kv_dtype, i.head_dim, i.group);
            Dispatch {
                dtype: i.dtype,
                kv_dtype: i.kv_dtype,
                head_dim: i.head_dim,
                group: i.group,
                engine,
                kernel: kernel_name(
                    Layout::Paged,
                    engine,
                    i.dtype,
                    i.kv_dtype,
                    i.head_dim,
                    i.group,
                ),
            }
        })
        .collect()
}

/// Ok when kernels/attention.cuh instantiates q `dtype`, K/V `kv_dtype`, `head_dim` and `group`.
pub fn check_instance(
    dtype: Dtype,
    kv_dtype: Dtype,
    head_dim: usize,
    group: usize,
) -> Result<(), LaunchError> {
    if has_instance(Engine::CudaCores, dtype, kv_dtype, head_dim, group) {
        return Ok(());
    }
    Err(LaunchError::NoInstance(format!(
        "no attention kernel for q {dtype}, K/V {kv_dtype}, head dim {head_dim} with {group} query \
         heads per KV head (built for q {dtype}, K/V {kv_dtype}: {})",
        instances::describe(dtype, kv_dtype)
    )))
}

/// Ok when `engine` has a kernel for the shape ([`check_instance`] first: a shape no engine has
/// is refused with the list of what is built).
pub fn check_engine(
    engine: Engine,
    dtype: Dtype,
    kv_dtype: Dtype,
    head_dim: usize,
    group: usize,
) -> Result<(), LaunchError> {
    check_instance(dtype, kv_dtype, head_dim, group)?;
    if has_instance(engine, dtype, kv_dtype, head_dim, group) {
        return Ok(());
    }
    Err(LaunchError::NoInstance(format!(
        "no {engine} attention kernel for q {dtype}, K/V {kv_dtype}, head dim {head_dim} with \
         {group} query heads per KV head (`pagedkv info` lists what each engine is built for)"
    )))
}

impl AttentionLaunch {
    /// The launches of one step over `data` with `split`: q of `dtype`, K and V stored as
    /// `kv_dtype`, on the engine [`dispatched`] chooses for the shape.
    pub fn new<T, KV>(
        dtype: Dtype,
        kv_dtype: Dtype,
        data: &AttentionData<'_, T, KV>,
        layout: Layout,
        split: SplitPlan,
    ) -> Result<AttentionLaunch, LaunchError> {
        let s = &data.shape;
        let engine = if s.num_kv_heads > 0 && s.num_heads.is_multiple_of(s.num_kv_heads) {
            dispatched(dtype, kv_dtype, s.head_dim, s.group())
        } else {
            Engine::CudaCores // refused below with the reason
        };
        Self::on(engine, dtype, kv_dtype, data, layout, split)
    }

    /// [`AttentionLaunch::new`] on a chosen engine (to compare the two on one shape).
    pub fn on<T, KV>(
        engine: Engine,
        dtype: Dtype,
        kv_dtype: Dtype,
        data: &AttentionData<'_, T, KV>,
        layout: Layout,
        split: SplitPlan,
    ) -> Result<AttentionLaunch, LaunchError> {
        let s = &data.shape;
        if s.num_kv_heads == 0 || !s.num_heads.is_multiple_of(s.num_kv_heads) {
            return Err(LaunchError::NoInstance(format!(
                "{} query heads are not a multiple of {} KV heads",
                s.num_heads, s.num_kv_heads
            )));
        }
        let (hd, group) = (s.head_dim, s.group());
        check_engine(engine, dtype, kv_dtype, hd, group)?;
        if data.k_scale.len() != s.num_kv_heads || data.v_scale.len() != s.num_kv_heads {
            return Err(LaunchError::Geometry(format!(
                "{} K and {} V scales for {} KV heads",
                data.k_scale.len(),
                data.v_scale.len(),
                s.num_kv_heads
            )));
        }
        let seqs = data.lens.len();
        // The kernels address a row (one token of one KV head) by a 32-bit index into its cache
        // (`row_id` in kernels/attention.cuh).
        // In u128: a product past usize cannot wrap under the limit.
        let rows = match layout {
            Layout::Paged => {
                data.num_blocks as u128 * s.num_kv_heads as u128 * data.spec.block_size as u128
            }
            Layout::Contiguous => seqs as u128 * s.num_kv_heads as u128 * data.max_len as u128,
        };
        if rows > 1 << 32 {
            return Err(LaunchError::Geometry(format!(
                "the cache holds {rows} rows of one token and KV head: the kernels address at most \
                 2^32"
            )));
        }
        // Sequences and partitions are grid rows (y) and layers (z): at most 65,535 each.
        if seqs > 65_535 || split.num_partitions > 65_535 {
            return Err(LaunchError::Geometry(format!(
                "{seqs} sequences in {} partitions: a launch takes at most 65535 of each",
                split.num_partitions
            )));
        }
        let parts = split.num_partitions;
        let mut scalars = match layout {
            Layout::Paged => vec![
                Scalar::I32(to_i32("table stride", data.table.stride)?),
                Scalar::I32(data.spec.block_size.trailing_zeros() as i32),
            ],
            Layout::Contiguous => vec![Scalar::I32(to_i32("max_len", data.max_len)?)],
        };
        scalars.extend([
            Scalar::I32(to_i32("partitions", parts)?),
            Scalar::I32(to_i32("partition size", split.partition_size)?),
            Scalar::F32(s.scale),
        ]);
        let attention = KernelLaunch {
            module: module(layout, engine, kv_dtype),
            kernel: kernel_name(layout, engine, dtype, kv_dtype, hd, group),
            grid: (
                to_u32("KV heads", s.num_kv_heads)?,
                seqs as u32,
                parts as u32,
            ),
            threads: ATTENTION_THREADS,
            smem_bytes: engine.smem_bytes(),
            scalars,
        };
        let merge = (parts > 1).then(|| KernelLaunch {
            module: "paged_attention",
            kernel: format!("merge_partitions_{}_d{hd}", dtype.name()),
            grid: (s.num_heads as u32, seqs as u32, 1),
            threads: MERGE_THREADS,
            smem_bytes: 0,
            scalars: vec![Scalar::I32(parts as i32)],
        });
        Ok(AttentionLaunch {
            engine,
            attention,
            merge,
            out_elems: seqs * s.num_heads * hd,
            partial_elems: if parts > 1 {
                seqs * s.num_heads * parts
            } else {
                1
            },
        })
    }
}

/// Threads per CTA of `merge_partitions_*` (kernels/attention.cuh strides over the head dim).
pub const MERGE_THREADS: u32 = 128;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{ATTENTION_SMEM_BYTES, ATTENTION_TC_SMEM_BYTES};
    use crate::kv::BlockTable;

    const ONES: [f32; 2] = [1.0; 2];

    fn data<'a>(
        spec: &'a KvSpec,
        table: &'a BlockTable,
        lens: &'a [i32],
    ) -> AttentionData<'a, u16> {
        AttentionData {
            shape: AttentionShape {
                num_heads: 8,
                num_kv_heads: 2,
                head_dim: 128,
                scale: 0.5,
            },
            spec,
            lens,
            q: &[],
            k: &[],
            v: &[],
            num_blocks: 4,
            table,
            k_contiguous: &[],
            v_contiguous: &[],
            max_len: 40,
            k_scale: &ONES,
            v_scale: &ONES,
        }
    }

    #[test]
    fn scalars_follow_the_signatures_and_the_merge_comes_with_a_split() {
        let spec = KvSpec::new(2, 128, 16, Dtype::F16).unwrap();
        let table = BlockTable::from_rows(&[vec![0, 1, 2], vec![3]], &[40, 5], 16).unwrap();
        let lens = [40, 5];
        let d = data(&spec, &table, &lens);
        let whole = SplitPlan {
            num_partitions: 1,
            partition_size: 40,
        };
        let l = AttentionLaunch::new(Dtype::F16, Dtype::F16, &d, Layout::Paged, whole).unwrap();
        // Group 4 at head dim 128 is dispatched to tensor cores, with their ring's shared memory.
        assert_eq!(l.engine, Engine::TensorCores);
        assert_eq!(l.attention.kernel, "paged_attention_tc_f16_d128_g4");
        assert_eq!(l.attention.smem_bytes, ATTENTION_TC_SMEM_BYTES);
        let cuda_cores = AttentionLaunch::on(
            Engine::CudaCores,
            Dtype::F16,
            Dtype::F16,
            &d,
            Layout::Paged,
            whole,
        )
        .unwrap();
        assert_eq!(cuda_cores.attention.kernel, "paged_attention_f16_d128_g4");
        assert_eq!(cuda_cores.attention.smem_bytes, ATTENTION_SMEM_BYTES);
        assert_eq!(cuda_cores.attention.scalars, l.attention.scalars);
        assert_eq!(l.attention.grid, (2, 2, 1));
        assert_eq!(
            l.attention.scalars,
            vec![
                Scalar::I32(table.stride as i32),
                Scalar::I32(4),
                Scalar::I32(1),
                Scalar::I32(40),
                Scalar::F32(0.5)
            ]
        );
        assert!(l.merge.is_none());
        let split = SplitPlan {
            num_partitions: 3,
            partition_size: 128,
        };
        let l =
            AttentionLaunch::new(Dtype::F16, Dtype::F16, &d, Layout::Contiguous, split).unwrap();
        assert_eq!(l.attention.kernel, "contiguous_attention_tc_f16_d128_g4");
        assert_eq!(l.attention.scalars[0], Scalar::I32(40));
        let m = l.merge.unwrap();
        assert_eq!(m.kernel, "merge_partitions_f16_d128");
        assert_eq!((m.grid, m.scalars), ((8, 2, 1), vec![Scalar::I32(3)]));
        assert_eq!(l.partial_elems, 2 * 8 * 3);
    }

    #[test]
    fn caches_past_the_kernels_32_bit_row_ids_are_refused() {
        let spec = KvSpec::new(2, 128, 16, Dtype::F16).unwrap();
        let table = BlockTable::from_rows(&[vec![0, 1, 2], vec![3]], &[40, 5], 16).unwrap();
        let lens = [40, 5];
        let whole = SplitPlan {
            num_partitions: 1,
            partition_size: 40,
        };
        let plan = |num_blocks: usize, max_len: usize, layout| {
            let d = AttentionData {
                num_blocks,
                max_len,
                ..data(&spec, &table, &lens)
            };
            AttentionLaunch::new(Dtype::F16, Dtype::F16, &d, layout, whole)
        };
        // 2 KV heads x 16 tokens a block: 2^27 blocks are 2^32 rows, one more block is too many.
        assert!(plan(1 << 27, 40, Layout::Paged).is_ok());
        let err = plan((1 << 27) + 1, 40, Layout::Paged).unwrap_err();
        assert!(err.to_string().contains("at most 2^32"), "{err}");
        // 2 sequences x 2 KV heads: 2^30 tokens each are 2^32 rows.
        assert!(plan(4, 1 << 30, Layout::Contiguous).is_ok());
        assert!(plan(4, (1 << 30) + 1, Layout::Contiguous).is_err());
    }

    #[test]
    fn buffers_the_kernels_would_overrun_are_refused() {
        let spec = KvSpec::new(2, 128, 16, Dtype::F16).unwrap();
        let table = BlockTable::from_rows(&[vec![0, 1, 2], vec![3]], &[40, 5], 16).unwrap();
        let lens = [40, 5];
        let q = vec![0u16; 2 * 8 * 128];
        let paged = vec![0u16; 4 * spec.elems_per_block()];
        let contiguous = vec![0u16; 2 * 2 * 40 * 128];
        let full = AttentionData {
            q: &q,
            k: &paged,
            v: &paged,
            k_contiguous: &contiguous,
            v_contiguous: &contiguous,
            ..data(&spec, &table, &lens)
        };
        full.check_buffers().unwrap();
        let err = |d: AttentionData<'_, u16>| d.check_buffers().unwrap_err().to_string();
        let short = &paged[1..];
        assert!(err(AttentionData { v: short, ..full }).contains("paged V holds"));
        assert!(err(AttentionData { q: &q[1..], ..full }).contains("q holds"));
        assert!(err(AttentionData {
            max_len: 39,
            ..full
        })
        .contains("longer than"));
        let other_lens = [40, 6];
        assert!(err(AttentionData {
            lens: &other_lens,
            ..full
        })
        .contains("table"));
        let other_spec = KvSpec::new(2, 128, 8, Dtype::F16).unwrap();
        assert!(err(AttentionData {
            spec: &other_spec,
            ..full
        })
        .contains("block size"));
        assert!(err(AttentionData {
            num_blocks: 3,
            ..full
        })
        .contains("block"));
        let zero = [1.0, 0.0];
        assert!(err(AttentionData {
            v_scale: &zero,
            ..full
        })
        .contains("V scale 0"));
        let nan = [f32::NAN, 1.0];
        assert!(err(AttentionData {
            k_scale: &nan,
            ..full
        })
        .contains("K scale NaN"));
    }

    #[test]
    fn a_shape_without_an_instance_says_what_is_built() {
        let spec = KvSpec::new(2, 96, 16, Dtype::F16).unwrap();
        let table = BlockTable::from_rows(&[vec![0]], &[5], 16).unwrap();
        let lens = [5];
        let mut d = data(&spec, &table, &lens);
        d.shape.head_dim = 96;
        let whole = SplitPlan {
            num_partitions: 1,
            partition_size: 5,
        };
        let e = AttentionLaunch::new(Dtype::F16, Dtype::F16, &d, Layout::Paged, whole).unwrap_err();
        assert!(e.to_string().contains("head dims 64, 128, 256"), "{e}");
        // fp8 K and V get their own files and names.
        let d = data(&spec, &table, &lens);
        let mut d128 = d;
        d128.shape.head_dim = 128;
        let l = AttentionLaunch::new(
            Dtype::Bf16,
            Dtype::Fp8E5m2,
            &d128,
            Layout::Contiguous,
            whole,
        )
        .unwrap();
        assert_eq!(l.attention.module, "contiguous_attention_tc");
        assert_eq!(
            l.attention.kernel,
            "contiguous_attention_tc_bf16_kvfp8_e5m2_d128_g4"
        );
        let l = AttentionLaunch::on(
            Engine::CudaCores,
            Dtype::Bf16,
            Dtype::Fp8E5m2,
            &d128,
            Layout::Contiguous,
            whole,
        )
        .unwrap();
        assert_eq!(l.attention.module, "contiguous_attention_fp8");
        // Tensor cores have no kernel for a group of 1, and say so.
        let mut g1 = d128;
        g1.shape.num_heads = g1.shape.num_kv_heads;
        assert_eq!(
            dispatched(Dtype::F16, Dtype::F16, 128, 1),
            Engine::CudaCores
        );
        let e = AttentionLaunch::on(
            Engine::TensorCores,
            Dtype::F16,
            Dtype::F16,
            &g1,
            Layout::Paged,
            whole,
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("no tensor-cores attention kernel"),
            "{e}"
        );
    }

    #[test]
    fn every_tensor_core_kernel_has_its_twin_and_is_dispatched() {
        let table = dispatch_table();
        let tc: Vec<_> = crate::kernels::COMPILED_KERNELS
            .iter()
            .filter(|k| k.name.starts_with("paged_attention_tc_"))
            .collect();
        assert!(!tc.is_empty(), "no tensor-core kernel built");
        for k in tc {
            let d = table
                .iter()
                .find(|d| d.kernel == k.name)
                .unwrap_or_else(|| panic!("{} is never dispatched", k.name));
            assert_eq!(d.engine, Engine::TensorCores);
            // Its contiguous twin, and the CUDA-core kernel of the same shape to compare with.
            let twin = kernel_name(
                Layout::Contiguous,
                d.engine,
                d.dtype,
                d.kv_dtype,
                128,
                d.group,
            );
            assert!(
                instances::compiled("contiguous_attention_tc", &twin),
                "{twin}"
            );
            assert!(has_instance(
                Engine::CudaCores,
                d.dtype,
                d.kv_dtype,
                d.head_dim,
                d.group
            ));
        }
        // The shapes issue 23 aims at run on tensor cores.
        for (q, kv) in [
            (Dtype::F16, Dtype::F16),
            (Dtype::Bf16, Dtype::Bf16),
            (Dtype::F16, Dtype::Fp8E4m3),
            (Dtype::Bf16, Dtype::Fp8E4m3),
        ] {
            for group in [4, 8] {
                assert_eq!(
                    dispatched(q, kv, 128, group),
                    Engine::TensorCores,
                    "{q} {kv} g{group}"
                );
            }
        }
    }
}
