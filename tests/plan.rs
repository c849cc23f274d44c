//! The plan in `docs/ARCHITECTURE.md` checked against the code: every file
//! of `src/` sits in one of the plan's layers, names items only of its own
//! layer or those below it, and no two files name each other through a
//! chain (no import cycle); no file holds more than 500 lines before its
//! unit tests; every path the plan names exists.
//!
//! A file depends on another when it names an item that file defines,
//! wherever the path stands (a `use`, an `impl` header, a type, an
//! expression) and however it is written: from the crate (`crate::…`),
//! from its own module (`self::…`, or a child's or an imported name:
//! `child::X`, `Imported::new`), or up (`super::…`, `super::super::…`).
//! A name is followed through every `use` that binds it (a re-export such
//! as the crate root's `pub use keyed::KeyedLimiter`, a parent's private
//! `use`, a glob) to the file that defines it; `mod x;` is not a
//! dependency. Comments, string literals and everything from the file's
//! unit tests on (its first `#[cfg(test)]` or `#[cfg(all(test, …))]`) are
//! not read. The files directly in the folders of
//! `FOLDERS_NAMING_EACH_OTHER` name each other and are read as one for
//! cycles. The unit tests at the end plant each way of reaching up or
//! around in a small tree and check that it is reported.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The most lines a file of `src/` holds before its first `#[cfg(test)]`.
const MAX_LINES: usize = 500;

type Module = Vec<String>;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A file's module path from its path under `src/`: `a/b.rs` and
/// `a/b/mod.rs` are `a::b`; `lib.rs` is the crate root, `[]`.
fn module_of(rel: &str) -> Module {
    let mut module: Module = Path::new(rel)
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_str().unwrap().to_owned())
        .collect();
    if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
        module.pop();
    }
    module
}

/// Every `.rs` file under `src/`: its path there and its text.
fn src_files() -> Vec<(String, String)> {
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
    let mut paths = Vec::new();
    walk(&src, &mut paths);
    paths
        .into_iter()
        .map(|path| {
            let rel = path.strip_prefix(&src).unwrap().to_str().unwrap();
            (rel.replace('\\', "/"), fs::read_to_string(&path).unwrap())
        })
        .collect()
}

/// Where a file's unit tests start: its first `#[cfg(test)]` or
/// `#[cfg(all(test, …))]` (a test module under further conditions), or
/// its end.
fn tests_start(text: &str) -> usize {
    ["#[cfg(test)]", "#[cfg(all(test,"]
        .iter()
        .filter_map(|mark| text.find(mark))
        .min()
        .unwrap_or(text.len())
}

/// The code of a file before its unit tests, without comments and with
/// every string and char literal emptied.
fn code(text: &str) -> String {
    let text = &text[..tests_start(text)];
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

/// What a `use` binds in a module: a name (`use a::B` binds `B`, `use a::B
/// as C` binds `C`, `use a::{self}` binds `a`), or every public name of a
/// module (`use a::*`, a glob: `None`).
type Binding = Option<String>;

/// The paths of a use tree or a path in code starting at `s`, each with
/// what it binds when it is a `use`: `a::b`, `a::{b as c, d::*}`, `{a, b}`.
/// Returns how far it read.
fn paths(s: &[u8], prefix: &[String], out: &mut Vec<(Binding, Module)>) -> usize {
    let skip = |i: &mut usize| {
        while s.get(*i).is_some_and(|c| c.is_ascii_whitespace()) {
            *i += 1;
        }
    };
    let mut path = prefix.to_vec();
    let mut i = 0;
    loop {
        skip(&mut i);
        match s.get(i) {
            Some(b'{') => {
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
            Some(b'*') => {
                out.push((None, path));
                return i + 1;
            }
            _ => {}
        }
        let start = i;
        while s.get(i).is_some_and(|&c| is_ident(c)) {
            i += 1;
        }
        if i == start {
            // `a::<T>` or a path cut short: the path so far.
            if !path.is_empty() {
                let bound = path.last().cloned();
                out.push((bound, path));
            }
            return i;
        }
        let segment = String::from_utf8_lossy(&s[start..i]).into_owned();
        if s[i..].starts_with(b"::") {
            path.push(segment);
            i += 2;
            continue;
        }
        if segment != "self" {
            path.push(segment);
        }
        let mut bound = path.last().cloned();
        let mut j = i;
        skip(&mut j);
        if s[j..].starts_with(b"as") && s.get(j + 2).is_some_and(|c| c.is_ascii_whitespace()) {
            j += 2;
            skip(&mut j);
            let start = j;
            while s.get(j).is_some_and(|&c| is_ident(c)) {
                j += 1;
            }
            bound = Some(String::from_utf8_lossy(&s[start..j]).into_owned());
            i = j;
        }
        out.push((bound, path));
        return i;
    }
}

/// A module's names that lead elsewhere.
#[derive(Default)]
struct Scope {
    /// `use` bindings: the name, and the path it stands for (read in this
    /// module).
    uses: BTreeMap<String, Module>,
    /// Glob imports' paths.
    globs: Vec<Module>,
}

/// The files of a source tree, read: their modules, what each module's
/// `use`s bind, and every path each file's code names.
struct Tree {
    /// Each file's module, and its path under `src/`.
    files: BTreeMap<Module, String>,
    /// Every module: the files', those declared by `mod x;` and those
    /// written inline (`mod x { … }`).
    modules: BTreeSet<Module>,
    scopes: BTreeMap<Module, Scope>,
    /// Per file, every path it names and the module it is read in.
    named: BTreeMap<Module, Vec<(Module, Module)>>,
}

impl Tree {
    /// Reads `files`: (path under `src/`, text).
    fn new(files: &[(String, String)]) -> Tree {
        let mut tree = Tree {
            files: BTreeMap::new(),
            modules: BTreeSet::new(),
            scopes: BTreeMap::new(),
            named: BTreeMap::new(),
        };
        for (rel, text) in files {
            let module = module_of(rel);
            tree.files.insert(module.clone(), rel.clone());
            tree.modules.insert(module.clone());
            let named = tree.read(&module, &code(text));
            tree.named.insert(module, named);
        }
        tree
    }

    /// Reads one file's code: records its inline and declared modules and
    /// its `use` bindings, and returns every path it names with the module
    /// each is read in.
    fn read(&mut self, file: &Module, code: &str) -> Vec<(Module, Module)> {
        let b = code.as_bytes();
        let ident_len = |at: usize| b[at..].iter().take_while(|&&c| is_ident(c)).count();
        let spaces = |at: usize| {
            b[at..]
                .iter()
                .take_while(|c| c.is_ascii_whitespace())
                .count()
        };
        let mut named = Vec::new();
        // The inline modules around the reader, each with the brace depth
        // its body opened at.
        let mut inline: Vec<(String, usize)> = Vec::new();
        let here = |inline: &[(String, usize)]| -> Module {
            file.iter()
                .cloned()
                .chain(inline.iter().map(|(m, _)| m.clone()))
                .collect()
        };
        let mut depth = 0;
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'{' => depth += 1,
                b'}' => {
                    if inline.last().is_some_and(|(_, d)| *d == depth) {
                        inline.pop();
                    }
                    depth -= 1;
                }
                _ => {}
            }
            // A path or keyword starts only at an identifier that is not the
            // tail of another path (`a::b`), a field or method (`x.b`), a
            // number's suffix, or a raw identifier.
            let before = b[..i].trim_ascii_end();
            let starts = is_ident(b[i])
                && !b[i].is_ascii_digit()
                && (i == 0 || !is_ident(b[i - 1]))
                && !before.ends_with(b"::")
                && !matches!(before.last(), Some(b'.' | b'#'));
            if !starts {
                i += 1;
                continue;
            }
            let end = i + ident_len(i);
            let word = &b[i..end];
            let gap = spaces(end);
            if word == b"use" && gap > 0 {
                let mut bound = Vec::new();
                i = end + gap + paths(&b[end + gap..], &[], &mut bound);
                let here = here(&inline);
                let scope = self.scopes.entry(here.clone()).or_default();
                for (binding, path) in bound {
                    match binding {
                        Some(name) if name != "_" => {
                            scope.uses.insert(name, path.clone());
                        }
                        Some(_) => {}
                        None => scope.globs.push(path.clone()),
                    }
                    named.push((here.clone(), path));
                }
            } else if word == b"mod" && gap > 0 {
                let at = end + gap;
                let name = String::from_utf8_lossy(&b[at..at + ident_len(at)]).into_owned();
                let mut module = here(&inline);
                module.push(name.clone());
                self.modules.insert(module);
                i = at + name.len();
                i += spaces(i);
                if b.get(i) == Some(&b'{') {
                    depth += 1;
                    inline.push((name, depth));
                    i += 1;
                }
            } else if b[end..].starts_with(b"::") && word != b"Self" {
                let mut found = Vec::new();
                i += paths(&b[i..], &[], &mut found);
                let here = here(&inline);
                named.extend(found.into_iter().map(|(_, path)| (here.clone(), path)));
            } else {
                i = end;
            }
        }
        named
    }

    /// The module that holds the item `path` names when read in `scope`
    /// (an inline module's or a file's), following every `use` on the
    /// way; `None` for a path outside the crate (`std::…`, a dependency).
    fn resolve(&self, scope: &Module, path: &[String], hops: usize) -> Option<Module> {
        if hops > 32 || path.is_empty() {
            return None;
        }
        let (mut at, mut rest) = match path[0].as_str() {
            "crate" => (Vec::new(), &path[1..]),
            "self" => (scope.clone(), &path[1..]),
            "super" => {
                let mut at = scope.clone();
                let ups = path.iter().take_while(|s| *s == "super").count();
                for _ in 0..ups {
                    at.pop()?;
                }
                (at, &path[ups..])
            }
            // A name in scope: a child module, or a `use`'s binding.
            _ => (scope.clone(), path),
        };
        let relative = !matches!(path[0].as_str(), "crate" | "self" | "super");
        while let Some(segment) = rest.first() {
            let mut child = at.clone();
            child.push(segment.clone());
            if self.modules.contains(&child) {
                at = child;
                rest = &rest[1..];
                continue;
            }
            if let Some(target) = self.binding(&at, segment, hops) {
                let (from, target) = target;
                let mut next = target;
                next.extend(rest[1..].iter().cloned());
                return self.resolve(&from, &next, hops + 1);
            }
            if relative && at == *scope && rest.len() == path.len() {
                // The first name is neither a module nor imported here: a
                // crate outside (`std`), a local item or a type parameter.
                return None;
            }
            // An item `at` defines (a function, a type, a variant, …).
            break;
        }
        Some(at)
    }

    /// What `name` stands for in module `at` through a `use` (its own, or a
    /// glob's module's): the module the path is read in, and the path.
    fn binding(&self, at: &Module, name: &str, hops: usize) -> Option<(Module, Module)> {
        let scope = self.scopes.get(at)?;
        if let Some(path) = scope.uses.get(name) {
            return Some((at.clone(), path.clone()));
        }
        scope.globs.iter().find_map(|glob| {
            let module = self.resolve(at, glob, hops + 1)?;
            let mut child = module.clone();
            child.push(name.to_owned());
            if self.modules.contains(&child) {
                return Some((Vec::new(), child));
            }
            // The glob module's own `use`, or else (this reader does not
            // list a module's items) an item it defines.
            self.binding(&module, name, hops + 1)
                .or_else(|| Some((module, vec!["self".to_owned(), name.to_owned()])))
        })
    }

    /// The file that holds `module` (an inline module lives in its file).
    fn file_of(&self, module: &Module) -> Option<Module> {
        (0..=module.len())
            .rev()
            .map(|n| module[..n].to_vec())
            .find(|m| self.files.contains_key(m))
    }

    /// The files `file`'s code names items of.
    fn dependencies(&self, file: &Module) -> BTreeSet<Module> {
        self.named[file]
            .iter()
            .filter_map(|(scope, path)| self.resolve(scope, path, 0))
            .filter_map(|module| self.file_of(&module))
            .filter(|m| m != file)
            .collect()
    }

    /// Every file's dependencies.
    fn graph(&self) -> BTreeMap<Module, BTreeSet<Module>> {
        self.files
            .keys()
            .map(|m| (m.clone(), self.dependencies(m)))
            .collect()
    }
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

/// The layer of the file at `rel` (its path under `src/`): the one whose
/// entry is the longest prefix of that path.
fn layer_of(rel: &str, layers: &[(String, Vec<String>)]) -> Option<usize> {
    layers
        .iter()
        .enumerate()
        .flat_map(|(n, (_, entries))| entries.iter().map(move |e| (n, e)))
        .filter(|(_, e)| **e == rel || (e.ends_with('/') && rel.starts_with(e.as_str())))
        .max_by_key(|(_, e)| e.len())
        .map(|(n, _)| n)
}

/// The files of `tree` in no layer, and every name reaching up a layer.
fn reaching_up(tree: &Tree, layers: &[(String, Vec<String>)]) -> Vec<String> {
    let mut wrong = Vec::new();
    for (module, deps) in tree.graph() {
        let rel = &tree.files[&module];
        let Some(layer) = layer_of(rel, layers) else {
            wrong.push(format!("src/{rel} is in no layer of the plan"));
            continue;
        };
        for dep in deps {
            let theirs = layer_of(&tree.files[&dep], layers).unwrap_or(usize::MAX);
            if theirs > layer {
                wrong.push(format!(
                    "src/{rel} ({}) names src/{} ({}), a layer above",
                    layers[layer].0,
                    tree.files[&dep],
                    layers.get(theirs).map_or("no layer", |l| l.0.as_str()),
                ));
            }
        }
    }
    wrong
}

/// An import cycle of `graph`, if it has one: its files in order.
fn cycle(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Option<Vec<String>> {
    // A cycle exists iff a depth-first walk meets a module on its own path.
    fn visit<'a>(
        m: &'a Module,
        graph: &'a BTreeMap<Module, BTreeSet<Module>>,
        done: &mut BTreeMap<&'a Module, bool>,
        stack: &mut Vec<&'a Module>,
    ) -> Option<Vec<String>> {
        match done.get(m) {
            Some(true) => return None,
            Some(false) => {
                let at = stack.iter().position(|s| *s == m).unwrap();
                return Some(stack[at..].iter().map(|s| s.join("::")).collect());
            }
            None => {}
        }
        done.insert(m, false);
        stack.push(m);
        for dep in &graph[m] {
            if let Some(cycle) = visit(dep, graph, done, stack) {
                return Some(cycle);
            }
        }
        stack.pop();
        done.insert(m, true);
        None
    }
    let mut done = BTreeMap::new();
    graph
        .keys()
        .find_map(|m| visit(m, graph, &mut done, &mut Vec::new()))
}

fn plan() -> Vec<(String, Vec<String>)> {
    let plan = fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    let layers = layers(&plan);
    assert!(
        layers.len() >= 5,
        "the plan's layer table was not found: {layers:?}"
    );
    layers
}

#[test]
fn every_path_the_plan_names_exists() {
    for (name, entries) in &plan() {
        for entry in entries {
            assert!(
                root().join("src").join(entry).exists() || root().join(entry).exists(),
                "docs/ARCHITECTURE.md, layer {name}: {entry} does not exist"
            );
        }
    }
}

#[test]
fn every_file_of_src_is_in_a_layer_and_names_only_its_own_layer_or_those_below() {
    let wrong = reaching_up(&Tree::new(&src_files()), &plan());
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The folders whose files name each other: each is a module's `mod.rs`
/// that holds the module's main type or trait and uses its children's
/// parts, while the children use it back (`keyed/mod.rs`' `KeyedLimiter`
/// over `keyed/shard.rs`' `Shard`, which names `super::…`). The cycle
/// check reads the files directly in each of these as one; a cycle between
/// it and any other file, or among files of any other folder, still fails.
const FOLDERS_NAMING_EACH_OTHER: [&str; 8] = [
    "http/inspect/",
    "io/",
    "keyed/",
    "lease/",
    "remote/",
    "reqwest/",
    "store/",
    "wait/",
];

/// `graph` with the files directly in each of `folders` read as one (the
/// folder's module).
fn merged(
    tree: &Tree,
    graph: &BTreeMap<Module, BTreeSet<Module>>,
    folders: &[&str],
) -> BTreeMap<Module, BTreeSet<Module>> {
    let node = |m: &Module| -> Module {
        let rel = &tree.files[m];
        match folders.iter().find(|f| {
            rel.strip_prefix(**f)
                .is_some_and(|rest| !rest.contains('/'))
        }) {
            Some(folder) => module_of(&format!("{folder}mod.rs")),
            None => m.clone(),
        }
    };
    let mut out: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (m, deps) in graph {
        let from = node(m);
        let to: BTreeSet<Module> = deps.iter().map(node).filter(|d| *d != from).collect();
        out.entry(from).or_default().extend(to);
    }
    out
}

#[test]
fn no_two_files_of_src_name_each_other() {
    let tree = Tree::new(&src_files());
    let graph = merged(&tree, &tree.graph(), &FOLDERS_NAMING_EACH_OTHER);
    if let Some(cycle) = cycle(&graph) {
        panic!("an import cycle: {} -> (back)", cycle.join(" -> "));
    }
}

#[test]
fn no_file_of_src_holds_more_than_500_lines_before_its_tests() {
    let long: Vec<String> = src_files()
        .into_iter()
        .filter_map(|(rel, text)| {
            let lines = text[..tests_start(&text)].lines().count();
            (lines > MAX_LINES).then(|| format!("src/{rel}: {lines} lines"))
        })
        .collect();
    assert!(
        long.is_empty(),
        "over {MAX_LINES} lines before the tests:\n{}",
        long.join("\n")
    );
}

/// The checks run over small trees with a planted fault each: a check
/// that saw nothing would pass anything.
mod planted {
    use super::*;

    /// Three layers, bottom up: `low.rs` and `low/`, `mid.rs`, `high.rs`
    /// and `high/`; the root on top.
    const PLAN: &str = "## Layers, bottom up\n\n\
        | layer | files | what |\n|---|---|---|\n\
        | low | `low.rs`, `low/` | |\n\
        | mid | `mid.rs` | |\n\
        | high | `high.rs`, `high/` | |\n\
        | root | `lib.rs` | |\n";

    /// A clean tree: every file names only its own layer or those below,
    /// in each of the forms the checks read.
    fn clean() -> Vec<(String, String)> {
        [
            (
                "lib.rs",
                "mod low; mod mid; mod high;\n\
                 pub use high::Top;\n\
                 pub use low::{Base, inner::Deep};\n\
                 pub use low as bottom;\n",
            ),
            (
                "low.rs",
                "mod inner;\n\
                 pub struct Base;\n\
                 use inner::Deep as _;\n\
                 fn f() { self::inner::g(); }\n",
            ),
            ("low/inner.rs", "pub struct Deep; pub fn g() {}\n"),
            (
                "mid.rs",
                "use crate::Base;\n\
                 pub struct Mid(crate::bottom::Base, super::low::inner::Deep);\n",
            ),
            (
                "high.rs",
                "mod part;\n\
                 use crate::mid::Mid;\n\
                 pub use part::Top;\n",
            ),
            (
                "high/part.rs",
                "pub struct Top(super::super::Base);\n\
                 impl crate::low::Base { fn h() { crate::mid::Mid::new(); } }\n",
            ),
        ]
        .into_iter()
        .map(|(p, t)| (p.to_owned(), t.to_owned()))
        .collect()
    }

    /// `clean()` with `rel`'s text replaced (or the file added).
    fn with(rel: &str, text: &str) -> Vec<(String, String)> {
        let mut files: Vec<_> = clean().into_iter().filter(|(p, _)| p != rel).collect();
        files.push((rel.to_owned(), text.to_owned()));
        files
    }

    fn reports(files: &[(String, String)]) -> Vec<String> {
        reaching_up(&Tree::new(files), &layers(PLAN))
    }

    #[test]
    fn a_clean_tree_passes() {
        let tree = Tree::new(&clean());
        assert_eq!(reaching_up(&tree, &layers(PLAN)), Vec::<String>::new());
        assert_eq!(cycle(&tree.graph()), None);
        let deps: Vec<String> = tree
            .dependencies(&vec!["mid".to_owned()])
            .iter()
            .map(|m| m.join("::"))
            .collect();
        assert_eq!(deps, ["low", "low::inner"], "mid reads through re-exports");
    }

    #[test]
    fn a_child_module_in_a_higher_layer_named_by_a_relative_path_is_reported() {
        // `low.rs` declares a child that the plan puts in a higher layer
        // and names it relatively.
        let plan = PLAN.replace("`mid.rs`", "`mid.rs`, `low/up.rs`");
        for text in [
            "use up::X;",
            "use self::up::X;",
            "use up::{self as u}; fn f(_: u::X) {}",
            "fn f() { up::X::new(); }",
            "impl self::up::X {}",
        ] {
            let mut files = with(
                "low.rs",
                &format!("mod up; mod inner; pub struct Base; {text}"),
            );
            files.push(("low/up.rs".to_owned(), "pub struct X;\n".to_owned()));
            assert_eq!(
                reaching_up(&Tree::new(&files), &layers(&plan)),
                ["src/low.rs (low) names src/low/up.rs (mid), a layer above"],
                "{text}"
            );
        }
    }

    #[test]
    fn a_path_up_the_modules_reaching_up_is_reported() {
        for (text, parent) in [
            ("fn f() { super::super::high::Top::new(); }", ""),
            (
                "use super::super::high::{self as h}; fn g(_: h::Top) {}",
                "",
            ),
            // A parent's private `use`, reached through `super::`.
            ("pub struct D(super::Up);", "use crate::high::Top as Up;"),
        ] {
            let mut files = with("low/inner.rs", &format!("pub struct Deep; {text}"));
            files.iter_mut().find(|(p, _)| p == "low.rs").unwrap().1 += parent;
            let wrong = reports(&files);
            assert!(
                wrong
                    .iter()
                    .any(|w| w
                        == "src/low/inner.rs (low) names src/high/part.rs (high), a layer above"),
                "{text}: {wrong:?}"
            );
        }
    }

    #[test]
    fn a_root_re_export_reaching_up_is_reported() {
        for text in [
            "use crate::Top;\n",
            "use crate::{Base, Top as T};\n",
            "fn f() { crate::Top::new(); }\n",
            "impl crate::Top {}\n",
            "struct S(Vec<crate::Top>);\n",
            // A module re-exported at the root (`pub use remote::redis`).
            "fn f() { crate::upper::Top::new(); }\n",
        ] {
            let mut files = with("mid.rs", text);
            files[0].1.push_str("pub use high::part as upper;\n");
            assert_eq!(
                reports(&files),
                ["src/mid.rs (mid) names src/high/part.rs (high), a layer above"],
                "{text}"
            );
        }
    }

    #[test]
    fn a_path_in_a_comment_a_string_or_the_tests_is_not_read() {
        let files = with(
            "mid.rs",
            "// crate::Top\n\
             /* use crate::high::Top; */\n\
             const S: &str = \"crate::Top\"; const R: &str = r#\"crate::high\"#;\n\
             const Q: char = '\"';\n\
             fn f<'a>() {}\n\
             #[cfg(test)] use crate::Top;\n",
        );
        assert_eq!(reports(&files), Vec::<String>::new());
    }

    #[test]
    fn an_inline_module_reads_super_as_its_file() {
        // `super::` inside `mod inline { … }` of `mid.rs` is `mid`, not the
        // root; `crate::high` named from inside it is still reported.
        let files = with(
            "mid.rs",
            "mod inline { use super::Mid; }\npub struct Mid;\n",
        );
        assert_eq!(reports(&files), Vec::<String>::new());
        let files = with("mid.rs", "mod inline { fn f() { crate::Top::new(); } }\n");
        assert_eq!(reports(&files).len(), 1);
    }

    #[test]
    fn a_cycle_through_a_relative_use_is_reported() {
        let files = with(
            "low/inner.rs",
            "pub struct Deep; pub fn g() { super::Base; }\n",
        );
        let tree = Tree::new(&files);
        assert_eq!(
            cycle(&tree.graph()),
            Some(vec!["low".to_owned(), "low::inner".to_owned()])
        );
    }

    #[test]
    fn a_cycle_through_a_folder_read_as_one_is_still_reported() {
        // `low.rs` and `low/inner.rs` name each other: allowed once `low/`
        // is read as one, but not a cycle from there through `mid.rs`.
        let files = with(
            "low/inner.rs",
            "pub struct Deep; pub fn g() { super::Base; }\n",
        );
        let tree = Tree::new(&files);
        assert_eq!(cycle(&merged(&tree, &tree.graph(), &["low/"])), None);
        let files = with(
            "low/inner.rs",
            "pub struct Deep; pub fn g() { crate::mid::Mid::new(); }\n",
        );
        let tree = Tree::new(&files);
        assert!(cycle(&merged(&tree, &tree.graph(), &["low/"])).is_some());
        assert!(cycle(&merged(&tree, &tree.graph(), &["high/"])).is_some());
    }

    #[test]
    fn a_crate_outside_is_not_a_dependency() {
        // `std::…` and a dependency named like one of the crate's modules,
        // from a module without a child of that name.
        let files = with(
            "high/part.rs",
            "use std::sync::Arc; use low::Thing; pub struct Top(Arc<low::Other>);\n",
        );
        assert_eq!(
            Tree::new(&files).dependencies(&vec!["high".to_owned(), "part".to_owned()]),
            BTreeSet::new()
        );
    }
}
