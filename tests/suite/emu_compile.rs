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
        let body = body.replace('\n', " ");
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

/// Every builtin KERNELS.md lists, used once: the supported set must compile.
const EVERYTHING_KERNELS_MD_PROMISES: &str = r#"
    __shared__ float s[32];
    DYNAMIC_SHARED(float, dyn);
    const unsigned t = threadIdx.x + threadIdx.y + threadIdx.z + blockIdx.x + blockIdx.y +
        blockIdx.z + blockDim.x + blockDim.y + blockDim.z + gridDim.x + gridDim.y + gridDim.z +
        warpSize;
    s[t % 32] = p[t];
    dyn[0] = s[0];
    __syncthreads();
    __syncwarp();
    const unsigned full = 0xffffffffu;
    float a = __shfl_sync(full, s[0], 0) + __shfl_xor_sync(full, 1.0f, 1) +
              __shfl_down_sync(full, 2.0f, 1) + __shfl_up_sync(full, 3.0f, 1);
    int i = __shfl_sync(full, 1, 0) + __shfl_xor_sync(full, 2, 1);
    unsigned u = __shfl_down_sync(full, 1u, 1) + __shfl_up_sync(full, 2u, 1);
    __half hh = __float2half_rn(a);
    __nv_bfloat16 bb = __float2bfloat16_rn(a);
    float b = __half2float(hh) + __bfloat162float(bb);
    half2 h2 = __floats2half2_rn(a, b);
    __nv_bfloat162 b2 = __floats2bfloat162_rn(a, b);
    float2 f2 = __half22float2(h2), g2 = __bfloat1622float2(b2), m2 = make_float2(1.0f, 2.0f);
    uint2 u2 = ld_vec<uint2>(p);
    uint4 u4 = ld_vec<uint4>(p);
    cp_async16(&s[4], p);
    cp_async_commit();
    cp_async_wait<0>();
    float e2 = fast_exp2(s[4]);
    float4 f4 = make_float4(1.0f, 2.0f, 3.0f, 4.0f);
    float c = expf(a) + __expf(b) + exp2f(a) + fmaxf(a, b) + fminf(a, b) + rsqrtf(2.0f) +
              sqrtf(2.0f) + __fdividef(a, 3.0f) + INFINITY;
    atomicAdd(&out[0], c);
    atomicAdd(out + 1, 1.0f);
    atomicAdd(reinterpret_cast<unsigned*>(&s[1]), 1u);
    st_vec(out + 4, f4);
    st_vec(out + 8, u4);
    out[2] = f2.x + g2.y + m2.x + u2.x + i + u + to_float(h[0]) + to_float(from_float<__half>(c)) +
             warp_sum(a) + warp_max(b) + block_sum(c) + block_max(a) + e2;
"#;

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
        let control = s.spawn(|| compile("control", &[EVERYTHING_KERNELS_MD_PROMISES]));
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

/// nvcc as build.rs finds it ($NVCC, $CUDA_HOME/bin, the project-local toolchain), if any.
fn nvcc() -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut candidates: Vec<PathBuf> = Vec::new();
    candidates.extend(std::env::var_os("NVCC").map(PathBuf::from));
    candidates.extend(std::env::var_os("CUDA_HOME").map(|h| PathBuf::from(h).join("bin/nvcc")));
    candidates.push(root.join(".cuda/nvidia/cu13/bin/nvcc"));
    candidates.into_iter().find(|p| p.is_file())
}

#[test]
fn the_supported_set_means_the_same_to_nvcc() {
    let Some(nvcc) = nvcc() else {
        eprintln!("skipped: no nvcc ($NVCC, $CUDA_HOME/bin, .cuda/)");
        return;
    };
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::temp_dir();
    let src = dir.join(format!("pagedkv_emu_{}_nvcc.cu", std::process::id()));
    std::fs::write(
        &src,
        format!(
            "#include \"common.cuh\"\nextern \"C\" __global__ void k(GPTR(const float) p, \
             GPTR(const __half) h, GPTR(float) out) {{\n{EVERYTHING_KERNELS_MD_PROMISES}\n}}\n"
        ),
    )
    .unwrap();
    let ptx = src.with_extension("ptx");
    let output = Command::new(nvcc)
        .args(["-std=c++17", "-arch=sm_90", "--ptx", "-I"])
        .arg(root.join("kernels"))
        .arg(&src)
        .arg("-o")
        .arg(&ptx)
        .output()
        .expect("run nvcc");
    let _ = std::fs::remove_file(&src);
    let _ = std::fs::remove_file(&ptx);
    assert!(
        output.status.success(),
        "nvcc rejects what the emulator accepts:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
