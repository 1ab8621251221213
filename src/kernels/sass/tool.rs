//! Finding and running `cuobjdump`, for the build (kernels/build_sass.rs) and for `pagedkv info
//! --sass` alike.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where `scripts/install-cuda-compiler` puts cuobjdump, under the repository root.
pub const INSTALLED: &str = ".cuda/nvidia/cu13/bin/cuobjdump";

/// Whether `tool --version` runs and succeeds.
pub fn runs(tool: &Path) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `$CUOBJDUMP`, then beside nvcc (when known), then `root/.cuda/`, then `PATH`: the first that
/// runs. `PAGEDKV_SKIP_SASS=1` pretends none exists.
pub fn find_cuobjdump(root: &Path, nvcc: Option<&Path>) -> Option<PathBuf> {
    if std::env::var_os("PAGEDKV_SKIP_SASS").is_some_and(|v| v == "1") {
        return None;
    }
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(p) = std::env::var_os("CUOBJDUMP") {
        candidates.push(PathBuf::from(p));
    }
    if let Some(dir) = nvcc.and_then(Path::parent) {
        candidates.push(dir.join("cuobjdump"));
    }
    candidates.push(root.join(INSTALLED));
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join("cuobjdump")));
    }
    candidates.into_iter().find(|p| runs(p))
}

/// The tool's release line (`Cuda compilation tools, release 13.2, V13.2.86`).
pub fn version(tool: &Path) -> String {
    Command::new(tool)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .find(|l| l.contains("release"))
                .map(|l| l.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".to_string())
}

/// `cuobjdump WHAT -arch sm_90 [EXTRA..] IMAGE`'s output (`what`: `-sass`, `-elf`, `-res-usage`),
/// or its error in one line.
pub fn dump(tool: &Path, what: &str, extra: &[&str], image: &Path) -> Result<String, String> {
    let out = Command::new(tool)
        .args([what, "-arch", super::ARCH])
        .args(extra)
        .arg(image)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", tool.display()))?;
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr);
        let why = why.split_whitespace().collect::<Vec<_>>().join(" ");
        return Err(format!("cuobjdump {what} {}: {why}", image.display()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
