//! The workspace's structural rules (docs/ARCHITECTURE.md, "Crates"), checked on every `make test` so that they stay
//! true:
//! - no function outside test code is over 120 lines;
//! - system calls (`libc::` functions) are made only in `crates/sys`, test code included;
//! - `unsafe` appears only in `crates/sys`, and in `crates/rt` and `crates/nic` only in the files
//!   that touch memory shared with the kernel or another thread ([`SHARED_MEMORY`]); elsewhere
//!   the word may only stand in a lint attribute (`forbid`/`deny`/`allow(unsafe_code)`, the
//!   last one on a generated skeleton) or a comment;
//! - no crate depends on another in a circle, dev-dependencies included;
//! - inside every crate, no source file imports another in a circle;
//! - docs/ARCHITECTURE.md draws the crate graph by floors as the Cargo.toml files have it.
//!
//! Each failure names the file and the rule, so the fix is obvious.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

mod source;

const MAX_FUNCTION_LINES: usize = 120;

/// Where `crates/rt` and `crates/nic` may use `unsafe`, and the shared memory that needs it.
const SHARED_MEMORY: [(&str, &str); 5] = [
    ("crates/rt/src/smp.rs", "the rings between shards"),
    (
        "crates/rt/src/io/uring.rs",
        "SQEs, CQEs and the provided-buffer ring",
    ),
    ("crates/nic/src/ring.rs", "the AF_XDP rings"),
    (
        "crates/nic/src/xsk/mod.rs",
        "the UMEM and the rings' mappings",
    ),
    (
        "crates/nic/src/dpdk.rs",
        "DPDK's mbufs and rings, through its C API",
    ),
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// Every `.rs` file under `dir`, skipping build output.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            if name != "target" && !name.starts_with('.') {
                rust_files(&p, out);
            }
        } else if name.ends_with(".rs") {
            out.push(p);
        }
    }
}

fn crate_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root().join("crates"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("Cargo.toml").exists())
        .collect();
    dirs.sort();
    dirs
}

fn relative(p: &Path) -> String {
    p.strip_prefix(root()).unwrap_or(p).display().to_string()
}

/// Test code: integration tests (a `tests/` directory) and unit-test files (`X/tests.rs`).
fn is_test_file(p: &Path) -> bool {
    p.components().any(|c| c.as_os_str() == "tests")
        || p.file_name().is_some_and(|n| n == "tests.rs")
}

#[test]
fn no_function_outside_tests_is_over_120_lines() {
    let mut long = Vec::new();
    let mut seen = 0;
    for dir in crate_dirs() {
        let mut files = Vec::new();
        rust_files(&dir, &mut files);
        for f in files.iter().filter(|f| !is_test_file(f)) {
            let code = source::code_lines(&std::fs::read_to_string(f).unwrap());
            for func in source::functions(&code) {
                seen += 1;
                if func.lines > MAX_FUNCTION_LINES {
                    long.push(format!(
                        "{}:{} {} ({} lines)",
                        relative(f),
                        func.line,
                        func.name,
                        func.lines
                    ));
                }
            }
        }
    }
    assert!(
        seen > 1000,
        "the function reader found almost no functions ({seen})"
    );
    assert!(
        long.is_empty(),
        "split these functions along the concepts inside them (at most {MAX_FUNCTION_LINES} lines): {long:#?}"
    );
}

#[test]
fn system_calls_are_made_only_in_sys() {
    let mut found = Vec::new();
    for dir in crate_dirs().into_iter().filter(|d| !d.ends_with("sys")) {
        let mut files = Vec::new();
        rust_files(&dir, &mut files);
        for f in files {
            let code = source::code_lines(&std::fs::read_to_string(&f).unwrap());
            for (i, line) in code.iter().enumerate() {
                if let Some(call) = source::libc_call(line) {
                    found.push(format!("{}:{} libc::{call}", relative(&f), i + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "system calls outside crates/sys: wrap each in a safe function there: {found:#?}"
    );
}

#[test]
fn unsafe_lives_only_in_sys_and_in_shared_memory() {
    let mut found = Vec::new();
    for dir in crate_dirs().into_iter().filter(|d| !d.ends_with("sys")) {
        let mut files = Vec::new();
        rust_files(&dir, &mut files);
        for f in files {
            if SHARED_MEMORY
                .iter()
                .any(|(allowed, _)| relative(&f) == *allowed)
            {
                continue;
            }
            let code = source::code_lines(&std::fs::read_to_string(&f).unwrap());
            for (i, code) in code.iter().enumerate() {
                let lint = code.contains("unsafe_code") || code.contains("unsafe_op_in_unsafe_fn");
                let word = code
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .any(|w| w == "unsafe");
                if word && !lint {
                    found.push(format!("{}:{}", relative(&f), i + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "unsafe outside crates/sys and the shared-memory files ({SHARED_MEMORY:?}): move it behind a safe function in crates/sys: {found:?}"
    );
}

#[test]
fn every_shared_memory_file_exists() {
    for (file, _) in SHARED_MEMORY {
        assert!(
            root().join(file).exists(),
            "{file} is gone: update SHARED_MEMORY"
        );
    }
}

/// `[dependencies]`, `[dev-dependencies]` and `[build-dependencies]` entries naming our crates.
fn workspace_edges() -> BTreeMap<String, BTreeSet<String>> {
    crate_edges(true)
}

/// Crate -> the workspace crates its Cargo.toml names, with or without dev-dependencies.
fn crate_edges(with_dev: bool) -> BTreeMap<String, BTreeSet<String>> {
    let mut edges = BTreeMap::new();
    for dir in crate_dirs() {
        let toml = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        let mut name = String::new();
        let mut deps = BTreeSet::new();
        let mut in_deps = false;
        for line in toml.lines() {
            let line = line.trim();
            if line.starts_with('[') {
                in_deps = line.ends_with("dependencies]")
                    && (with_dev || !line.contains("dev-dependencies"));
                continue;
            }
            if let Some(v) = line.strip_prefix("name = ") {
                if name.is_empty() {
                    name = v.trim_matches('"').to_string();
                }
            }
            if in_deps && line.starts_with("wirespeed") {
                let dep = line.split(['.', ' ', '=']).next().unwrap().to_string();
                deps.insert(dep);
            }
        }
        edges.insert(name, deps);
    }
    edges
}

/// The crate graph by floors: a crate stands one floor above the highest crate it depends on
/// (dev-dependencies aside), so every arrow points down. One line a floor, top first, names
/// without their `wirespeed-` prefix.
fn crate_floors() -> Vec<String> {
    let edges = crate_edges(false);
    let mut floor: BTreeMap<&str, usize> = BTreeMap::new();
    while floor.len() < edges.len() {
        let before = floor.len();
        for (name, deps) in &edges {
            if floor.contains_key(name.as_str()) {
                continue;
            }
            let below: Option<Vec<usize>> = deps
                .iter()
                .map(|d| floor.get(d.as_str()).copied())
                .collect();
            if let Some(below) = below {
                floor.insert(name, 1 + below.into_iter().max().unwrap_or(0));
            }
        }
        assert!(
            floor.len() > before,
            "a crate circle: see no_crate_depends_on_another_in_a_circle"
        );
    }
    let top = floor.values().copied().max().unwrap_or(0);
    (1..=top)
        .rev()
        .map(|f| {
            let names: Vec<&str> = floor
                .iter()
                .filter(|(_, &n)| n == f)
                .map(|(name, _)| name.trim_start_matches("wirespeed-"))
                .collect();
            format!("floor {f}: {}", names.join(", "))
        })
        .collect()
}

#[test]
fn the_architecture_page_draws_the_crate_graph_as_it_is() {
    let page = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    let drawn: Vec<&str> = page
        .lines()
        .skip_while(|l| !l.starts_with("<!-- crate floors"))
        .skip(2)
        .take_while(|l| !l.starts_with("```"))
        .collect();
    let floors = crate_floors();
    assert_eq!(
        drawn,
        floors,
        "docs/ARCHITECTURE.md's crate floors differ from the Cargo.toml files; draw them as:\n{}",
        floors.join("\n")
    );
}

/// A circle in `edges`, if there is one, as the list of its nodes.
fn find_circle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(n) {
            Some(1) => {
                let at = path.iter().position(|p| p == n).unwrap();
                let mut c = path[at..].to_vec();
                c.push(n.to_string());
                return Some(c);
            }
            Some(2) => return None,
            _ => {}
        }
        state.insert(n.to_string(), 1);
        path.push(n.to_string());
        for m in edges.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, edges, state, path) {
                return Some(c);
            }
        }
        path.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in edges.keys() {
        if let Some(c) = visit(n, edges, &mut state, &mut Vec::new()) {
            return Some(c);
        }
    }
    None
}

#[test]
fn no_crate_depends_on_another_in_a_circle() {
    let edges = workspace_edges();
    assert!(edges.len() >= 10, "read only {} crates", edges.len());
    assert!(
        edges["wirespeed-tcpip"].contains("wirespeed-wire"),
        "the manifest reader lost an edge: {edges:?}"
    );
    if let Some(c) = find_circle(&edges) {
        panic!(
            "crates depend on each other in a circle: {}",
            c.join(" -> ")
        );
    }
}

/// The module file that `crate::a::b` names in `src`: `a.rs` or `a/mod.rs`, or, for a module
/// directory, `a/b.rs` when that exists.
fn module_file(src: &Path, path: &[&str]) -> Option<PathBuf> {
    let mut best = None;
    let mut dir = src.to_path_buf();
    for seg in path {
        let file = dir.join(format!("{seg}.rs"));
        let module = dir.join(seg).join("mod.rs");
        if file.exists() {
            best = Some(file);
        } else if module.exists() {
            best = Some(module);
        } else {
            break;
        }
        dir = dir.join(seg);
    }
    best
}

/// File -> files it names through `crate::...` or `super::...` paths (lib.rs, which only
/// declares modules and re-exports, is the root and not a node).
fn file_edges(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut edges = BTreeMap::new();
    for f in files.iter().filter(|f| !f.ends_with("lib.rs")) {
        let text = std::fs::read_to_string(f).unwrap();
        let here = f.parent().unwrap();
        // The directory that `super::` names: for a/mod.rs it is src, for a/b.rs it is a/.
        let sup = if f.ends_with("mod.rs") {
            here.parent().unwrap().to_path_buf()
        } else {
            here.to_path_buf()
        };
        let mut to = BTreeSet::new();
        let mut in_test_mod = false;
        for code in source::code_lines(&text) {
            if code.trim_start().starts_with("#[cfg(test)]") {
                in_test_mod = true;
            }
            if in_test_mod {
                continue;
            }
            for (prefix, base) in [("crate::", src), ("super::", sup.as_path())] {
                for (at, _) in code.match_indices(prefix) {
                    let rest = &code[at + prefix.len()..];
                    let segs: Vec<&str> = rest
                        .split("::")
                        .map(|s| {
                            s.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                                .next()
                                .unwrap_or("")
                        })
                        .take_while(|s| !s.is_empty())
                        .collect();
                    if let Some(target) = module_file(base, &segs) {
                        if target != *f && !target.ends_with("lib.rs") {
                            to.insert(relative(&target));
                        }
                    }
                }
            }
        }
        edges.insert(relative(f), to);
    }
    edges
}

#[test]
fn no_file_circle_inside_any_crate() {
    let mut imports = 0;
    for dir in crate_dirs() {
        let krate = dir.file_name().unwrap().to_string_lossy().to_string();
        let edges = file_edges(&dir.join("src"));
        imports += edges.values().map(|s| s.len()).sum::<usize>();
        if let Some(c) = find_circle(&edges) {
            panic!(
                "files of {krate} import each other in a circle: {}",
                c.join(" -> ")
            );
        }
    }
    assert!(
        imports > 100,
        "the import reader found almost no imports ({imports}) in the workspace"
    );
}

#[test]
fn the_circle_finder_finds_a_circle() {
    let mut edges = BTreeMap::new();
    edges.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    edges.insert("b".to_string(), BTreeSet::from(["c".to_string()]));
    edges.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(find_circle(&edges).unwrap(), ["a", "b", "c", "a"]);
    edges.get_mut("c").unwrap().clear();
    assert_eq!(find_circle(&edges), None);
}
