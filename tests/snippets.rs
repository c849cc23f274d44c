//! What the docs promise a reader who copies from them: each Rust snippet
//! in the README and the guide says which features it needs, in a
//! `// Cargo.toml:` line, and the crate's front page offers the README's
//! chooser ("Which type do I want"), row for row.

use std::fs;
use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The Rust code blocks of a markdown text: (first line number, lines).
fn snippets(text: &str) -> Vec<(usize, Vec<&str>)> {
    let mut out = Vec::new();
    let mut open: Option<(usize, Vec<&str>)> = None;
    for (n, line) in text.lines().enumerate() {
        match &mut open {
            None if line.starts_with("```rust") => open = Some((n + 1, Vec::new())),
            Some(_) if line.starts_with("```") => out.extend(open.take()),
            Some((_, lines)) => lines.push(line),
            None => {}
        }
    }
    out
}

/// The features a snippet needs, from its hidden `#[cfg(feature = "x")]`
/// lines and the paths it names.
fn needed(lines: &[&str]) -> Vec<&'static str> {
    let shown = lines
        .iter()
        .filter(|l| !l.trim_start().starts_with("# ") && !l.trim_start().starts_with("//"));
    let shown: String = shown.map(|l| format!("{l}\n")).collect();
    let by_path = [
        ("paceline::tokio", "tokio"),
        ("redis::", "redis"),
        ("postgres::", "postgres"),
        ("memcached::", "memcached"),
        ("paceline::http", "tower"),
        ("paceline::reqwest", "reqwest"),
        ("fleet::", "fleet"),
    ];
    let mut features: Vec<&str> = by_path
        .iter()
        .filter(|(path, _)| shown.contains(path))
        .map(|&(_, feature)| feature)
        .collect();
    let gates = lines
        .iter()
        .filter(|l| l.starts_with("# #[cfg(") && !l.contains("not("));
    for gate in gates {
        for feature in [
            "keyed",
            "tokio",
            "redis",
            "postgres",
            "memcached",
            "tower",
            "axum",
            "tonic",
            "reqwest",
            "serde",
            "fleet",
            "metrics",
            "tracing",
        ] {
            if gate.contains(&format!("feature = \"{feature}\"")) {
                features.push(feature);
            }
        }
    }
    features.sort_unstable();
    features.dedup();
    features
}

/// Each feature a snippet needs is named in its `// Cargo.toml:` lines
/// (or one that implies it), and a
/// snippet that runs on Tokio names its `tokio` dependency there too.
fn check(path: &Path, problems: &mut Vec<String>) {
    let text = fs::read_to_string(path).unwrap();
    for (line, lines) in snippets(&text) {
        let cargo: String = lines
            .iter()
            .map(|l| l.trim_start().trim_start_matches("# ").trim_start())
            .skip_while(|l| !l.starts_with("// Cargo.toml:"))
            .take_while(|l| l.starts_with("//"))
            .collect();
        // A feature named turns on the features it implies (Cargo.toml's
        // `[features]`); `keyed` is a default one.
        let implied: &[(&str, &[&str])] = &[
            ("keyed", &["tower", "axum", "tonic"]),
            ("tokio", &["tower", "axum", "tonic", "reqwest"]),
            ("tower", &["axum", "tonic"]),
            ("serde", &["fleet"]),
        ];
        let named = |f: &str| cargo.contains(&format!("\"{f}\""));
        for feature in needed(&lines) {
            let by = implied.iter().find(|(f, _)| *f == feature);
            let given = named(feature)
                || (feature == "keyed" && cargo.contains("paceline = "))
                || by.is_some_and(|(_, by)| by.iter().any(|f| named(f)));
            if !given {
                problems.push(format!(
                    "{}:{line}: the snippet needs feature `{feature}` and its `// Cargo.toml:` line does not say so",
                    path.display()
                ));
            }
        }
        let on_tokio = lines
            .iter()
            .any(|l| l.contains("#[tokio::main") || l.contains("tokio::test"));
        if on_tokio && !cargo.contains("tokio = ") {
            problems.push(format!(
                "{}:{line}: the snippet runs on Tokio and its `// Cargo.toml:` line gives no `tokio = ` dependency",
                path.display()
            ));
        }
    }
}

#[test]
fn every_snippet_names_the_features_it_needs() {
    let mut problems = Vec::new();
    check(&Path::new(ROOT).join("README.md"), &mut problems);
    let mut chapters: Vec<_> = fs::read_dir(Path::new(ROOT).join("src/guide"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    chapters.sort();
    for chapter in &chapters {
        check(chapter, &mut problems);
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The rows of the table under `heading`: the first and last cells, with
/// links and backticks taken out, so that a rustdoc link and the README's
/// plain name compare equal.
fn chooser(text: &str, heading: &str) -> Vec<(String, String)> {
    let plain = |cell: &str| {
        let mut out = String::new();
        let mut in_target = false;
        let mut chars = cell.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '[' | ']' | '`' if !in_target => {
                    if c == ']' && chars.peek() == Some(&'(') {
                        in_target = true;
                    }
                }
                ')' if in_target => in_target = false,
                _ if in_target => {}
                c => out.push(c),
            }
        }
        out.trim().to_string()
    };
    text.lines()
        .map(|l| l.trim_start_matches("//!").trim())
        .skip_while(|l| *l != heading)
        .skip(1)
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|row| {
            let cells: Vec<&str> = row.trim_matches('|').split(" | ").collect();
            (plain(cells[0]), plain(cells[cells.len() - 1]))
        })
        .collect()
}

#[test]
fn the_front_page_offers_the_readmes_chooser() {
    let readme = fs::read_to_string(Path::new(ROOT).join("README.md")).unwrap();
    let lib = fs::read_to_string(Path::new(ROOT).join("src/lib.rs")).unwrap();
    let readme = chooser(&readme, "## Which type do I want");
    let front = chooser(&lib, "# Which type do I want");
    assert!(readme.len() > 10, "the README's chooser: {readme:?}");
    assert_eq!(front, readme, "src/lib.rs's chooser against the README's");
}
