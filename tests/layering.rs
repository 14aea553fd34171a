//! The library's dependency direction (docs/architecture.md), checked on
//! the source: every `crate::module` path in a module's code names a module
//! of a lower layer, or of its own layer where that layer allows it.
//!
//! ```text
//! error → cancel, kernel, matrix, memory, grid, kd → types → backend → cpu | gpu → engine → ops → cluster, generate, sets
//! ```

use std::fs;
use std::path::{Path, PathBuf};

/// The layer of each top-level module, lowest first. Modules of one layer
/// may import each other, except where `SIBLINGS_APART` says otherwise.
const LAYERS: &[(&str, u8)] = &[
    ("error", 0),
    ("cancel", 1),
    ("kernel", 1),
    ("matrix", 1),
    ("memory", 1),
    ("grid", 1),
    ("kd", 1),
    ("types", 2),
    ("space", 2),
    ("backend", 3),
    ("cpu", 4),
    ("gpu", 4),
    ("engine", 5),
    ("ops", 6),
    ("cluster", 7),
    ("generate", 7),
    ("sets", 7),
];

/// Same-layer modules that must not import each other: the two backends.
const SIBLINGS_APART: &[(&str, &str)] = &[("cpu", "gpu"), ("gpu", "cpu")];

fn layer(module: &str) -> Option<u8> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|&(_, l)| l)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("readable source folder") {
        let path = entry.expect("readable entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file under `src/` belongs to (`None` for
/// `lib.rs`, which assembles the layers).
fn owner(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).expect("file under src/");
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    if first == "lib.rs" {
        return None;
    }
    Some(first.trim_end_matches(".rs").to_string())
}

/// Every `crate::name` in the code of `text` (comments left out), with its
/// line number; only lower-case names (modules, not root re-exports).
fn crate_paths(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let after = &rest[at + "crate::".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name.chars().next().is_some_and(|c| c.is_ascii_lowercase()) {
                found.push((n + 1, name));
            }
            rest = after;
        }
        // `use crate::{a, b}` groups.
        if let Some(at) = code.find("crate::{") {
            for name in code[at + "crate::{".len()..]
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|s| s.chars().next().is_some_and(|c| c.is_ascii_lowercase()))
            {
                found.push((n + 1, name.to_string()));
            }
        }
    }
    found
}

#[test]
fn modules_import_only_lower_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.retain(|f| !f.starts_with(src.join("bin")));
    assert!(files.len() > 20, "found the library's source files");
    let mut violations = Vec::new();
    for file in &files {
        let Some(module) = owner(&src, file) else {
            continue;
        };
        let own = layer(&module).unwrap_or_else(|| {
            panic!("src/{module} is in no layer: add it to LAYERS here and to docs/architecture.md")
        });
        let text = fs::read_to_string(file).expect("readable source file");
        for (line, target) in crate_paths(&text) {
            if target == module {
                continue;
            }
            let Some(theirs) = layer(&target) else {
                continue; // a function or macro at the crate root, not a module
            };
            let apart = SIBLINGS_APART.contains(&(module.as_str(), target.as_str()));
            if theirs > own || apart {
                violations.push(format!(
                    "{}:{line}: {module} (layer {own}) imports {target} (layer {theirs})",
                    file.strip_prefix(&src).unwrap_or(file).display()
                ));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "imports against the dependency direction:\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_checker_sees_imports_in_every_form() {
    let text = "use crate::ops::Foo;\nuse crate::{engine::Engine, gpu};\n// crate::keyset in a comment\nlet e = crate::Error::X;\n";
    let names: Vec<String> = crate_paths(text).into_iter().map(|(_, n)| n).collect();
    assert_eq!(names, vec!["ops", "engine", "gpu"]);
}

/// The parts a `GpuContext` owns (the buffer pool, the pipeline cache
/// with the shader registry, the pass timing) take the device, queue or
/// limits they need, never the context: the imports run one way,
/// context → parts, tests included.
#[test]
fn the_gpu_context_parts_do_not_import_the_context() {
    let gpu = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/gpu");
    let mut files = vec![
        gpu.join("pool.rs"),
        gpu.join("pipelines.rs"),
        gpu.join("timing.rs"),
    ];
    rust_files(&gpu.join("shaders"), &mut files);
    let mut violations = Vec::new();
    for file in &files {
        let text = fs::read_to_string(file).expect("readable source file");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if ["context", "GpuContext", "ErrorScope"]
                .iter()
                .any(|name| code.contains(name))
            {
                violations.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "a part of the GPU context names the context:\n{}",
        violations.join("\n")
    );
}
