//! The plan in `docs/ARCHITECTURE.md` checked against the code: every file
//! of `src/` sits in one of the plan's layers, names items only of its own
//! layer or those below it, and no two files name each other through a
//! chain (no import cycle); no file holds more than 500 lines before its
//! unit tests; every path the plan names exists.
//!
//! A file depends on another when it names an item of that file's module
//! through `crate::…` or `super::…` (a `use` or a path in code; `mod x;` is
//! not a dependency). Comments, string literals and everything from the
//! file's first `#[cfg(test)]` on are not read.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The most lines a file of `src/` holds before its first `#[cfg(test)]`.
const MAX_LINES: usize = 500;

type Module = Vec<String>;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `src/`, by module path (`src/a/b.rs` and
/// `src/a/b/mod.rs` are `a::b`; `src/lib.rs` is the crate root, `[]`).
fn modules() -> BTreeMap<Module, PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let src = root().join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    files
        .into_iter()
        .map(|path| {
            let rel = path.strip_prefix(&src).unwrap().with_extension("");
            let mut module: Module = rel
                .components()
                .map(|c| c.as_os_str().to_str().unwrap().to_owned())
                .collect();
            if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
                module.pop();
            }
            (module, path)
        })
        .collect()
}

/// The code of a file up to its first `#[cfg(test)]`, without comments and
/// with every string and char literal emptied.
fn code(text: &str) -> String {
    let text = &text[..text.find("#[cfg(test)]").unwrap_or(text.len())];
    let b = text.as_bytes();
    let mut out = String::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 0;
                while i < b.len() {
                    if b[i..].starts_with(b"/*") {
                        depth += 1;
                        i += 2;
                    } else if b[i..].starts_with(b"*/") {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
            }
            b'r' if (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
                && (i == 0 || !is_ident(b[i - 1])) =>
            {
                // A raw string: r"…", r#"…"#, …
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                if b.get(i + 1 + hashes) != Some(&b'"') {
                    out.push('r');
                    i += 1;
                    continue;
                }
                let end: Vec<u8> = std::iter::once(b'"')
                    .chain(std::iter::repeat_n(b'#', hashes))
                    .collect();
                i += 2 + hashes;
                while i < b.len() && !b[i..].starts_with(&end) {
                    i += 1;
                }
                i += end.len();
                out.push_str("\"\"");
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            // A char literal ('x', '\n', '\u{..}'), not a lifetime ('a).
            b'\'' if b.get(i + 1) == Some(&b'\\') => {
                i += 2;
                while i < b.len() && b[i] != b'\'' {
                    i += 1;
                }
                i += 1;
            }
            b'\'' if b.get(i + 2) == Some(&b'\'') => i += 3,
            c => {
                out.push(c as char);
                i += 1;
            }
        }
    }
    out
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The paths of a use tree or a path expression starting at `s` (after
/// `crate::` or the last `super::`): `a::b`, `a::{b, c::d}`, `{a, b}`.
fn paths(s: &[u8], prefix: &Module, out: &mut Vec<Module>) -> usize {
    let mut path = prefix.clone();
    let mut i = 0;
    loop {
        while s.get(i).is_some_and(|c| c.is_ascii_whitespace()) {
            i += 1;
        }
        if s.get(i) == Some(&b'{') {
            i += 1;
            loop {
                while s
                    .get(i)
                    .is_some_and(|c| c.is_ascii_whitespace() || *c == b',')
                {
                    i += 1;
                }
                match s.get(i) {
                    None => return i,
                    Some(b'}') => return i + 1,
                    _ => i += paths(&s[i..], &path, out),
                }
            }
        }
        let start = i;
        while s.get(i).is_some_and(|&c| is_ident(c)) {
            i += 1;
        }
        if i == start {
            out.push(path);
            return i;
        }
        path.push(String::from_utf8_lossy(&s[start..i]).into_owned());
        if s[i..].starts_with(b"::") {
            i += 2;
        } else {
            out.push(path);
            return i;
        }
    }
}

/// The modules `module`'s code names.
fn dependencies(
    module: &Module,
    code: &str,
    files: &BTreeMap<Module, PathBuf>,
) -> BTreeSet<Module> {
    let b = code.as_bytes();
    let mut named = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let boundary = i == 0 || !is_ident(b[i - 1]);
        if boundary && b[i..].starts_with(b"crate::") {
            i += 7;
            i += paths(&b[i..], &Vec::new(), &mut named);
        } else if boundary && b[i..].starts_with(b"super::") {
            let mut base = module.clone();
            while b[i..].starts_with(b"super::") {
                base.pop();
                i += 7;
            }
            i += paths(&b[i..], &base, &mut named);
        } else {
            i += 1;
        }
    }
    named
        .into_iter()
        .filter_map(|path| {
            // The longest prefix of the path that is a file's module.
            (1..=path.len())
                .rev()
                .map(|n| path[..n].to_vec())
                .find(|m| files.contains_key(m))
        })
        .filter(|m| m != module)
        .collect()
}

/// The plan's layers, bottom up: the `files` column of the table under
/// "Layers, bottom up" in `docs/ARCHITECTURE.md`, each entry a path under
/// `src/` (a file, or a folder for everything in it) or outside it.
fn layers(plan: &str) -> Vec<(String, Vec<String>)> {
    let table = plan
        .split("## Layers, bottom up")
        .nth(1)
        .expect("docs/ARCHITECTURE.md has a section \"## Layers, bottom up\"");
    table
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let entries = cells[2]
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect();
            (cells[1].to_owned(), entries)
        })
        .collect()
}

/// The layer of `module`: the one whose entry is the longest prefix of
/// its file's path under `src/`.
fn layer_of(path: &Path, layers: &[(String, Vec<String>)]) -> Option<usize> {
    let rel = path
        .strip_prefix(root().join("src"))
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    layers
        .iter()
        .enumerate()
        .flat_map(|(n, (_, entries))| entries.iter().map(move |e| (n, e)))
        .filter(|(_, e)| **e == rel || (e.ends_with('/') && rel.starts_with(e.as_str())))
        .max_by_key(|(_, e)| e.len())
        .map(|(n, _)| n)
}

#[test]
fn every_file_of_src_is_in_a_layer_and_names_only_its_own_layer_or_those_below() {
    let plan = fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    let layers = layers(&plan);
    assert!(
        layers.len() >= 5,
        "the plan's layer table was not found: {layers:?}"
    );
    for (name, entries) in &layers {
        for entry in entries {
            assert!(
                root().join("src").join(entry).exists() || root().join(entry).exists(),
                "docs/ARCHITECTURE.md, layer {name}: {entry} does not exist"
            );
        }
    }
    let files = modules();
    let mut wrong = Vec::new();
    for (module, path) in &files {
        let Some(layer) = layer_of(path, &layers) else {
            wrong.push(format!(
                "{} is in no layer of docs/ARCHITECTURE.md",
                path.display()
            ));
            continue;
        };
        let code = code(&fs::read_to_string(path).unwrap());
        for dep in dependencies(module, &code, &files) {
            let theirs = layer_of(&files[&dep], &layers).unwrap_or(usize::MAX);
            if theirs > layer {
                wrong.push(format!(
                    "{} ({}) names {} ({}), a layer above",
                    module.join("::"),
                    layers[layer].0,
                    dep.join("::"),
                    layers.get(theirs).map_or("no layer", |l| l.0.as_str()),
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn no_two_files_of_src_name_each_other() {
    let files = modules();
    let graph: BTreeMap<&Module, BTreeSet<Module>> = files
        .iter()
        .map(|(m, path)| {
            (
                m,
                dependencies(m, &code(&fs::read_to_string(path).unwrap()), &files),
            )
        })
        .collect();
    // A cycle exists iff a depth-first walk meets a module on its own path.
    fn visit<'a>(
        m: &'a Module,
        graph: &'a BTreeMap<&Module, BTreeSet<Module>>,
        state: &mut BTreeMap<&'a Module, bool>,
        stack: &mut Vec<&'a Module>,
    ) -> Option<Vec<String>> {
        match state.get(m) {
            Some(true) => return None,
            Some(false) => {
                let at = stack.iter().position(|s| *s == m).unwrap();
                return Some(stack[at..].iter().map(|s| s.join("::")).collect());
            }
            None => {}
        }
        state.insert(m, false);
        stack.push(m);
        for dep in &graph[m] {
            if let Some(cycle) = visit(dep, graph, state, stack) {
                return Some(cycle);
            }
        }
        stack.pop();
        state.insert(m, true);
        None
    }
    let mut state = BTreeMap::new();
    for m in graph.keys() {
        if let Some(cycle) = visit(m, &graph, &mut state, &mut Vec::new()) {
            panic!("an import cycle: {} -> (back)", cycle.join(" -> "));
        }
    }
}

#[test]
fn no_file_of_src_holds_more_than_500_lines_before_its_tests() {
    let long: Vec<String> = modules()
        .values()
        .filter_map(|path| {
            let text = fs::read_to_string(path).unwrap();
            let lines = text
                .lines()
                .take_while(|l| !l.contains("#[cfg(test)]"))
                .count();
            (lines > MAX_LINES).then(|| format!("{}: {lines} lines", path.display()))
        })
        .collect();
    assert!(
        long.is_empty(),
        "over {MAX_LINES} lines before the tests:\n{}",
        long.join("\n")
    );
}

#[test]
fn the_checks_see_what_they_check() {
    // The reader finds dependencies in every form the code uses, and none
    // in comments or strings; a check that saw nothing would pass anything.
    let files: BTreeMap<Module, PathBuf> = [
        vec!["a".to_owned()],
        vec!["a".to_owned(), "b".to_owned()],
        vec!["a".to_owned(), "d".to_owned()],
        vec!["c".to_owned()],
        vec!["e".to_owned()],
    ]
    .into_iter()
    .map(|m| (m, PathBuf::new()))
    .collect();
    let src = code(
        "use crate::c::X;\n\
         use super::{d::Y, b};\n\
         // crate::e::Z\n\
         let s = \"crate::e::Z\"; let r = r#\"crate::e\"#; let q = '\"';\n\
         fn f<'a>() { crate::e::f(); }\n\
         #[cfg(test)] use crate::zzz;",
    );
    let deps = dependencies(&vec!["a".to_owned(), "b".to_owned()], &src, &files);
    let names: Vec<String> = deps.iter().map(|m| m.join("::")).collect();
    assert_eq!(names, ["a::d", "c", "e"]);
    assert_eq!(
        dependencies(
            &vec!["a".to_owned(), "b".to_owned()],
            &code("super::super::c::g();"),
            &files
        )
        .len(),
        1
    );
}
