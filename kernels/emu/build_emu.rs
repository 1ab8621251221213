//! The emulator half of build.rs (included from it with `#[path]`): compiles every `kernels/*.cu`
//! and `kernels/emu/selftest/*.cu` with the host C++ compiler against `kernels/emu/` into the
//! static library `pagedkv_emu`, with one C entry point per kernel, and writes the Rust table of
//! those entry points and their parameter kinds (`$OUT_DIR/emu_kernels.rs`, used by `src/emu`).
//!
//! Each file is preprocessed with `PAGEDKV_EMU_SCAN`, under which `__global__`,
//! `__launch_bounds__` and `__shared__` leave markers in the text. Kernels are found there (so
//! macro-stamped kernels count): every `extern "C" <marker> void NAME(PARAMS)`. Then the markers
//! are removed, every static `__shared__` variable gets a registrar after its declaration (so the
//! runtime can poison it before each block), and the text plus the generated entry points is
//! compiled as preprocessed C++ (`.ii`; line markers keep diagnostics pointing at the `.cu`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// What a kernel parameter is, as the Rust launcher checks it (`src/emu/kernel.rs` has the enum).
struct Param {
    name: String,
    /// `Buf(Elem, mutable)` or `Scalar(Scalar)`, written as Rust source.
    rust_kind: String,
    /// C++ expression building the argument from `a[i]`.
    cpp_arg: String,
}

struct Kernel {
    name: String,
    params: Vec<Param>,
    /// The C++ expression of `__launch_bounds__`'s first argument, or "1024".
    max_threads: String,
}

pub fn build(root: &Path, out: &Path, kernel_sources: &[PathBuf]) {
    let kernels_dir = root.join("kernels");
    let emu_dir = kernels_dir.join("emu");
    let mut sources: Vec<PathBuf> = kernel_sources.to_vec();
    sources.extend(super::kernel_sources(&emu_dir.join("selftest")));

    let gen_dir = out.join("emu");
    std::fs::create_dir_all(&gen_dir).expect("create OUT_DIR/emu");
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .std("c++17")
        .opt_level(2)
        .warnings(false)
        .flag("-fno-strict-aliasing")
        .flag_if_supported("-Wno-unknown-pragmas")
        .define("PAGEDKV_EMU", None)
        .include(&kernels_dir)
        .file(emu_dir.join("runtime.cpp"))
        .file(emu_dir.join("fiber.cpp"));

    let mut all = Vec::new();
    for src in &sources {
        let module = src.file_stem().unwrap().to_string_lossy().into_owned();
        let ns = format!("pagedkv_emu_module_{module}");
        // Each file in its own namespace, as each .cu is its own module on the GPU: helpers of the
        // same name in two files do not collide. extern "C" kernels keep their plain names.
        let head = gen_dir.join(format!("{module}_head.cpp"));
        std::fs::write(
            &head,
            format!(
                "#include \"emu/runtime.h\"\n#include \"common.cuh\"\nnamespace {ns} {{\n\
                 #include {:?}\n}}\n",
                src.display().to_string()
            ),
        )
        .expect("write head");
        let text = preprocess(&head, src, &kernels_dir);
        let kernels = scan(src, &text);
        let unit = gen_dir.join(format!("{module}_emu.ii"));
        let code = rewrite(src, &text) + &render_entry_points(&ns, &kernels);
        std::fs::write(&unit, code).expect("write the emulator's translation unit");
        build.file(unit);
        all.extend(kernels);
    }
    build.compile("pagedkv_emu");
    std::fs::write(out.join("emu_kernels.rs"), render_table(&all)).expect("write emu_kernels.rs");
}

/// `head` (which includes `src`) preprocessed in scan mode, line markers kept.
fn preprocess(head: &Path, src: &Path, kernels_dir: &Path) -> String {
    let compiler = cc::Build::new().cpp(true).get_compiler();
    let output = compiler
        .to_command()
        .args([
            "-E",
            "-x",
            "c++",
            "-std=c++17",
            "-DPAGEDKV_EMU",
            "-DPAGEDKV_EMU_SCAN",
        ])
        .arg("-I")
        .arg(kernels_dir)
        .arg(head)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C++ preprocessor on {}: {e}", src.display()));
    if !output.status.success() {
        panic!(
            "the C++ preprocessor failed on {}:\n{}",
            src.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    String::from_utf8_lossy(&output.stdout).into_owned()
}

const KERNEL_MARKER: &str = "__pagedkv_emu_kernel__";
const BOUNDS_MARKER: &str = "__pagedkv_emu_launch_bounds__";
const SHARED_MARKER: &str = "__pagedkv_emu_shared__";

/// Text without the preprocessor's line markers.
fn without_line_markers(text: &str) -> String {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The kernels of one source file, from its preprocessed text.
fn scan(src: &Path, text: &str) -> Vec<Kernel> {
    let mut kernels: Vec<Kernel> = Vec::new();
    let pieces: Vec<&str> = text.split(KERNEL_MARKER).collect();
    for (before, piece) in pieces.iter().zip(&pieces[1..]) {
        let tail = &before[before.len().saturating_sub(2000)..];
        if !without_line_markers(tail)
            .trim_end()
            .ends_with("extern \"C\"")
        {
            panic!(
                "{}: a __global__ function without extern \"C\" before it: entry points must be \
                 `extern \"C\" __global__ void name(...)`, templates live in __device__ functions \
                 (KERNELS.md)",
                src.display()
            );
        }
        // `__launch_bounds__` may come before or after `void`.
        let (bounds_before, sig) = launch_bounds(piece);
        let sig = sig
            .trim_start()
            .strip_prefix("void")
            .unwrap_or_else(|| panic!("{}: a __global__ function must return void", src.display()));
        let (bounds_after, sig) = launch_bounds(sig);
        let max_threads = bounds_before
            .or(bounds_after)
            .unwrap_or_else(|| "1024".to_string());
        let open = sig.find('(').expect("kernel parameter list");
        let name = sig[..open].trim().to_string();
        let close = matching_paren(sig, open);
        if sig[close + 1..].trim_start().starts_with(';') {
            continue; // a declaration; the definition is found on its own
        }
        if kernels.iter().any(|k| k.name == name) {
            continue;
        }
        let params = split_params(&without_line_markers(&sig[open + 1..close]))
            .into_iter()
            .enumerate()
            .map(|(i, p)| param(src, &name, i, &p))
            .collect();
        kernels.push(Kernel {
            name,
            params,
            max_threads,
        });
    }
    kernels
}

/// Strips a leading `__launch_bounds__(max_threads, ...)` (a marker in scan mode) and returns the
/// C++ expression of its first argument.
fn launch_bounds(sig: &str) -> (Option<String>, &str) {
    match sig.trim_start().strip_prefix(BOUNDS_MARKER) {
        Some(rest) => {
            let open = rest.find('(').expect("launch bounds");
            let close = matching_paren(rest, open);
            let args = split_params(&rest[open + 1..close]);
            (args.into_iter().next(), &rest[close + 1..])
        }
        None => (None, sig),
    }
}

fn matching_paren(s: &str, open: usize) -> usize {
    let mut depth = 0;
    for (i, c) in s[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return open + i;
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced parentheses in a kernel signature");
}

/// Parameters split at top-level commas (not inside `<>` or `()`).
fn split_params(list: &str) -> Vec<String> {
    let (mut depth, mut cur, mut out) = (0i32, String::new(), Vec::new());
    for c in list.chars() {
        match c {
            '<' | '(' => depth += 1,
            '>' | ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        out.push(cur);
    }
    out.into_iter()
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

fn param(src: &Path, kernel: &str, index: usize, decl: &str) -> Param {
    let cut = decl
        .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
        .map_or(0, |i| i + 1);
    let (ty, name) = (decl[..cut].trim(), decl[cut..].to_string());
    let unsupported = || -> ! {
        panic!(
            "{}: kernel {kernel}, parameter `{decl}`: the emulator passes GPTR(T) buffers of \
             __half/__nv_bfloat16/float/int/unsigned/int64_t/uint64_t/unsigned char and int/unsigned/\
             float/int64_t/uint64_t scalars only",
            src.display()
        )
    };
    if let Some(inner) = ty
        .strip_prefix("::emu::gptr<")
        .or_else(|| ty.strip_prefix("::emu::gptr <"))
        .and_then(|r| r.strip_suffix('>'))
    {
        let inner = inner.trim();
        let (mutable, elem_ty) = match inner.strip_prefix("const ") {
            Some(e) => (false, e.trim()),
            None => (true, inner),
        };
        let elem = match elem_ty {
            "__half" | "half" => "F16",
            "__nv_bfloat16" => "Bf16",
            "float" => "F32",
            "int" | "int32_t" => "I32",
            "unsigned" | "unsigned int" | "uint32_t" => "U32",
            "long long" | "long" | "int64_t" => "I64",
            "unsigned long long" | "unsigned long" | "uint64_t" | "size_t" => "U64",
            "unsigned char" | "uint8_t" => "U8",
            _ => unsupported(),
        };
        return Param {
            rust_kind: format!("ParamKind::Buf(Elem::{elem}, {mutable})"),
            cpp_arg: format!("::emu::gptr<{inner}>(a[{index}].ptr, a[{index}].bytes, {name:?})"),
            name,
        };
    }
    let scalar_ty = ty.strip_prefix("const ").unwrap_or(ty).trim();
    let (kind, cpp) = match scalar_ty {
        "int" | "int32_t" => ("I32", "int32_t"),
        "unsigned" | "unsigned int" | "uint32_t" => ("U32", "uint32_t"),
        "float" => ("F32", "float"),
        "long long" | "long" | "int64_t" => ("I64", "int64_t"),
        "unsigned long long" | "unsigned long" | "uint64_t" | "size_t" => ("U64", "uint64_t"),
        _ => unsupported(),
    };
    Param {
        rust_kind: format!("ParamKind::Scalar(Scalar::{kind})"),
        cpp_arg: format!("::emu::scalar<{cpp}>(a[{index}])"),
        name,
    }
}

/// The preprocessed text without scan markers, each static `__shared__` variable followed by a
/// registrar: `static thread_local ::emu::SharedRegistrar r(&name, sizeof(name));`.
fn rewrite(src: &Path, text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 4096);
    let mut rest = text;
    let mut registrars = 0;
    loop {
        let next = [KERNEL_MARKER, BOUNDS_MARKER, SHARED_MARKER]
            .into_iter()
            .filter_map(|m| rest.find(m).map(|i| (i, m)))
            .min();
        let Some((at, marker)) = next else {
            out.push_str(rest);
            return out;
        };
        out.push_str(&rest[..at]);
        rest = &rest[at + marker.len()..];
        if marker == BOUNDS_MARKER {
            let close = matching_paren(rest, rest.find('(').expect("launch bounds"));
            rest = &rest[close + 1..];
        } else if marker == SHARED_MARKER {
            let end = statement_end(rest);
            let decl = &rest[..end];
            if decl.split_whitespace().any(|t| t == "extern") {
                panic!(
                    "{}: `extern __shared__` arrays are declared with DYNAMIC_SHARED(T, name) \
                     (KERNELS.md), which both nvcc and the emulator understand",
                    src.display()
                );
            }
            out.push_str(decl);
            out.push(';');
            for name in declared_names(decl) {
                registrars += 1;
                write!(
                    out,
                    " static thread_local ::emu::SharedRegistrar \
                     pagedkv_emu_shared_{registrars}(&{name}, sizeof({name}));"
                )
                .unwrap();
            }
            rest = &rest[end + 1..];
        }
    }
}

/// Index of the `;` that ends the declaration starting `s`.
fn statement_end(s: &str) -> usize {
    let mut depth = 0i32;
    for (i, c) in s.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            ';' if depth == 0 => return i,
            _ => {}
        }
    }
    panic!("a __shared__ declaration without its `;`");
}

/// The variable names a declaration (`attrs static thread_local T a[4], b[8]`) declares.
fn declared_names(decl: &str) -> Vec<String> {
    let mut plain = String::new();
    let mut rest = decl;
    while let Some(at) = rest.find("__attribute__") {
        plain.push_str(&rest[..at]);
        let after = &rest[at..];
        let close = matching_paren(after, after.find('(').expect("attribute"));
        rest = &after[close + 1..];
    }
    plain.push_str(rest);
    let plain = without_line_markers(&plain);
    split_params(&plain)
        .iter()
        .filter_map(|d| {
            let head = d.split(['[', '=', '{']).next().unwrap_or("");
            let name = head
                .rsplit(|c: char| !(c.is_alphanumeric() || c == '_'))
                .find(|t| !t.is_empty())?;
            (name.chars().next()?.is_alphabetic() || name.starts_with('_'))
                .then(|| name.to_string())
        })
        .collect()
}

fn render_entry_points(ns: &str, kernels: &[Kernel]) -> String {
    let mut s =
        String::from("\n// Entry points generated by build.rs (kernels/emu/build_emu.rs).\n");
    for k in kernels {
        let args: Vec<&str> = k.params.iter().map(|p| p.cpp_arg.as_str()).collect();
        writeln!(
            s,
            "static void pagedkv_emu_body_{name}(const EmuArg* a) {{ (void)a; {ns}::{name}({args}); }}\n\
             extern \"C\" int pagedkv_emu_{name}(const EmuLaunch* l, const EmuArg* a, char* err, \
             size_t errlen) {{ using namespace {ns}; return ::emu::launch({name:?}, l, \
             pagedkv_emu_body_{name}, a, err, errlen, static_cast<long long>({bounds})); }}",
            name = k.name,
            args = args.join(", "),
            bounds = k.max_threads
        )
        .unwrap();
    }
    s
}

fn render_table(kernels: &[Kernel]) -> String {
    let mut s = String::from("// Generated by build.rs (kernels/emu/build_emu.rs).\n");
    s.push_str("extern \"C\" {\n");
    for k in kernels {
        writeln!(
            s,
            "    fn pagedkv_emu_{}(l: *const EmuLaunch, a: *const EmuArg, err: *mut std::ffi::c_char, \
             errlen: usize) -> std::ffi::c_int;",
            k.name
        )
        .unwrap();
    }
    s.push_str("}\n\n/// Every emulated kernel, in source order.\npub static KERNELS: &[KernelInfo] = &[\n");
    for k in kernels {
        writeln!(
            s,
            "    KernelInfo {{ name: {:?}, entry: pagedkv_emu_{}, params: &[",
            k.name, k.name
        )
        .unwrap();
        for p in &k.params {
            writeln!(
                s,
                "        Param {{ name: {:?}, kind: {} }},",
                p.name, p.rust_kind
            )
            .unwrap();
        }
        s.push_str("    ] },\n");
    }
    s.push_str("];\n");
    s
}
