//! Where build.rs finds nvcc, and what it asks cargo to watch so that the build script runs again
//! when a compiler appears or changes (included from build.rs with `#[path]`, and from
//! tests/suite/build_nvcc.rs, which builds a scratch crate on it to check cargo's side).
//!
//! Cargo reruns a build script when a `rerun-if-env-changed` variable changes or a
//! `rerun-if-changed` path's modification time does (a folder's: the newest of everything in it).
//! A path that does not exist makes cargo rerun the script on *every* build, and rebuild the
//! crate, so only existing paths are watched:
//! - the nvcc chosen (a new compiler in its place changes its time);
//! - for every place searched before it, the folder nvcc would appear in (a `bin` folder of
//!   `$CUDA_HOME` or `PATH`, whose time changes when a file is added), when that folder exists;
//! - `.cuda/`, which `scripts/install-cuda-compiler` fills: created empty (it is git-ignored)
//!   when missing, so that the install changes its time.
//!
//! `PATH` folders above the repository or inside it are never watched: a folder's time is the
//! newest of all it holds, and the build's own `target/` changes at every build.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Variables that change where nvcc is found.
pub const ENV: &[&str] = &["NVCC", "CUDA_HOME", "PATH", "PAGEDKV_SKIP_NVCC"];

/// Where `scripts/install-cuda-compiler` puts nvcc, under the repository.
pub const INSTALLED: &str = ".cuda/nvidia/cu13/bin/nvcc";

/// The environment nvcc is searched with.
pub struct Search {
    pub root: PathBuf,
    pub nvcc: Option<OsString>,
    pub cuda_home: Option<OsString>,
    pub path: Option<OsString>,
}

/// A place nvcc may be: the file, and the existing folder whose time changes when it appears.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub nvcc: PathBuf,
    pub appears_in: PathBuf,
}

impl Search {
    pub fn from_env(root: &Path) -> Search {
        Search {
            root: root.to_path_buf(),
            nvcc: std::env::var_os("NVCC"),
            cuda_home: std::env::var_os("CUDA_HOME"),
            path: std::env::var_os("PATH"),
        }
    }

    /// `$NVCC`, then `$CUDA_HOME/bin/nvcc`, then `PATH`, then `.cuda/`.
    pub fn candidates(&self) -> Vec<Candidate> {
        let beside = |nvcc: PathBuf| Candidate {
            appears_in: nvcc.parent().map(Path::to_path_buf).unwrap_or_default(),
            nvcc,
        };
        let mut found = Vec::new();
        if let Some(p) = &self.nvcc {
            found.push(beside(PathBuf::from(p)));
        }
        if let Some(home) = &self.cuda_home {
            found.push(beside(PathBuf::from(home).join("bin/nvcc")));
        }
        if let Some(path) = &self.path {
            found.extend(
                std::env::split_paths(path)
                    .filter(|d| d.is_absolute())
                    .map(|d| beside(d.join("nvcc"))),
            );
        }
        found.push(Candidate {
            nvcc: self.root.join(INSTALLED),
            appears_in: self.root.join(".cuda"),
        });
        found
    }

    /// The `rerun-if-changed` paths when the search chose candidate `chosen` (`None`: nvcc was not
    /// found), given which paths exist: the chosen nvcc and, for each candidate before it, the
    /// folder it would appear in. Never a missing path, nor a folder holding the repository or
    /// one inside it (bar `.cuda/`).
    pub fn watched(
        &self,
        candidates: &[Candidate],
        chosen: Option<usize>,
        exists: &dyn Fn(&Path) -> bool,
    ) -> Vec<PathBuf> {
        let before = chosen.unwrap_or(candidates.len());
        let installed = self.root.join(".cuda");
        let mut paths: Vec<PathBuf> = candidates[..before]
            .iter()
            .map(|c| c.appears_in.clone())
            .filter(|d| *d == installed || !(self.root.starts_with(d) || d.starts_with(&self.root)))
            .collect();
        paths.extend(chosen.map(|i| candidates[i].nvcc.clone()));
        let mut unique = Vec::new();
        for p in paths {
            if exists(&p) && !unique.contains(&p) {
                unique.push(p);
            }
        }
        unique
    }
}

/// Finds nvcc (`PAGEDKV_SKIP_NVCC=1` pretends none exists) and prints what cargo must watch.
pub fn find_nvcc(root: &Path) -> Option<PathBuf> {
    for var in ENV {
        println!("cargo:rerun-if-env-changed={var}");
    }
    if std::env::var_os("PAGEDKV_SKIP_NVCC").is_some_and(|v| v == "1") {
        return None;
    }
    make_install_folder(root);
    let search = Search::from_env(root);
    let candidates = search.candidates();
    let chosen = candidates.iter().position(|c| runs(&c.nvcc));
    for path in search.watched(&candidates, chosen, &|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    chosen.map(|i| candidates[i].nvcc.clone())
}

/// Creates an empty `.cuda/` when missing, dated as old as `Cargo.toml`: cargo takes a watched
/// path changed during the script's run for a change, and would run the script again at the next
/// build. Best effort: where the folder cannot be made, an install there is not seen.
fn make_install_folder(root: &Path) {
    let dir = root.join(".cuda");
    if std::fs::symlink_metadata(&dir).is_ok() || std::fs::create_dir(&dir).is_err() {
        return;
    }
    let old = std::fs::metadata(root.join("Cargo.toml")).and_then(|m| m.modified());
    if let (Ok(old), Ok(folder)) = (old, std::fs::File::open(&dir)) {
        let _ = folder.set_modified(old);
    }
}

/// Whether `tool --version` runs and succeeds.
pub fn runs(tool: &Path) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}
