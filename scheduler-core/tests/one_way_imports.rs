//! The files of `scheduler-core` import each other one way: no file reaches itself through its
//! `use` statements (a parent imports its children, a child never its parent's dependents back).
//! Read from the sources, so a new cycle fails `cargo test` with the files that form it. A
//! re-export (`pub use`, `pub(crate) use`) counts as an import (`executor.rs` re-exporting
//! `handlers.rs`, which imported `executor.rs`, was a circle this test once missed), except a
//! module's re-export of its own descendants: the facade a folder shows its users, not a
//! dependency of its code.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module path (`crate::actors::task_lifecycle`) → source file, for every file under `src/`.
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut found = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(src).unwrap_or(&path).with_extension("");
            let mut parts: Vec<String> = relative
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
                parts.pop();
            }
            let module = std::iter::once("crate".to_string())
                .chain(parts)
                .collect::<Vec<_>>()
                .join("::");
            found.insert(module, path);
        }
    }
    found
}

/// The `use` statements of a file's own code (an inline `mod tests` at its end is left out),
/// each as one string without whitespace, and whether it re-exports (`pub use`).
fn use_statements(source: &str) -> Vec<(bool, String)> {
    let code = source
        .split("#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or(source);
    let mut statements = Vec::new();
    let mut current: Option<(bool, String)> = None;
    for line in code.lines() {
        let line = line.trim();
        if current.is_none() {
            let prefixes = ["use ", "pub use ", "pub(crate) use ", "pub(super) use "];
            let rest = prefixes.iter().find_map(|prefix| {
                let rest = line.strip_prefix(prefix)?;
                Some((prefix.starts_with("pub"), rest))
            });
            match rest {
                Some((re_export, rest)) => current = Some((re_export, rest.to_string())),
                None => continue,
            }
        } else if let Some((_, statement)) = current.as_mut() {
            statement.push_str(line);
        }
        if current.as_ref().is_some_and(|(_, s)| s.ends_with(';')) {
            if let Some((re_export, statement)) = current.take() {
                statements.push((re_export, statement.split_whitespace().collect()));
            }
        }
    }
    statements
}

/// Every path a `use` tree names: `a::{b, c::{d, e}}` gives `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim_end_matches(';');
    let Some(open) = tree.find('{') else {
        return vec![tree.split(" as ").next().unwrap_or(tree).to_string()];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.len() - 1];
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
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(|p| expand(&format!("{prefix}{p}")))
        .collect()
}

/// The module a path names, from inside `module`: the longest known module it starts with.
fn target(path: &str, module: &str, known: &BTreeMap<String, PathBuf>) -> Option<String> {
    let mut segments: Vec<&str> = module.split("::").collect();
    let mut rest = path;
    if let Some(after) = rest.strip_prefix("crate::") {
        segments = vec!["crate"];
        rest = after;
    } else if rest.starts_with("super::") || rest.starts_with("self::") {
        while let Some(after) = rest.strip_prefix("super::") {
            segments.pop();
            rest = after;
        }
        rest = rest.strip_prefix("self::").unwrap_or(rest);
    } else if known.contains_key(&format!(
        "{module}::{}",
        rest.split("::").next().unwrap_or("")
    )) {
        // A path relative to this module: one of its children.
    } else {
        return None; // another crate
    }
    let mut best = None;
    let mut candidate = segments.join("::");
    if known.contains_key(&candidate) {
        best = Some(candidate.clone());
    }
    for segment in rest.split("::") {
        candidate = format!("{candidate}::{segment}");
        if known.contains_key(&candidate) {
            best = Some(candidate.clone());
        }
    }
    best
}

#[test]
fn no_file_of_the_engine_imports_itself_through_others() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let known = modules(&src);
    assert!(
        known.len() > 10,
        "sources not found under {}",
        src.display()
    );
    let mut imports: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, path) in &known {
        let source = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{e}"));
        let edges = imports.entry(module.clone()).or_default();
        for (re_export, statement) in use_statements(&source) {
            for used in expand(&statement) {
                let Some(to) = target(&used, module, &known) else {
                    continue;
                };
                let facade = re_export && to.starts_with(&format!("{module}::"));
                if to != *module && !facade {
                    edges.insert(to);
                }
            }
        }
    }
    // Depth-first search; a grey node reached again closes a cycle.
    fn visit(
        node: &str,
        imports: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, bool>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(node.to_string(), false);
        stack.push(node.to_string());
        for next in imports.get(node).into_iter().flatten() {
            match state.get(next) {
                Some(false) => {
                    let from = stack.iter().position(|n| n == next).unwrap_or(0);
                    let mut cycle = stack[from..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                Some(true) => {}
                None => {
                    if let Some(cycle) = visit(next, imports, state, stack) {
                        return Some(cycle);
                    }
                }
            }
        }
        stack.pop();
        state.insert(node.to_string(), true);
        None
    }
    let mut state = BTreeMap::new();
    for module in imports.keys() {
        if !state.contains_key(module) {
            let cycle = visit(module, &imports, &mut state, &mut Vec::new());
            assert!(
                cycle.is_none(),
                "an import cycle: {}",
                cycle.unwrap_or_default().join(" -> ")
            );
        }
    }
}
