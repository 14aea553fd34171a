//! `#import` directives: each WGSL file names, at its top, the modules
//! whose declarations it uses, and [`resolve`] assembles the one source
//! wgpu compiles.
//!
//! A directive is a line `#import name` in a file's header: before its
//! first line of code (blank and `//` comment lines may come first). WGSL
//! has no `#`, so a directive left unresolved fails loudly in naga.
//!
//! Resolution is depth-first: a module's imports are emitted before the
//! module itself, each module exactly once (the first time it is met, so
//! shared imports keep the order of their first use). An unknown name, an
//! import cycle, a directive below the header and a malformed directive
//! are errors.

use std::borrow::Cow;

/// A resolved source: the modules it holds, in order (the root last), and
/// their text with the directives taken out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resolved {
    pub modules: Vec<String>,
    pub source: String,
}

/// The directive keyword.
const IMPORT: &str = "#import";

/// Splits `text` (the module `name`) into its imports and its code.
fn parse(name: &str, text: &str) -> Result<(Vec<String>, String), String> {
    let mut imports = Vec::new();
    let mut code = String::with_capacity(text.len());
    let mut header = true;
    for (n, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.starts_with('#') {
            if !header {
                return Err(format!(
                    "{name}:{}: `{t}` below the first line of code (imports go at the top)",
                    n + 1
                ));
            }
            let mut words = t.split_whitespace();
            let (Some(IMPORT), Some(module), None) = (words.next(), words.next(), words.next())
            else {
                return Err(format!(
                    "{name}:{}: `{t}` is not `{IMPORT} <module>`",
                    n + 1
                ));
            };
            if !module
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                return Err(format!("{name}:{}: `{module}` is not a module name", n + 1));
            }
            imports.push(module.to_string());
            continue;
        }
        if !t.is_empty() && !t.starts_with("//") {
            header = false;
        }
        code.push_str(line);
        code.push('\n');
    }
    Ok((imports, code))
}

/// Resolves the imports of `root` (named `root_name`, for messages) with
/// `lookup`, which gives the text of a module by name (`None`: no such
/// module).
pub(crate) fn resolve<'a>(
    root_name: &str,
    root: &str,
    lookup: impl Fn(&str) -> Option<Cow<'a, str>>,
) -> Result<Resolved, String> {
    let mut out = Resolved {
        modules: Vec::new(),
        source: String::new(),
    };
    let mut stack = Vec::new();
    visit(root_name, root, &lookup, &mut stack, &mut out)?;
    Ok(out)
}

fn visit<'a>(
    name: &str,
    text: &str,
    lookup: &impl Fn(&str) -> Option<Cow<'a, str>>,
    stack: &mut Vec<String>,
    out: &mut Resolved,
) -> Result<(), String> {
    stack.push(name.to_string());
    let (imports, code) = parse(name, text)?;
    for module in imports {
        if let Some(at) = stack.iter().position(|m| *m == module) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(module);
            return Err(format!("import cycle: {}", cycle.join(" → ")));
        }
        if out.modules.contains(&module) {
            continue;
        }
        let Some(text) = lookup(&module) else {
            return Err(format!(
                "{name}: `{IMPORT} {module}`: no module of that name"
            ));
        };
        visit(&module, &text, lookup, stack, out)?;
    }
    stack.pop();
    out.modules.push(name.to_string());
    out.source.push_str(&code);
    out.source.push('\n');
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn modules(name: &str) -> Option<Cow<'static, str>> {
        let text = match name {
            "a" => "// a\n#import b\n#import c\nfn a() {}",
            "b" => "#import c\nfn b() {}",
            "c" => "fn c() {}",
            "loop1" => "#import loop2\n",
            "loop2" => "#import loop1\n",
            "self" => "#import self\n",
            "late" => "fn x() {}\n#import c\n",
            "bad" => "#include c\n",
            "two" => "#import b c\n",
            _ => return None,
        };
        Some(Cow::Borrowed(text))
    }

    fn names(r: &Resolved) -> Vec<&str> {
        r.modules.iter().map(String::as_str).collect()
    }

    #[test]
    fn imports_come_first_and_once_each() {
        let r = resolve("root", "#import a\n#import c\nfn root() {}", modules).unwrap();
        assert_eq!(names(&r), ["c", "b", "a", "root"]);
        assert_eq!(
            r.source,
            "fn c() {}\n\nfn b() {}\n\n// a\nfn a() {}\n\nfn root() {}\n\n"
        );
        assert!(!r.source.contains('#'));
    }

    #[test]
    fn cycles_are_errors() {
        let e = resolve("root", "#import loop1", modules).unwrap_err();
        assert_eq!(e, "import cycle: loop1 → loop2 → loop1");
        let e = resolve("root", "#import self", modules).unwrap_err();
        assert_eq!(e, "import cycle: self → self");
        let e = resolve("root", "#import root", modules).unwrap_err();
        assert_eq!(e, "import cycle: root → root");
    }

    #[test]
    fn unknown_and_malformed_directives_are_errors() {
        let e = resolve("root", "#import nowhere", modules).unwrap_err();
        assert!(e.contains("root: `#import nowhere`: no module"), "{e}");
        let e = resolve("root", "#import late", modules).unwrap_err();
        assert!(e.starts_with("late:2:"), "{e}");
        assert!(e.contains("below the first line of code"), "{e}");
        let e = resolve("root", "#import bad", modules).unwrap_err();
        assert!(e.contains("`#include c` is not `#import <module>`"), "{e}");
        let e = resolve("root", "#import two", modules).unwrap_err();
        assert!(e.starts_with("two:1:"), "{e}");
        let e = resolve("root", "#import", modules).unwrap_err();
        assert!(e.starts_with("root:1:"), "{e}");
        let e = resolve("root", "#import a-b", modules).unwrap_err();
        assert!(e.contains("not a module name"), "{e}");
    }
}
