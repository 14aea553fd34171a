//! No two source files import each other, directly or round a circle: the
//! file-level import graph of the library, the command-line tool, the
//! Python bindings (`python/src/`) and the Python package
//! (`python/python/locus/`) has no cycle.
//!
//! An edge `a → b` is a `use` in `a` (or an inline `crate::…` / `super::…`
//! path) that names something of `b`, resolved to the deepest module with a
//! file of its own; for Python, a relative import (`from ._x import y`,
//! `from . import _x`). Re-exports (`pub use`, `pub(crate) use`) are not
//! uses: a module that lists its children's items depends on nothing of
//! theirs. Test modules (`#[cfg(test)]` to the end of a file, `tests.rs`)
//! are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Every file below `dir` ending with `.ext`.
fn files(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.expect("readable entry").path();
        if path.is_dir() {
            files(&path, ext, out);
        } else if path.extension().is_some_and(|e| e == ext) {
            out.push(path);
        }
    }
}

/// The code of a Rust file: comments dropped, test modules cut off.
fn code_of(text: &str) -> String {
    let mut out = String::new();
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]")
            && lines.get(i + 1).is_some_and(|n| {
                let n = n.trim_start();
                let n = n.strip_prefix("pub(crate) ").unwrap_or(n);
                n.strip_prefix("pub ").unwrap_or(n).starts_with("mod ")
            })
        {
            // `#[cfg(test)] mod tests;` declares; `mod tests {` runs to the
            // end (`pub(crate) mod tests {` too: helpers other tests use).
            if lines[i + 1].trim_end().ends_with('{') {
                break;
            }
            continue;
        }
        out.push_str(line.split("//").next().unwrap_or(""));
        out.push('\n');
    }
    out
}

/// The paths of a `use` tree (`a::{b, c::{d, e}}` → `a::b`, `a::c::d`, …),
/// each as its segments.
fn expand(tree: &str) -> Vec<Vec<String>> {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let prefix: Vec<String> = segments(&tree[..open]);
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let mut parts = Vec::new();
        let (mut depth, mut start) = (0, 0);
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&inner[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&inner[start..]);
        return parts
            .into_iter()
            .filter(|p| !p.trim().is_empty())
            .flat_map(expand)
            .map(|tail| prefix.iter().cloned().chain(tail).collect())
            .collect();
    }
    vec![segments(tree)]
}

fn segments(path: &str) -> Vec<String> {
    let path = path.split(" as ").next().unwrap_or("");
    path.split("::")
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The module paths a Rust file uses: `use` statements (not re-exports)
/// and inline `crate::` and `super::` paths.
fn rust_uses(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("use ") {
        let before = &rest[..at];
        let line_start = before.rfind('\n').map_or(0, |n| n + 1);
        let head = before[line_start..].trim();
        let end = rest[at..].find(';').map_or(rest.len(), |e| at + e);
        let stmt = &rest[at + 4..end];
        let word_start = at == 0
            || !rest[..at]
                .chars()
                .last()
                .is_some_and(|c| c.is_alphanumeric() || c == '_');
        if word_start && (head.is_empty() || head == "pub(super)") {
            out.extend(expand(stmt));
        }
        rest = &rest[end.min(rest.len())..];
        if rest.is_empty() {
            break;
        }
        rest = &rest[1..];
    }
    for prefix in ["crate::", "super::"] {
        let mut rest = code;
        while let Some(at) = rest.find(prefix) {
            let ok = at == 0
                || !rest[..at]
                    .chars()
                    .last()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
            let tail: String = rest[at..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            // `crate::{…}` and `super::{…}` groups are `use` trees, read above.
            if ok && !tail.ends_with("::") {
                out.push(segments(&tail));
            }
            rest = &rest[at + prefix.len()..];
        }
    }
    out
}

/// The module of a file below its crate's root folder.
fn module_of(root: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(root).expect("below the root");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().to_string())
        .collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs");
    if !matches!(stem, "mod" | "lib" | "main") || !parts.is_empty() && stem != "mod" {
        parts.push(stem.to_string());
    }
    parts
}

/// The file-level import graph of one Rust crate rooted at `root_file`.
fn rust_graph(root_file: &Path, skip: &[PathBuf]) -> BTreeMap<String, BTreeSet<String>> {
    let root = root_file.parent().expect("a folder");
    let mut all = Vec::new();
    files(root, "rs", &mut all);
    all.retain(|f| {
        !skip.iter().any(|s| f.starts_with(s)) && f.file_name().is_some_and(|n| n != "tests.rs")
    });
    let modules: BTreeMap<Vec<String>, String> = all
        .iter()
        .map(|f| (module_of(root, f), f.display().to_string()))
        .collect();
    let mut graph = BTreeMap::new();
    for f in &all {
        let me = module_of(root, f);
        let name = f.display().to_string();
        let code = code_of(&fs::read_to_string(f).expect("readable source file"));
        let mut edges = BTreeSet::new();
        for path in rust_uses(&code) {
            // Resolve the path's start against this module.
            let mut base: Vec<String> = me.clone();
            let mut segs = path.into_iter().peekable();
            match segs.peek().map(String::as_str) {
                Some("crate") => {
                    segs.next();
                    base.clear();
                }
                Some("super") => {
                    while segs.peek().is_some_and(|s| s == "super") {
                        segs.next();
                        base.pop();
                    }
                }
                Some("self") => {
                    segs.next();
                }
                _ => {} // a child module (or an external crate: no file)
            }
            let mut full = base;
            full.extend(segs);
            // The deepest module with a file.
            while !full.is_empty() && !modules.contains_key(&full) {
                full.pop();
            }
            if let Some(target) = modules.get(&full)
                && *target != name
                && !full.is_empty()
            {
                edges.insert(target.clone());
            }
        }
        graph.insert(name, edges);
    }
    graph
}

/// The file-level graph of the Python package's relative imports.
fn python_graph(pkg: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut all = Vec::new();
    files(pkg, "py", &mut all);
    let mut graph = BTreeMap::new();
    for f in &all {
        let text = fs::read_to_string(f).expect("readable source file");
        let dir = f.parent().expect("a folder");
        let mut edges = BTreeSet::new();
        for line in text.lines() {
            let t = line.trim_start();
            let Some(rest) = t.strip_prefix("from ") else {
                continue;
            };
            let module = rest.split_whitespace().next().unwrap_or("");
            let dots = module.chars().take_while(|&c| c == '.').count();
            if dots == 0 {
                continue;
            }
            let mut base = dir.to_path_buf();
            for _ in 1..dots {
                base.pop();
            }
            let name = &module[dots..];
            let targets: Vec<String> = if name.is_empty() {
                // `from . import _a, _b`
                let names = rest.split(" import ").nth(1).unwrap_or("");
                names
                    .split(',')
                    .map(|n| n.split(" as ").next().unwrap_or("").trim().to_string())
                    .collect()
            } else {
                vec![name.replace('.', "/")]
            };
            for t in targets {
                for cand in [
                    base.join(format!("{t}.py")),
                    base.join(&t).join("__init__.py"),
                ] {
                    if cand.exists() && cand != *f {
                        edges.insert(cand.display().to_string());
                    }
                }
            }
        }
        graph.insert(f.display().to_string(), edges);
    }
    graph
}

/// A cycle of `graph`, if it has one.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    fn visit(
        n: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        marks: &mut BTreeMap<String, Mark>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        marks.insert(n.to_string(), Mark::Open);
        stack.push(n.to_string());
        for m in graph.get(n).into_iter().flatten() {
            match marks.get(m).copied().unwrap_or(Mark::New) {
                Mark::Open => {
                    let from = stack.iter().position(|s| s == m).unwrap_or(0);
                    let mut c = stack[from..].to_vec();
                    c.push(m.clone());
                    return Some(c);
                }
                Mark::New => {
                    if let Some(c) = visit(m, graph, marks, stack) {
                        return Some(c);
                    }
                }
                Mark::Done => {}
            }
        }
        stack.pop();
        marks.insert(n.to_string(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for n in graph.keys() {
        if marks.get(n).copied().unwrap_or(Mark::New) == Mark::New
            && let Some(c) = visit(n, graph, &mut marks, &mut Vec::new())
        {
            return Some(c);
        }
    }
    None
}

#[test]
fn no_source_files_import_each_other_in_a_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    let graphs = [
        (
            "library",
            rust_graph(&src.join("lib.rs"), &[src.join("bin")]),
        ),
        (
            "command-line tool",
            rust_graph(&src.join("bin/locus/main.rs"), &[]),
        ),
        (
            "Python bindings",
            rust_graph(&root.join("python/src/lib.rs"), &[]),
        ),
        (
            "Python package",
            python_graph(&root.join("python/python/locus")),
        ),
    ];
    for (what, graph) in &graphs {
        assert!(graph.len() > 5, "{what}: found only {} files", graph.len());
        let edges: usize = graph.values().map(BTreeSet::len).sum();
        assert!(edges > 5, "{what}: found only {edges} imports");
        if let Some(c) = cycle(graph) {
            panic!(
                "{what}: files import each other in a circle:\n  {}",
                c.join("\n  → ")
            );
        }
    }
}

#[test]
fn the_checker_finds_a_circle_and_resolves_use_trees() {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.insert("a".into(), ["b".to_string()].into());
    g.insert("b".into(), ["c".to_string()].into());
    g.insert("c".into(), ["a".to_string()].into());
    assert_eq!(cycle(&g).map(|c| c.len()), Some(4));
    g.insert("c".into(), BTreeSet::new());
    assert_eq!(cycle(&g), None);
    let paths = expand("super::{far, keys::{KeyColumns, Pack}, simd as s}");
    assert_eq!(
        paths,
        vec![
            vec!["super".to_string(), "far".into()],
            vec!["super".into(), "keys".into(), "KeyColumns".into()],
            vec!["super".into(), "keys".into(), "Pack".into()],
            vec!["super".into(), "simd".into()],
        ]
    );
    let uses = rust_uses("pub(crate) use child::X;\nuse super::y::Z;\nlet a = crate::m::f();\n");
    assert_eq!(uses.len(), 3, "{uses:?}"); // use super::y::Z, super::y::Z inline, crate::m::f
}
