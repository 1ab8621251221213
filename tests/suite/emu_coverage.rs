//! Every kernel of kernels/*.cu has an emulated test against its CPU reference. Kernels join the
//! emulator by being added as files; this list is where they must also join the tests: a kernel
//! missing from it (or listed but gone) fails here.

use pagedkv::emu::kernels;

/// Kernel family (name prefix) -> the test file that runs every kernel of that family on the
/// emulator against its CPU reference. Instances of a family (dtypes, head dims, groups) join their
/// family's test by themselves: those tests iterate over the kernels build.rs found
/// (`launch::instances`). A new family must be listed here, or this test fails.
const TESTED: &[(&str, &str)] = &[
    ("paged_attention_", "tests/suite/emu_attention.rs"),
    ("contiguous_attention_", "tests/suite/emu_attention.rs"),
    ("merge_partitions_", "tests/suite/emu_attention.rs"),
    ("mutant_", "tests/suite/emu_attention.rs"),
    ("paged_gather_copy_", "tests/suite/emu_gather.rs"),
    ("paged_gather_sum_partial_", "tests/suite/emu_gather.rs"),
    ("paged_gather_sum_merge", "tests/suite/emu_gather.rs"),
    ("write_kv_slots_", "tests/suite/emu_cache_ops.rs"),
    ("quantize_kv_slots_", "tests/suite/emu_cache_ops.rs"),
    ("copy_blocks", "tests/suite/emu_cache_ops.rs"),
    ("stream_copy", "tests/suite/emu_cache_ops.rs"),
    ("stream_read", "tests/suite/emu_cache_ops.rs"),
    ("fp8_convert_", "tests/suite/emu_fp8.rs"),
];

#[test]
fn every_kernel_has_an_emulated_test() {
    let root = env!("CARGO_MANIFEST_DIR");
    let untested: Vec<&str> = kernels()
        .iter()
        .map(|k| k.name)
        .filter(|n| !n.starts_with("emu_selftest_"))
        .filter(|n| !TESTED.iter().any(|(prefix, _)| n.starts_with(prefix)))
        .collect();
    assert!(
        untested.is_empty(),
        "kernels without an emulated test (add one in tests/emu_*.rs and list it in \
         tests/suite/emu_coverage.rs): {untested:?}"
    );
    for (prefix, file) in TESTED {
        assert!(
            kernels().iter().any(|k| k.name.starts_with(prefix)),
            "{prefix} is listed but no kernel's name starts so"
        );
        assert!(
            std::path::Path::new(root).join(file).is_file(),
            "{file} (testing {prefix}) does not exist"
        );
    }
}
