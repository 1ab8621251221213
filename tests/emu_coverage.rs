//! Every kernel of kernels/*.cu has an emulated test against its CPU reference. Kernels join the
//! emulator by being added as files; this list is where they must also join the tests: a kernel
//! missing from it (or listed but gone) fails here.

use pagedkv::emu::kernels;

/// Kernel name → the test file that runs it on the emulator against its CPU reference.
const TESTED: &[(&str, &str)] = &[
    (
        "mutant_no_wait_paged_attention_f16_d128_g4",
        "tests/emu_attention.rs",
    ),
    (
        "mutant_short_wait_paged_attention_f16_d128_g4",
        "tests/emu_attention.rs",
    ),
    ("fp8_convert_decode", "tests/emu_fp8.rs"),
    ("fp8_convert_encode", "tests/emu_fp8.rs"),
    ("paged_gather_copy_f16", "tests/emu_gather.rs"),
    ("paged_gather_copy_bf16", "tests/emu_gather.rs"),
    ("paged_gather_copy_f32", "tests/emu_gather.rs"),
    ("paged_gather_sum_partial_f16", "tests/emu_gather.rs"),
    ("paged_gather_sum_partial_bf16", "tests/emu_gather.rs"),
    ("paged_gather_sum_partial_f32", "tests/emu_gather.rs"),
    ("paged_gather_sum_merge", "tests/emu_gather.rs"),
    ("paged_attention_f16_d64_g1", "tests/emu_attention.rs"),
    ("contiguous_attention_f16_d64_g1", "tests/emu_attention.rs"),
    ("paged_attention_f16_d64_g2", "tests/emu_attention.rs"),
    ("contiguous_attention_f16_d64_g2", "tests/emu_attention.rs"),
    ("paged_attention_f16_d64_g4", "tests/emu_attention.rs"),
    ("contiguous_attention_f16_d64_g4", "tests/emu_attention.rs"),
    ("paged_attention_f16_d64_g8", "tests/emu_attention.rs"),
    ("contiguous_attention_f16_d64_g8", "tests/emu_attention.rs"),
    ("merge_partitions_f16_d64", "tests/emu_attention.rs"),
    ("paged_attention_f16_d128_g1", "tests/emu_attention.rs"),
    ("contiguous_attention_f16_d128_g1", "tests/emu_attention.rs"),
    ("paged_attention_f16_d128_g2", "tests/emu_attention.rs"),
    ("contiguous_attention_f16_d128_g2", "tests/emu_attention.rs"),
    ("paged_attention_f16_d128_g4", "tests/emu_attention.rs"),
    ("contiguous_attention_f16_d128_g4", "tests/emu_attention.rs"),
    ("paged_attention_f16_d128_g8", "tests/emu_attention.rs"),
    ("contiguous_attention_f16_d128_g8", "tests/emu_attention.rs"),
    ("merge_partitions_f16_d128", "tests/emu_attention.rs"),
    ("paged_attention_f16_d256_g1", "tests/emu_attention.rs"),
    ("contiguous_attention_f16_d256_g1", "tests/emu_attention.rs"),
    ("paged_attention_f16_d256_g2", "tests/emu_attention.rs"),
    ("contiguous_attention_f16_d256_g2", "tests/emu_attention.rs"),
    ("paged_attention_f16_d256_g4", "tests/emu_attention.rs"),
    ("contiguous_attention_f16_d256_g4", "tests/emu_attention.rs"),
    ("paged_attention_f16_d256_g8", "tests/emu_attention.rs"),
    ("contiguous_attention_f16_d256_g8", "tests/emu_attention.rs"),
    ("merge_partitions_f16_d256", "tests/emu_attention.rs"),
    ("write_kv_slots_f16", "tests/emu_cache_ops.rs"),
    ("paged_attention_bf16_d64_g1", "tests/emu_attention.rs"),
    ("contiguous_attention_bf16_d64_g1", "tests/emu_attention.rs"),
    ("paged_attention_bf16_d64_g2", "tests/emu_attention.rs"),
    ("contiguous_attention_bf16_d64_g2", "tests/emu_attention.rs"),
    ("paged_attention_bf16_d64_g4", "tests/emu_attention.rs"),
    ("contiguous_attention_bf16_d64_g4", "tests/emu_attention.rs"),
    ("paged_attention_bf16_d64_g8", "tests/emu_attention.rs"),
    ("contiguous_attention_bf16_d64_g8", "tests/emu_attention.rs"),
    ("merge_partitions_bf16_d64", "tests/emu_attention.rs"),
    ("paged_attention_bf16_d128_g1", "tests/emu_attention.rs"),
    (
        "contiguous_attention_bf16_d128_g1",
        "tests/emu_attention.rs",
    ),
    ("paged_attention_bf16_d128_g2", "tests/emu_attention.rs"),
    (
        "contiguous_attention_bf16_d128_g2",
        "tests/emu_attention.rs",
    ),
    ("paged_attention_bf16_d128_g4", "tests/emu_attention.rs"),
    (
        "contiguous_attention_bf16_d128_g4",
        "tests/emu_attention.rs",
    ),
    ("paged_attention_bf16_d128_g8", "tests/emu_attention.rs"),
    (
        "contiguous_attention_bf16_d128_g8",
        "tests/emu_attention.rs",
    ),
    ("merge_partitions_bf16_d128", "tests/emu_attention.rs"),
    ("paged_attention_bf16_d256_g1", "tests/emu_attention.rs"),
    (
        "contiguous_attention_bf16_d256_g1",
        "tests/emu_attention.rs",
    ),
    ("paged_attention_bf16_d256_g2", "tests/emu_attention.rs"),
    (
        "contiguous_attention_bf16_d256_g2",
        "tests/emu_attention.rs",
    ),
    ("paged_attention_bf16_d256_g4", "tests/emu_attention.rs"),
    (
        "contiguous_attention_bf16_d256_g4",
        "tests/emu_attention.rs",
    ),
    ("paged_attention_bf16_d256_g8", "tests/emu_attention.rs"),
    (
        "contiguous_attention_bf16_d256_g8",
        "tests/emu_attention.rs",
    ),
    ("merge_partitions_bf16_d256", "tests/emu_attention.rs"),
    ("write_kv_slots_bf16", "tests/emu_cache_ops.rs"),
    ("paged_attention_f32_d128_g1", "tests/emu_attention.rs"),
    ("contiguous_attention_f32_d128_g1", "tests/emu_attention.rs"),
    ("paged_attention_f32_d128_g2", "tests/emu_attention.rs"),
    ("contiguous_attention_f32_d128_g2", "tests/emu_attention.rs"),
    ("paged_attention_f32_d128_g4", "tests/emu_attention.rs"),
    ("contiguous_attention_f32_d128_g4", "tests/emu_attention.rs"),
    ("paged_attention_f32_d128_g8", "tests/emu_attention.rs"),
    ("contiguous_attention_f32_d128_g8", "tests/emu_attention.rs"),
    ("merge_partitions_f32_d128", "tests/emu_attention.rs"),
    ("write_kv_slots_f32", "tests/emu_cache_ops.rs"),
    ("copy_blocks", "tests/emu_cache_ops.rs"),
    ("stream_copy", "tests/emu_cache_ops.rs"),
    ("stream_read", "tests/emu_cache_ops.rs"),
];

#[test]
fn every_kernel_has_an_emulated_test() {
    let root = env!("CARGO_MANIFEST_DIR");
    let untested: Vec<&str> = kernels()
        .iter()
        .map(|k| k.name)
        .filter(|n| !n.starts_with("emu_selftest_"))
        .filter(|n| !TESTED.iter().any(|(t, _)| t == n))
        .collect();
    assert!(
        untested.is_empty(),
        "kernels without an emulated test (add one in tests/emu_*.rs and list it in \
         tests/emu_coverage.rs): {untested:?}"
    );
    for (name, file) in TESTED {
        assert!(
            kernels().iter().any(|k| k.name == *name),
            "{name} is listed but no kernel has that name"
        );
        assert!(
            std::path::Path::new(root).join(file).is_file(),
            "{file} (testing {name}) does not exist"
        );
    }
}
