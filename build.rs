//! Compiles every `kernels/*.cu` into a fatbin (SASS for sm_80 and sm_90, PTX for compute_90) when
//! nvcc can be found, records ptxas's resource report and, when cuobjdump can be found too, the
//! static report's analysis of the sm_90 code (`kernels/build_sass.rs`), and generates
//! `kernels.rs` that embeds them. Without nvcc the build still passes, with one warning: the CPU
//! paths need no GPU code.
//! Always, with or without nvcc, the same files are also compiled for the CPU emulator
//! (`kernels/emu/build_emu.rs`). Where nvcc is looked for, and what makes this script run again
//! when one appears or changes (`scripts/install-cuda-compiler`, `$NVCC`, `$CUDA_HOME`, `PATH`):
//! `kernels/build_nvcc.rs`.

#[path = "kernels/emu/build_emu.rs"]
mod build_emu;
#[path = "kernels/build_nvcc.rs"]
mod build_nvcc;
#[path = "kernels/build_sass.rs"]
mod build_sass;
#[path = "src/kernels/sass/mod.rs"]
#[allow(dead_code)] // the library reads what the build script does not
mod sass;

use std::env;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

const ARCH_FLAGS: &[&str] = &[
    "-gencode",
    "arch=compute_80,code=sm_80",
    "-gencode",
    "arch=compute_90,code=[sm_90,compute_90]",
];

fn main() {
    println!("cargo:rerun-if-changed=kernels");
    for var in ["CUOBJDUMP", "PAGEDKV_SKIP_SASS"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let sources = kernel_sources(&root.join("kernels"));
    // nvcc's processes start first and run while the emulator's C++ compiles: each is minutes on
    // 2 cores, and the library waits for both.
    let nvcc = build_nvcc::find_nvcc(&root);
    let fatbins = nvcc
        .as_ref()
        .map(|nvcc| start_fatbins(nvcc, &root, &out, &sources));
    build_emu::build(&root, &out, &sources, &cache_dir(&out));

    let generated = match (nvcc, fatbins) {
        (Some(nvcc), Some(fatbins)) => {
            let (version, modules, resources) = finish_fatbins(fatbins);
            let cuobjdump = build_sass::find_cuobjdump(&root, &nvcc);
            let sass = build_sass::analyse_all(&root, cuobjdump.as_deref(), &modules);
            let tools = cuobjdump.as_deref().map(|c| (nvcc.as_path(), c));
            build_sass::fixtures(&root, &out, &cache_dir(&out), tools);
            render_module(Some(&version), &modules, &resources, &sass)
        }
        _ => {
            println!(
                "cargo:warning=GPU kernels were not built: nvcc not found ($NVCC, $CUDA_HOME/bin, PATH, \
                 .cuda/). Run scripts/install-cuda-compiler to get the pinned CUDA 13.0 compiler."
            );
            build_sass::fixtures(&root, &out, &cache_dir(&out), None);
            let sass = build_sass::SassResult {
                status: Err(build_sass::MISSING.to_string()),
                kernels: Vec::new(),
            };
            render_module(None, &[], &[], &sass)
        }
    };
    std::fs::write(out.join("kernels.rs"), generated).expect("write kernels.rs");
}

/// Every `.cu` directly under `kernels/`, sorted so the generated file is stable.
fn kernel_sources(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "cu"));
    files.sort();
    files
}

/// One kernel's resources as ptxas reported them for one architecture.
struct Resources {
    module: String,
    kernel: String,
    arch: String,
    registers: u32,
    spill_stores: u32,
    spill_loads: u32,
    shared_bytes: u32,
    stack_bytes: u32,
}

/// nvcc's flags besides the architectures (part of the cache key).
const NVCC_FLAGS: &[&str] = &[
    "--fatbin",
    "-O3",
    "-std=c++17",
    "-lineinfo",
    "-Xptxas",
    "-v",
];

/// Where compiled fatbins are kept across profiles (`target/kernel-cache/`): debug, release and
/// bench builds of the same sources share them, which saves minutes of nvcc per CI run.
fn cache_dir(out: &Path) -> PathBuf {
    out.ancestors()
        .nth(4)
        .map_or_else(|| out.to_path_buf(), |t| t.join("kernel-cache"))
}

/// A key over everything that shapes a module's fatbin: nvcc's version, the flags, the file and
/// every shared header beside it.
fn cache_key(version: &str, root: &Path, src: &Path) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (version, NVCC_FLAGS, ARCH_FLAGS).hash(&mut h);
    let mut inputs = vec![src.to_path_buf()];
    let mut headers: Vec<PathBuf> = std::fs::read_dir(root.join("kernels"))
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    headers.retain(|p| p.extension().is_some_and(|e| e == "cuh" || e == "h"));
    headers.sort();
    inputs.extend(headers);
    for f in inputs {
        f.file_name().hash(&mut h);
        std::fs::read(&f).unwrap_or_default().hash(&mut h);
    }
    h.finish()
}

/// A module: its name, its fatbin and its cache stem (where analyses of it are kept).
type Module = (String, PathBuf, PathBuf);

/// One module's fatbin: taken from the cache, or nvcc compiling it.
struct Fatbin {
    module: String,
    fatbin: PathBuf,
    nvcc: Option<std::process::Child>,
    /// ptxas's report (from the cache; nvcc's output once it ends).
    log: String,
    stem: PathBuf,
}

/// nvcc's version and one job per kernel file, started.
struct Fatbins {
    version: String,
    jobs: Vec<Fatbin>,
}

/// Starts one nvcc per file not in the cache, all at once (the files are independent).
fn start_fatbins(nvcc: &Path, root: &Path, out: &Path, sources: &[PathBuf]) -> Fatbins {
    let version = nvcc_version(nvcc);
    let cache = cache_dir(out);
    let _ = std::fs::create_dir_all(&cache);
    let jobs = sources
        .iter()
        .map(|src| {
            let module = src.file_stem().unwrap().to_string_lossy().into_owned();
            let fatbin = out.join(format!("{module}.fatbin"));
            let stem = cache.join(format!("{module}-{:016x}", cache_key(&version, root, src)));
            let (cached_bin, cached_log) =
                (stem.with_extension("fatbin"), stem.with_extension("log"));
            if let (Ok(log), true) = (std::fs::read_to_string(&cached_log), cached_bin.is_file()) {
                if std::fs::copy(&cached_bin, &fatbin).is_ok() {
                    return Fatbin {
                        module,
                        fatbin,
                        nvcc: None,
                        log,
                        stem,
                    };
                }
            }
            let child = Command::new(nvcc)
                .args(NVCC_FLAGS)
                .args(ARCH_FLAGS)
                .arg("-I")
                .arg(root.join("kernels"))
                .arg(src)
                .arg("-o")
                .arg(&fatbin)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {}: {e}", nvcc.display()));
            Fatbin {
                module,
                fatbin,
                nvcc: Some(child),
                log: String::new(),
                stem,
            }
        })
        .collect();
    Fatbins { version, jobs }
}

/// Waits for every nvcc started, caches what it built and reads ptxas's reports.
fn finish_fatbins(started: Fatbins) -> (String, Vec<Module>, Vec<Resources>) {
    let mut modules = Vec::new();
    let mut resources = Vec::new();
    for job in started.jobs {
        let Fatbin {
            module,
            fatbin,
            nvcc,
            mut log,
            stem,
        } = job;
        if let Some(child) = nvcc {
            let output = child.wait_with_output().expect("wait for nvcc");
            log = String::from_utf8_lossy(&output.stderr).into_owned()
                + &String::from_utf8_lossy(&output.stdout);
            if !output.status.success() {
                panic!("nvcc failed on kernels/{module}.cu:\n{log}");
            }
            // Best effort: a cache that cannot be written only costs the next build time.
            let _ = std::fs::copy(&fatbin, stem.with_extension("fatbin"))
                .and_then(|_| std::fs::write(stem.with_extension("log"), &log));
        }
        resources.extend(parse_ptxas_report(&module, &log));
        modules.push((module, fatbin, stem));
    }
    (started.version, modules, resources)
}

fn nvcc_version(nvcc: &Path) -> String {
    let out = Command::new(nvcc)
        .arg("--version")
        .output()
        .expect("nvcc --version");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find(|l| l.contains("release"))
        .unwrap_or("unknown")
        .trim()
        .to_string()
}

/// Reads ptxas `-v` output: an "Compiling entry function 'K' for 'sm_XX'" line opens a kernel,
/// the following "spill" and "Used N registers" lines fill it in.
fn parse_ptxas_report(module: &str, log: &str) -> Vec<Resources> {
    let mut found: Vec<Resources> = Vec::new();
    for line in log.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let mut parts = rest.split('\'');
            let kernel = parts.next().unwrap_or_default().to_string();
            let arch = parts.nth(1).unwrap_or_default().to_string();
            found.push(Resources {
                module: module.to_string(),
                kernel,
                arch,
                registers: 0,
                spill_stores: 0,
                spill_loads: 0,
                shared_bytes: 0,
                stack_bytes: 0,
            });
        } else if let Some(current) = found.last_mut() {
            if line.contains("spill stores") {
                current.stack_bytes = number_before(line, "bytes stack frame");
                current.spill_stores = number_before(line, "bytes spill stores");
                current.spill_loads = number_before(line, "bytes spill loads");
            } else if line.contains("registers") {
                current.registers = number_before(line, "registers");
                current.shared_bytes = number_before(line, "bytes smem");
            }
        }
    }
    found
}

/// The integer just before `marker` in `line` ("Used 10 registers" → 10), or 0 when absent.
fn number_before(line: &str, marker: &str) -> u32 {
    line.split(marker)
        .next()
        .filter(|head| head.len() < line.len())
        .and_then(|head| {
            head.split(|c: char| !c.is_ascii_digit())
                .rev()
                .find(|s| !s.is_empty())
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn render_module(
    version: Option<&str>,
    modules: &[Module],
    resources: &[Resources],
    sass: &build_sass::SassResult,
) -> String {
    let mut s = String::from(
        "// Generated by build.rs: the embedded kernel images, ptxas's report and the SASS analysis.\n",
    );
    writeln!(s, "pub const KERNELS_BUILT: bool = {};", version.is_some()).unwrap();
    writeln!(s, "pub const NVCC_VERSION: Option<&str> = {version:?};").unwrap();
    s.push_str("pub const MODULES: &[EmbeddedModule] = &[\n");
    for (name, path, _) in modules {
        writeln!(
            s,
            "    EmbeddedModule {{ name: {name:?}, fatbin: include_bytes!({:?}) }},",
            path.display().to_string()
        )
        .unwrap();
    }
    s.push_str("];\npub const RESOURCES: &[KernelResources] = &[\n");
    for r in resources {
        writeln!(
            s,
            "    KernelResources {{ module: {:?}, kernel: {:?}, arch: {:?}, registers: {}, \
             spill_stores: {}, spill_loads: {}, shared_bytes: {}, stack_bytes: {} }},",
            r.module,
            r.kernel,
            r.arch,
            r.registers,
            r.spill_stores,
            r.spill_loads,
            r.shared_bytes,
            r.stack_bytes
        )
        .unwrap();
    }
    s.push_str("];\n");
    writeln!(
        s,
        "pub const SASS_ANALYSIS: Result<&str, &str> = {};",
        match &sass.status {
            Ok(tool) => format!("Ok({tool:?})"),
            Err(why) => format!("Err({why:?})"),
        }
    )
    .unwrap();
    s.push_str("pub const SASS_KERNELS: &[sass::KernelSass] = &[\n");
    for k in &sass.kernels {
        s.push_str(k);
        s.push_str(",\n");
    }
    s.push_str("];\n");
    s
}
