//! build.rs runs again when a CUDA compiler appears or changes, and only then
//! (kernels/build_nvcc.rs). The rules on paths are checked directly; cargo's side is checked on a
//! scratch crate whose build script is the same file, with a fake nvcc (a shell script that
//! answers `--version`) put where the install script, `PATH` and `$NVCC` would put a real one.

#[path = "../../kernels/build_nvcc.rs"]
#[allow(dead_code)] // build.rs uses what the rules below do not
mod nvcc_search;

use nvcc_search::{Candidate, Search, INSTALLED};
use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

fn search(root: &str, path: &str, nvcc: Option<&str>) -> Search {
    Search {
        root: PathBuf::from(root),
        nvcc: nvcc.map(OsString::from),
        cuda_home: Some(OsString::from("/opt/cuda")),
        path: Some(OsString::from(path)),
    }
}

fn names(c: &[Candidate]) -> Vec<String> {
    c.iter().map(|c| c.nvcc.display().to_string()).collect()
}

#[test]
fn nvcc_is_looked_for_in_order_and_only_existing_folders_are_watched() {
    let s = search(
        "/w/repo",
        "/usr/bin:relative/bin:/w:/w/repo/target/debug",
        Some("/x/nvcc"),
    );
    let c = s.candidates();
    assert_eq!(
        names(&c),
        [
            "/x/nvcc",
            "/opt/cuda/bin/nvcc",
            "/usr/bin/nvcc",
            "/w/nvcc",
            "/w/repo/target/debug/nvcc",
            "/w/repo/.cuda/nvidia/cu13/bin/nvcc",
        ]
    );
    assert_eq!(c[5].appears_in, PathBuf::from("/w/repo/.cuda"));
    let all = |_: &Path| true;
    // Nothing found: every folder nvcc could appear in, except those holding or inside the
    // repository (their time is the build's own), bar .cuda.
    let watched = s.watched(&c, None, &all);
    assert_eq!(
        watched,
        ["/x", "/opt/cuda/bin", "/usr/bin", "/w/repo/.cuda"].map(PathBuf::from)
    );
    // A missing path would make cargo rerun the script at every build: never watched.
    let no_opt = |p: &Path| !p.starts_with("/opt");
    assert!(!s
        .watched(&c, None, &no_opt)
        .contains(&PathBuf::from("/opt/cuda/bin")));
    // Found on PATH: the file chosen, and the places searched before it; not .cuda.
    let watched = s.watched(&c, Some(2), &all);
    assert_eq!(
        watched,
        ["/x", "/opt/cuda/bin", "/usr/bin/nvcc"].map(PathBuf::from)
    );
    // Found first: the file alone.
    assert_eq!(s.watched(&c, Some(0), &all), [PathBuf::from("/x/nvcc")]);
}

/// A scratch crate whose build script is kernels/build_nvcc.rs, built with a `PATH` of our own.
struct Scratch {
    /// Holds the crate and the folders outside it.
    base: PathBuf,
    /// The crate.
    dir: PathBuf,
    /// The first folder of its `PATH`.
    early: PathBuf,
    path: OsString,
}

impl Scratch {
    fn new() -> Option<Scratch> {
        let base = std::env::temp_dir().join(format!("pagedkv-build-nvcc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let dir = base.join("crate");
        std::fs::create_dir_all(dir.join("src")).unwrap();
        let module = Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels/build_nvcc.rs");
        std::fs::write(
            dir.join("Cargo.toml"),
            "[package]\nname = \"nvcc-probe\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n[workspace]\n",
        )
        .unwrap();
        std::fs::write(dir.join("src/main.rs"), "fn main() {}\n").unwrap();
        std::fs::write(
            dir.join("build.rs"),
            format!(
                "#[path = {module:?}]\nmod build_nvcc;\n\
                 fn main() {{\n\
                     let root = std::path::PathBuf::from(std::env::var(\"CARGO_MANIFEST_DIR\").unwrap());\n\
                     let found = build_nvcc::find_nvcc(&root);\n\
                     let line = format!(\"{{:?}}\\n\", found);\n\
                     use std::io::Write;\n\
                     std::fs::OpenOptions::new().create(true).append(true).open(root.join(\"runs.log\"))\n\
                         .unwrap().write_all(line.as_bytes()).unwrap();\n\
                 }}\n"
            ),
        )
        .unwrap();
        // PATH: a folder of our own first (outside the crate: folders inside are not watched),
        // then where cargo, rustc and the linker are.
        let early = base.join("early");
        std::fs::create_dir(&early).unwrap();
        let cargo = PathBuf::from(std::env::var_os("CARGO")?);
        let toolchain = cargo.parent()?.to_path_buf();
        let dirs = [early.clone(), toolchain, "/usr/bin".into(), "/bin".into()];
        if dirs[1..].iter().any(|d| d.join("nvcc").exists()) {
            return None; // a real nvcc on this PATH would be found first
        }
        let path = std::env::join_paths(&dirs).unwrap();
        Some(Scratch {
            base,
            dir,
            early,
            path,
        })
    }

    /// Builds; the build script's runs so far, each with what it found.
    fn build(&self, nvcc: Option<&Path>) -> Vec<String> {
        let mut cmd = Command::new(std::env::var_os("CARGO").unwrap());
        cmd.args(["build", "--quiet", "--offline", "--target-dir"])
            .arg(self.dir.join("target"))
            .current_dir(&self.dir)
            .env("PATH", &self.path)
            .env_remove("CUDA_HOME")
            .env_remove("PAGEDKV_SKIP_NVCC")
            .env_remove("NVCC");
        if let Some(n) = nvcc {
            cmd.env("NVCC", n);
        }
        let out = cmd.output().expect("run cargo");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::read_to_string(self.dir.join("runs.log"))
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }
}

/// Writes a fake nvcc at `path` that answers `--version` with `release`.
fn fake_nvcc(path: &Path, release: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let script = format!("#!/bin/sh\necho 'Cuda compilation tools, release {release}'\n");
    std::fs::write(path, script).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn cargo_reruns_the_build_script_when_a_compiler_appears_or_changes_and_only_then() {
    let Some(s) = Scratch::new() else {
        eprintln!("skipped: CARGO not set, or an nvcc already on the scratch crate's PATH");
        return;
    };
    let some = |p: &Path| format!("Some({p:?})");
    // A fresh clone: nothing found, .cuda made empty to be watched; a second build is quiet.
    assert_eq!(s.build(None), ["None"]);
    assert!(s.dir.join(".cuda").is_dir());
    assert_eq!(s.build(None), ["None"], "no change, no rerun");
    // scripts/install-cuda-compiler fills .cuda.
    let installed = s.dir.join(INSTALLED);
    fake_nvcc(&installed, "13.0");
    let runs = s.build(None);
    assert_eq!(runs.last(), Some(&some(&installed)), "{runs:?}");
    assert_eq!(s.build(None).len(), 2, "no change, no rerun");
    // An nvcc appears on PATH, ahead of .cuda.
    let on_path = s.early.join("nvcc");
    fake_nvcc(&on_path, "13.0");
    let runs = s.build(None);
    assert_eq!(runs.last(), Some(&some(&on_path)), "{runs:?}");
    // The compiler on PATH changes in place.
    std::thread::sleep(std::time::Duration::from_millis(20));
    fake_nvcc(&on_path, "13.1");
    assert_eq!(
        s.build(None).len(),
        4,
        "a changed compiler reruns the script"
    );
    assert_eq!(s.build(None).len(), 4, "no change, no rerun");
    // $NVCC names another.
    let named = s.base.join("named/nvcc");
    fake_nvcc(&named, "13.0");
    let runs = s.build(Some(&named));
    assert_eq!(runs.last(), Some(&some(&named)), "{runs:?}");
    let _ = std::fs::remove_dir_all(&s.base);
}
