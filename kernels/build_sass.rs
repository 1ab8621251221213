//! The static-report half of build.rs (included from it with `#[path]`): runs cuobjdump on each
//! compiled module's sm_90 code, analyses it with `src/kernels/sass` (the library's own module,
//! included here too) and renders the result as Rust for `kernels.rs`; each module's analysis is
//! cached beside its fatbin. Also compiles the analyser's fixtures (`tests/data/sass/fixtures.cu`)
//! into `$OUT_DIR/sass_fixtures.rs`, so their test also runs on what today's compiler writes.

use super::sass;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;

/// What the report says when there is no cuobjdump.
pub const MISSING: &str = "no SASS analysis (install with scripts/install-cuda-compiler)";

/// The analysis of every module, or why there is none.
pub struct SassResult {
    pub status: Result<String, String>,
    /// Rust expressions, one per kernel.
    pub kernels: Vec<String>,
}

/// cuobjdump as [`sass::tool::find_cuobjdump`] finds it, nvcc's directory included.
pub fn find_cuobjdump(root: &Path, nvcc: &Path) -> Option<PathBuf> {
    sass::tool::find_cuobjdump(root, Some(nvcc))
}

fn version(tool: &Path) -> String {
    sass::tool::version(tool)
}

/// A key over what shapes an analysis besides the code: the tool's version and the analyser.
fn analyser_key(root: &Path, tool_version: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    tool_version.hash(&mut h);
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("src/kernels/sass"))
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.push(root.join("kernels/build_sass.rs"));
    files.sort();
    for f in files {
        f.file_name().hash(&mut h);
        std::fs::read(&f).unwrap_or_default().hash(&mut h);
    }
    h.finish()
}

fn dump(tool: &Path, what: &str, image: &Path) -> Result<String, String> {
    sass::tool::dump(tool, what, &[], image)
}

fn analyse_module(
    tool: &Path,
    key: u64,
    module: &str,
    fatbin: &Path,
    cache_stem: &Path,
) -> Result<String, String> {
    let cached = cache_stem.with_extension(format!("sass-{key:016x}"));
    if let Ok(rendered) = std::fs::read_to_string(&cached) {
        return Ok(rendered);
    }
    let listing = dump(tool, "-sass", fatbin)?;
    let elf = dump(tool, "-elf", fatbin)?;
    let kernels = sass::analyse(module, &listing, &elf).map_err(|e| format!("{module}: {e}"))?;
    if kernels.is_empty() {
        return Err(format!("{module}: no {} code in the listing", sass::ARCH));
    }
    let rendered: Vec<String> = kernels.iter().map(|k| k.to_rust("sass")).collect();
    let rendered = rendered.join(",\n");
    // Best effort: a cache that cannot be written only costs the next build time.
    let _ = std::fs::write(&cached, &rendered);
    Ok(rendered)
}

/// The analysis of every module: `(name, fatbin, cache stem)`.
pub fn analyse_all(
    root: &Path,
    tool: Option<&Path>,
    modules: &[(String, PathBuf, PathBuf)],
) -> SassResult {
    let Some(tool) = tool else {
        println!("cargo:warning=GPU kernels built without the static report: {MISSING}");
        return SassResult {
            status: Err(MISSING.to_string()),
            kernels: Vec::new(),
        };
    };
    let tool_version = version(tool);
    let key = analyser_key(root, &tool_version);
    let mut kernels = Vec::new();
    let mut failures = Vec::new();
    // One thread per module: cuobjdump and the analysis of each are independent.
    let analysed: Vec<_> = std::thread::scope(|scope| {
        let running: Vec<_> = (modules.iter())
            .map(|(module, fatbin, stem)| {
                scope.spawn(move || analyse_module(tool, key, module, fatbin, stem))
            })
            .collect();
        (running.into_iter())
            .map(|t| t.join().expect("a module's analysis panicked"))
            .collect()
    });
    for result in analysed {
        match result {
            Ok(rendered) => kernels.push(rendered),
            Err(e) => failures.push(e),
        }
    }
    let status = match failures.first() {
        None => Ok(format!("cuobjdump ({tool_version})")),
        Some(first) => {
            for f in &failures {
                println!("cargo:warning=SASS analysis failed: {f}");
            }
            Err(format!("SASS analysis failed: {first}"))
        }
    };
    SassResult { status, kernels }
}

/// Compiles the fixtures for sm_90 and dumps them, cached; writes `$OUT_DIR/sass_fixtures.rs`
/// with `FRESH: Result<(&str, &str), &str>` = (SASS listing, ELF dump) or why there is none.
pub fn fixtures(root: &Path, out: &Path, cache: &Path, tools: Option<(&Path, &Path)>) {
    let source = root.join("tests/data/sass/fixtures.cu");
    println!("cargo:rerun-if-changed={}", source.display());
    let fresh = match tools {
        None => Err(MISSING.to_string()),
        Some((nvcc, cuobjdump)) => compile_fixtures(&source, out, cache, nvcc, cuobjdump),
    };
    let text = match fresh {
        Ok((listing, elf)) => format!(
            "pub const FRESH: Result<(&str, &str), &str> = Ok((include_str!({:?}), include_str!({:?})));\n",
            listing.display().to_string(),
            elf.display().to_string()
        ),
        Err(why) => {
            println!("cargo:warning=SASS fixtures not compiled: {why}");
            format!("pub const FRESH: Result<(&str, &str), &str> = Err({why:?});\n")
        }
    };
    std::fs::write(out.join("sass_fixtures.rs"), text).expect("write sass_fixtures.rs");
}

fn compile_fixtures(
    source: &Path,
    out: &Path,
    cache: &Path,
    nvcc: &Path,
    cuobjdump: &Path,
) -> Result<(PathBuf, PathBuf), String> {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (version(nvcc), version(cuobjdump)).hash(&mut h);
    std::fs::read(source).unwrap_or_default().hash(&mut h);
    let stem = cache.join(format!("sass-fixtures-{:016x}", h.finish()));
    let (listing, elf) = (stem.with_extension("sass"), stem.with_extension("elf"));
    if !(listing.is_file() && elf.is_file()) {
        let cubin = out.join("sass-fixtures.cubin");
        let compiled = Command::new(nvcc)
            .args(["-cubin", "-arch", sass::ARCH, "-O3", "-std=c++17"])
            .arg(source)
            .arg("-o")
            .arg(&cubin)
            .output()
            .map_err(|e| format!("cannot run nvcc: {e}"))?;
        if !compiled.status.success() {
            return Err(format!(
                "nvcc failed on {}: {}",
                source.display(),
                String::from_utf8_lossy(&compiled.stderr)
            ));
        }
        std::fs::write(&listing, dump(cuobjdump, "-sass", &cubin)?).map_err(|e| e.to_string())?;
        std::fs::write(&elf, dump(cuobjdump, "-elf", &cubin)?).map_err(|e| e.to_string())?;
    }
    Ok((listing, elf))
}
