//! Every kernel of kernels/*.cu has an emulated test against its CPU reference. Kernels join the
//! emulator by being added as files; this list is where they must also join the tests: a kernel
//! missing from it (or listed but gone) fails here.

use pagedkv::emu::kernels;

/// Kernel name → the test file that runs it on the emulator against its CPU reference.
const TESTED: &[(&str, &str)] = &[
    ("paged_gather_copy_f16", "tests/emu_gather.rs"),
    ("paged_gather_copy_bf16", "tests/emu_gather.rs"),
    ("paged_gather_copy_f32", "tests/emu_gather.rs"),
    ("paged_gather_sum_partial_f16", "tests/emu_gather.rs"),
    ("paged_gather_sum_partial_bf16", "tests/emu_gather.rs"),
    ("paged_gather_sum_partial_f32", "tests/emu_gather.rs"),
    ("paged_gather_sum_merge", "tests/emu_gather.rs"),
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
