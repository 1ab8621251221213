//! The kernel images build.rs embedded: each a fatbin with SASS for sm_80 and sm_90 and PTX for
//! compute_90, and no kernel spilling registers. Skips, saying why, when nvcc was absent.

use pagedkv::kernels::{self, fatbin::EntryKind};

#[test]
fn every_module_holds_sm80_and_sm90_sass_and_ptx() {
    if !kernels::KERNELS_BUILT {
        eprintln!("skipping: kernels were not built (no nvcc at build time)");
        return;
    }
    assert!(!kernels::MODULES.is_empty());
    for m in kernels::MODULES {
        let entries =
            kernels::fatbin::entries(m.fatbin).unwrap_or_else(|e| panic!("{}: {e}", m.name));
        for (kind, arch) in [
            (EntryKind::Sass, 80),
            (EntryKind::Sass, 90),
            (EntryKind::Ptx, 90),
        ] {
            assert!(
                entries
                    .iter()
                    .any(|e| e.kind == kind && e.arch == arch && e.payload_bytes > 0),
                "{}: no {kind:?} for {arch} in {entries:?}",
                m.name
            );
        }
    }
}

#[test]
fn every_kernel_has_a_resource_report_and_none_spills() {
    if !kernels::KERNELS_BUILT {
        eprintln!("skipping: kernels were not built (no nvcc at build time)");
        return;
    }
    for m in kernels::MODULES {
        for arch in ["sm_80", "sm_90"] {
            assert!(
                kernels::RESOURCES
                    .iter()
                    .any(|r| r.module == m.name && r.arch == arch),
                "{}: no ptxas report for {arch}",
                m.name
            );
        }
    }
    let spills: Vec<_> = kernels::spilling_kernels();
    assert!(spills.is_empty(), "kernels spill registers: {spills:?}");
}
