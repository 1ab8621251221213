//! The static report of any compiled kernel: a cubin, a fatbin or a shared library holding device
//! code (vLLM's `_C.abi3.so`, FlashInfer's JIT modules), read through cuobjdump's sm_90 listing,
//! ELF attributes and resource usage. What the code cannot say (threads per CTA without
//! `__launch_bounds__`, dynamic shared memory, bytes per token, how often one KV head is re-read)
//! comes from [`ForeignOptions`].

use super::occupancy;
use super::report::{kernel_report, LaunchFacts, Resources, StaticKernel};
use super::sass::{self, nvinfo, resources, tool};
use super::token_bytes::attention_stream;
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use thiserror::Error;

/// What the report needs to know beyond the code.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ForeignOptions {
    /// Only kernels whose (mangled) name contains this.
    pub kernel: Option<String>,
    /// Threads per CTA for kernels without `EIATTR_MAX_THREADS`.
    pub threads: Option<u32>,
    pub dynamic_shared_bytes: u32,
    /// Bytes one token of one KV head streams; from an attention kernel's name when not given.
    pub bytes_per_token: Option<u32>,
    /// Query heads per KV head.
    pub group: u32,
    /// Query heads one CTA serves per read of the KV head (vLLM: 1; ours, FlashInfer: the group).
    pub heads_per_cta: u32,
}

#[derive(Debug, Error)]
pub enum ForeignError {
    #[error("no cuobjdump found (set CUOBJDUMP, put it on PATH, or install it with scripts/install-cuda-compiler)")]
    NoCuobjdump,
    #[error("cannot read {0}: {1}")]
    Unreadable(PathBuf, std::io::Error),
    #[error("{0}: no sm_90 device code ({1})")]
    NoSm90Code(PathBuf, String),
    #[error("no kernel of {file} matches '{pattern}'; nearest: {near}")]
    NoMatch {
        file: PathBuf,
        pattern: String,
        near: String,
    },
    #[error("--heads-per-cta {heads} must divide --group {group}")]
    HeadsPerCta { heads: u32, group: u32 },
    #[error("{0}")]
    Tool(String),
    #[error("{0}")]
    Listing(String),
}

/// cuobjdump, found as the build finds it (`$CUOBJDUMP`, this repository's `.cuda/`, `PATH`).
pub fn cuobjdump() -> Option<PathBuf> {
    tool::find_cuobjdump(Path::new(env!("CARGO_MANIFEST_DIR")), None)
}

/// The `near` kernel names closest to `pattern`, for an error message.
fn nearest(pattern: &str, names: &BTreeSet<String>, near: usize) -> String {
    let mut scored: Vec<(f64, &String)> = names
        .iter()
        .map(|n| (strsim::sorensen_dice(pattern, n), n))
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    let list: Vec<&str> = scored.iter().take(near).map(|(_, n)| n.as_str()).collect();
    if list.is_empty() {
        "none".to_string()
    } else {
        list.join(", ")
    }
}

/// The `.nv.info.NAME` sections of `cuobjdump -elf` for the `wanted` kernels, read as the tool
/// prints them (a shared library's whole ELF dump runs to hundreds of megabytes; only these lines
/// are kept).
fn launch_bounds(
    tool: &Path,
    image: &Path,
    wanted: &BTreeSet<String>,
) -> Result<std::collections::BTreeMap<String, u32>, ForeignError> {
    let mut child = Command::new(tool)
        .args(["-elf", "-arch", sass::ARCH])
        .arg(image)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| ForeignError::Tool(format!("cannot run {}: {e}", tool.display())))?;
    let mut kept = String::new();
    let mut keep = false;
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).split(b'\n') {
            let line = line.map_err(|e| ForeignError::Tool(format!("cuobjdump -elf: {e}")))?;
            let line = String::from_utf8_lossy(&line);
            if !line.starts_with(char::is_whitespace) && !line.trim().is_empty() {
                keep = line
                    .trim()
                    .strip_prefix(".nv.info.")
                    .is_some_and(|k| wanted.contains(k));
            }
            if keep {
                kept.push_str(&line);
                kept.push('\n');
            }
        }
    }
    // The listing already proved the image readable; a failure here leaves only the bounds out.
    let _ = child.wait();
    Ok(nvinfo::max_threads(&kept))
}

/// The report of every sm_90 kernel of `image` that `options.kernel` selects.
pub fn read(image: &Path, options: &ForeignOptions) -> Result<Vec<StaticKernel>, ForeignError> {
    if options.heads_per_cta == 0 || !options.group.is_multiple_of(options.heads_per_cta) {
        return Err(ForeignError::HeadsPerCta {
            heads: options.heads_per_cta,
            group: options.group,
        });
    }
    let unreadable = |e| ForeignError::Unreadable(image.to_path_buf(), e);
    std::fs::File::open(image).map_err(unreadable)?;
    if !image.is_file() {
        return Err(unreadable(std::io::Error::other("not a file")));
    }
    let tool = cuobjdump().ok_or(ForeignError::NoCuobjdump)?;
    let usage = tool::dump(&tool, "-res-usage", &[], image)
        .map_err(|why| ForeignError::NoSm90Code(image.to_path_buf(), why))?;
    let usage = resources::parse(&usage);
    let names: BTreeSet<String> = usage.keys().cloned().collect();
    if names.is_empty() {
        return Err(ForeignError::NoSm90Code(
            image.to_path_buf(),
            "cuobjdump lists no function".to_string(),
        ));
    }
    let wanted: BTreeSet<String> = match &options.kernel {
        Some(p) => names
            .iter()
            .filter(|n| n.contains(p.as_str()))
            .cloned()
            .collect(),
        None => names.clone(),
    };
    if wanted.is_empty() {
        let pattern = options.kernel.clone().unwrap_or_default();
        return Err(ForeignError::NoMatch {
            file: image.to_path_buf(),
            near: nearest(&pattern, &names, 5),
            pattern,
        });
    }
    let mut extra: Vec<String> = Vec::new();
    if options.kernel.is_some() {
        extra.push("-fun".into());
        extra.push(wanted.iter().cloned().collect::<Vec<_>>().join(","));
    }
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let listing = tool::dump(&tool, "-sass", &extra, image).map_err(ForeignError::Tool)?;
    let module = image.file_name().map_or_else(
        || image.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    // The bounds come from the ELF dump, the code from the listing: analyse() takes both.
    let bounds = launch_bounds(&tool, image, &wanted)?;
    let elf: String = bounds
        .iter()
        .map(|(k, t)| {
            format!(".nv.info.{k}\n\tAttribute:\tEIATTR_MAX_THREADS\n\tValue:\t{t} 1 1\n")
        })
        .collect();
    let analysed =
        sass::analyse(&module, &listing, &elf).map_err(|e| ForeignError::Listing(e.to_string()))?;
    if analysed.is_empty() {
        return Err(ForeignError::NoSm90Code(
            image.to_path_buf(),
            "its code is for other architectures".to_string(),
        ));
    }
    let reads_per_token = f64::from(options.group / options.heads_per_cta);
    Ok(analysed
        .iter()
        .filter(|k| wanted.contains(k.kernel.as_ref()))
        .map(|k| {
            let r = usage.get(k.kernel.as_ref()).map(|u| Resources {
                registers: u.registers,
                spill_bytes: None,
                local_bytes: Some(u.local_bytes),
                static_shared_bytes: u.shared_bytes,
            });
            let launch = LaunchFacts {
                declared_threads: options.threads,
                dynamic_shared_bytes: options.dynamic_shared_bytes,
                bytes_per_token: options
                    .bytes_per_token
                    .or_else(|| attention_stream(&k.kernel).map(|s| s.bytes_per_token())),
                reads_per_token,
            };
            kernel_report(&occupancy::SM90, k, r, &launch)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_names_share_the_most_pieces() {
        let names: BTreeSet<String> = [
            "paged_attention_f16_d128_g4",
            "paged_attention_f16_d128_g8",
            "stream_read",
            "contiguous_attention_f16_d128_g4",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let near = nearest("paged_atention_f16_d128_g4", &names, 2);
        assert_eq!(
            near,
            "paged_attention_f16_d128_g4, paged_attention_f16_d128_g8"
        );
        assert_eq!(nearest("x", &BTreeSet::new(), 3), "none");
    }

    #[test]
    fn heads_per_cta_must_divide_the_group() {
        let options = ForeignOptions {
            group: 4,
            heads_per_cta: 3,
            ..Default::default()
        };
        let err = read(Path::new("/nonexistent"), &options).unwrap_err();
        assert!(matches!(
            err,
            ForeignError::HeadsPerCta { heads: 3, group: 4 }
        ));
    }
}
