//! Nothing under `src/` prints: a library reports through `tracing` (the
//! feature) or hands what it has to say to its caller, never to stdout or
//! stderr. Doc comments and comments may show a print (a user's code).

use std::path::{Path, PathBuf};

/// The macros that write to the process's stdout or stderr.
const PRINTS: [&str; 5] = ["println!", "eprintln!", "print!", "eprint!", "dbg!"];

/// The lines of `text` outside comments that call one of [`PRINTS`]
/// (1-based line numbers).
fn prints(text: &str) -> Vec<(usize, String)> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim_start().starts_with("//"))
        .filter(|(_, line)| {
            PRINTS.iter().any(|p| {
                line.match_indices(p).any(|(at, _)| {
                    // `eprintln!` is not `println!` preceded by `e`, and
                    // `print!` not the end of `eprint!` / `sprint!`.
                    !line[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_')
                })
            })
        })
        .map(|(n, line)| (n + 1, line.trim().to_owned()))
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn nothing_under_src_prints() {
    let mut files = Vec::new();
    rust_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    assert!(files.len() > 50, "src/ was not found: {files:?}");
    let found: Vec<String> = files
        .iter()
        .flat_map(|file| {
            let text = std::fs::read_to_string(file).unwrap();
            prints(&text)
                .into_iter()
                .map(move |(n, line)| format!("{}:{n}: {line}", file.display()))
        })
        .collect();
    assert!(
        found.is_empty(),
        "src/ prints (use crate::event, or hand it to the caller):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_sees_a_print() {
    let code = "fn f() {\n    eprintln!(\"x\");\n    // println!(\"in a comment\");\n    /// println!(\"in a doc\");\n    let s = sprint!(1);\n    dbg!(s);\n}\n";
    assert_eq!(
        prints(code),
        [
            (2, "eprintln!(\"x\");".to_owned()),
            (6, "dbg!(s);".to_owned())
        ]
    );
}
