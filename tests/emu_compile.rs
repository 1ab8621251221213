//! What the emulator does not emulate fails at compile time with a message that says so, instead of
//! compiling to something that differs from CUDA. Compiles small kernels with the host C++ compiler
//! (the one build.rs uses: $CXX or c++) in syntax-only mode.

use std::path::PathBuf;
use std::process::Command;

/// Compiles `kernels` (kernel bodies, one per line) as one file; Err holds stderr.
fn compile(tag: &str, bodies: &[&str]) -> Result<(), String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut source = String::from("#include \"common.cuh\"\n");
    for (i, body) in bodies.iter().enumerate() {
        // Line i + 2: error messages point back at the body by its line number.
        source += &format!(
            "extern \"C\" __global__ void k{i}(GPTR(const float) p, GPTR(const __half) h, \
             GPTR(float) out) {{ {body} }}\n"
        );
    }
    let path = std::env::temp_dir().join(format!("pagedkv_emu_{}_{tag}.cpp", std::process::id()));
    std::fs::write(&path, source).unwrap();
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let output = Command::new(cxx)
        .args(["-fsyntax-only", "-std=c++17", "-DPAGEDKV_EMU", "-I"])
        .arg(root.join("kernels"))
        .arg(&path)
        .output()
        .expect("run the C++ compiler");
    let _ = std::fs::remove_file(&path);
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

#[test]
fn unsupported_features_fail_to_compile_with_a_clear_message() {
    let cases: &[(&str, &str)] = &[
        ("out[0] = __ldg(p + 1);", "__ldg is not emulated"),
        (
            "atomicCAS(&out[0], 1.0f, 2.0f);",
            "atomicCAS is not emulated",
        ),
        (
            "__half a = h[0]; __half b = a + h[1]; (void)b;",
            "arithmetic and comparison on __half",
        ),
        (
            "out[0] = h[0] < h[1];",
            "arithmetic and comparison on __half",
        ),
        (
            "out[0] = __shfl_xor_sync(0xffffffffu, 1.0, 1);",
            "float, int and unsigned only",
        ),
        ("const float* q = p; out[0] = q[0];", "cannot convert"),
        (
            "float4 v = *reinterpret_cast<const float4*>(p); out[0] = v.x;",
            "reinterpret_cast",
        ),
    ];
    let (control, rejected) = std::thread::scope(|s| {
        let control = s.spawn(|| {
            compile(
                "control",
                &[
                    "float4 v = ld_vec<float4>(p); out[threadIdx.x] = v.x + to_float(h[0]) + \
                   warp_sum(__half2float(h[1])) + block_max(v.y); atomicAdd(out + 1, 2.0f);",
                ],
            )
        });
        let bodies: Vec<&str> = cases.iter().map(|c| c.0).collect();
        let rejected = compile("rejected", &bodies);
        (control.join().unwrap(), rejected)
    });
    assert_eq!(control, Ok(()), "the supported control kernel must compile");
    let err = rejected.expect_err("every case must be rejected");
    for (i, (body, expect)) in cases.iter().enumerate() {
        assert!(
            err.contains(&format!(".cpp:{}:", i + 2)),
            "no error at `{body}`:\n{err}"
        );
        assert!(
            err.contains(expect),
            "`{body}`: expected {expect:?} in:\n{err}"
        );
    }
}
