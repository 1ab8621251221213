//! The house rule of `src/`: no import circles between files, and no import from a lower layer
//! to a higher one. Imports are read as text from every file's `use` lines and `crate::` /
//! `super::` paths (comments, strings and `#[cfg(test)]` modules left out), each resolved to the
//! deepest file that defines the module it names. A parent's `pub use` of its own children is
//! the module's face, not a dependency, and is left out too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The top-level modules of `src/`, lowest first: a file may import from its own module and
/// from the modules before it. `lib` is the crate root (lib.rs). A new top-level module goes
/// here, at the height of what it imports.
const LAYERS: &[&str] = &[
    "lib",
    // Foundations: no domain.
    "stats",
    "quote",
    "timing",
    "hw",
    "value_names",
    "mix",
    "progress",
    "host_memory",
    "report",
    // Requests and the KV cache's shapes.
    "workload",
    "kv",
    // Kernels and the devices that run them.
    "kernels",
    "launch",
    "emu",
    "device",
    "attention",
    "vmm",
    "swap",
    "lab",
    // Simulators, then what puts them to work.
    "sim",
    "sweep",
    "serve",
    "cli",
];

/// Module path (`["sim", "engine"]`) → file (`sim/engine/mod.rs`), the binary's files left out.
fn modules(src: &Path) -> BTreeMap<Vec<String>, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path
                    .strip_prefix(src)
                    .unwrap()
                    .to_string_lossy()
                    .to_string();
                if rel.starts_with("bin/") {
                    continue;
                }
                out.insert(module_of(&rel), rel);
            }
        }
    }
    out
}

fn module_of(file: &str) -> Vec<String> {
    let mut segs: Vec<String> = file
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if matches!(segs.last().map(String::as_str), Some("mod" | "lib")) {
        segs.pop();
    }
    segs
}

/// `text` with comments, string and char literals blanked, cut at its `#[cfg(test)]` module (the
/// test modules close the files that have them).
fn code_only(text: &str) -> String {
    let text = test_module_at(text).map_or(text, |at| &text[..at]);
    let b = text.as_bytes();
    let mut out = String::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &text[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            i += rest.find("*/").map_or(rest.len(), |k| k + 2);
        } else if let Some(end) = raw_string_end(rest) {
            out.push_str("\"\"");
            i += end;
        } else if b[i] == b'"' {
            let mut k = i + 1;
            while k < b.len() && b[k] != b'"' {
                k += if b[k] == b'\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            i = k + 1;
        } else if let Some(len) = char_literal(rest) {
            out.push_str("' '");
            i += len;
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// Where the `#[cfg(test)]` that opens a module stands (not one on a single item).
fn test_module_at(text: &str) -> Option<usize> {
    text.match_indices("#[cfg(test)]")
        .map(|(at, attr)| (at, text[at + attr.len()..].trim_start()))
        .find(|(_, rest)| rest.starts_with("mod ") || rest.starts_with("pub mod "))
        .map(|(at, _)| at)
}

/// The length of a raw string literal (`r"..."`, `r#"..."#`) at the start of `s`.
fn raw_string_end(s: &str) -> Option<usize> {
    let body = s.strip_prefix('r')?;
    let hashes = body.len() - body.trim_start_matches('#').len();
    let body = body[hashes..].strip_prefix('"')?;
    let close = format!("\"{}", "#".repeat(hashes));
    Some(1 + hashes + 1 + body.find(&close)? + close.len())
}

/// The length of a char literal (`'x'`, `'\n'`, `'"'`) at the start of `s`; a lifetime is none.
fn char_literal(s: &str) -> Option<usize> {
    let body = s.strip_prefix('\'')?;
    let mut chars = body.char_indices();
    let (_, c) = chars.next()?;
    let after = if c == '\\' {
        body[1..].find('\'')? + 1
    } else {
        c.len_utf8()
    };
    body[after..].starts_with('\'').then_some(after + 2)
}

/// A use tree (`a::{b, c::{d as e}}`) as its paths (`a::b`, `a::c::d`).
fn expand(tree: &str) -> Vec<String> {
    let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let Some(open) = tree.find('{') else {
        return vec![tree.split(" as ").next().unwrap().trim().to_string()];
    };
    let (head, body) = (&tree[..open], &tree[open + 1..tree.rfind('}').unwrap()]);
    let (mut parts, mut depth, mut cur) = (Vec::new(), 0, String::new());
    for ch in body.chars() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(ch);
    }
    parts.push(cur);
    parts
        .iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(|p| expand(p.trim()))
        .map(|p| format!("{head}{p}"))
        .collect()
}

/// The file a path used in module `me` lands in: the deepest module of it that has a file.
fn resolve(modules: &BTreeMap<Vec<String>, String>, me: &[String], path: &str) -> Option<String> {
    let mut segs = path.split("::").map(str::trim).filter(|s| !s.is_empty());
    let mut at: Vec<String> = match segs.next()? {
        "crate" => Vec::new(),
        "self" => me.to_vec(),
        "super" => me[..me.len().checked_sub(1)?].to_vec(),
        _ => return None,
    };
    for s in segs {
        match s {
            "super" => {
                at.pop();
            }
            "self" | "*" => {}
            s => at.push(s.to_string()),
        }
    }
    (0..=at.len())
        .rev()
        .find_map(|k| modules.get(&at[..k]).cloned())
}

/// Whether the `use` after `before` begins an item (`Some(is it pub)`), not a word's end.
fn starts_a_use(before: &str) -> Option<bool> {
    let before = before.trim_end();
    let (before, is_pub) = if let Some(b) = before.strip_suffix("pub") {
        (b, true)
    } else if let Some(at) = before
        .ends_with(')')
        .then(|| before.rfind("pub("))
        .flatten()
    {
        (&before[..at], true)
    } else {
        (before, false)
    };
    let before = before.trim_end();
    (before.is_empty() || before.ends_with([';', '{', '}', ']'])).then_some(is_pub)
}

/// Each file's imports of other files.
fn imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let modules = modules(src);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (me, file) in &modules {
        let code = code_only(&std::fs::read_to_string(src.join(file)).unwrap());
        let mut paths: Vec<(String, bool)> = Vec::new();
        for (k, _) in code.match_indices("use ") {
            let Some(is_pub) = starts_a_use(&code[..k]) else {
                continue;
            };
            let Some(end) = code[k..].find(';') else {
                continue;
            };
            for p in expand(&code[k + 4..k + end]) {
                paths.push((p, is_pub));
            }
        }
        for start in ["crate::", "super::"] {
            for (k, _) in code.match_indices(start) {
                if code[..k].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':') {
                    continue;
                }
                let end = code[k..]
                    .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .map_or(code.len(), |e| k + e);
                paths.push((code[k..end].trim_end_matches(':').to_string(), false));
            }
        }
        for (path, is_pub) in paths {
            let Some(target) = resolve(&modules, me, &path) else {
                continue;
            };
            let face_of_child = is_pub && module_of(&target).starts_with(me);
            if &target != file && !face_of_child {
                edges.entry(file.clone()).or_default().insert(target);
            }
        }
    }
    edges
}

/// Files that import one another through a chain, each circle once.
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Tarjan's strongly connected components.
    struct Walk<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(w: &mut Walk<'a>, v: &'a str) {
        let n = w.index.len();
        w.index.insert(v, n);
        w.low.insert(v, n);
        w.stack.push(v);
        for t in w.edges.get(v).into_iter().flatten() {
            if !w.index.contains_key(t.as_str()) {
                visit(w, t);
                let l = w.low[t.as_str()].min(w.low[v]);
                w.low.insert(v, l);
            } else if w.stack.contains(&t.as_str()) {
                let l = w.index[t.as_str()].min(w.low[v]);
                w.low.insert(v, l);
            }
        }
        if w.low[v] == w.index[v] {
            let at = w.stack.iter().rposition(|&s| s == v).unwrap();
            let comp: Vec<String> = w.stack.drain(at..).map(String::from).collect();
            if comp.len() > 1 {
                w.found.push(comp);
            }
        }
    }
    let mut w = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !w.index.contains_key(v.as_str()) {
            visit(&mut w, v);
        }
    }
    w.found
}

fn top(file: &str) -> &str {
    file.split('/').next().unwrap().trim_end_matches(".rs")
}

fn src() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_file_of_src_imports_itself_through_others() {
    let edges = imports(&src());
    // The reader must see imports at all, or it would pass on anything.
    assert!(edges.values().map(BTreeSet::len).sum::<usize>() > 500);
    let found = circles(&edges);
    assert!(found.is_empty(), "import circles in src/: {found:?}");
}

#[test]
fn no_module_imports_from_a_higher_layer() {
    let edges = imports(&src());
    let rank = |m: &str| LAYERS.iter().position(|&l| l == m);
    let mut upward = Vec::new();
    for (from, targets) in &edges {
        let r = rank(top(from))
            .unwrap_or_else(|| panic!("{} is not in LAYERS: add it there", top(from)));
        for to in targets {
            let t = rank(top(to)).unwrap_or_else(|| panic!("{} is not in LAYERS", top(to)));
            if t > r {
                upward.push(format!("{from} -> {to}"));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports that run up a layer: {upward:#?}"
    );
}

#[test]
fn the_reader_sees_use_trees_paths_and_circles() {
    assert_eq!(
        expand("crate::sim::{engine::{Engine, Slo as S}, cluster}"),
        [
            "crate::sim::engine::Engine",
            "crate::sim::engine::Slo",
            "crate::sim::cluster"
        ]
    );
    let code = code_only("let s = \"crate::x\"; // crate::y\nlet c = '\"'; crate::z::f();");
    assert!(!code.contains("crate::x") && !code.contains("crate::y"));
    assert!(code.contains("crate::z::f"));
    assert_eq!(code_only("a r#\"crate::q\"# b"), "a \"\" b");
    let tested =
        "#[cfg(test)]\nfn f() {}\ncrate::a::b();\n#[cfg(test)]\nmod tests { crate::c::d(); }";
    assert!(code_only(tested).contains("crate::a::b") && !code_only(tested).contains("crate::c"));
    let mut modules = BTreeMap::new();
    for f in [
        "lib.rs",
        "sim/mod.rs",
        "sim/engine/mod.rs",
        "sim/engine/run.rs",
    ] {
        modules.insert(module_of(f), f.to_string());
    }
    let me = module_of("sim/engine/run.rs");
    assert_eq!(
        resolve(&modules, &me, "super::Engine").as_deref(),
        Some("sim/engine/mod.rs")
    );
    assert_eq!(
        resolve(&modules, &me, "crate::sim::engine::run::f").as_deref(),
        Some("sim/engine/run.rs")
    );
    assert_eq!(
        resolve(&modules, &me, "crate::Thing").as_deref(),
        Some("lib.rs")
    );
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (a, b) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
        edges.entry(a.into()).or_default().insert(b.into());
    }
    let found = circles(&edges);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].len(), 3);
}
