//! A keyed limiter's state file as bytes (feature `persist`): its header,
//! its entries and its checksum written and checked, and the atomic write.
//! `persist.rs` reads and writes a limiter's state through it.
//!
//! # The file
//!
//! Text, so that it can be read by eye, in lines:
//!
//! ```text
//! paceline keyed state
//! version 1
//! fingerprint 3f1c…            (SHA-256 of the limits in force, hex)
//! saved-unix-ns 1795000000000000000
//! entries 2
//!
//! ["alice","pace",-150000000]
//! ["bob","pace",1850000000]
//! sha256 9ad0…                 (SHA-256 of every byte above this line)
//! ```
//!
//! Each entry is one JSON array: the key as serde writes it, the kind of
//! its state word, and the word. A load reads the name and the version
//! first (another format or version is refused before anything else is
//! trusted), then the checksum, then the header and every entry, and
//! compares the fingerprint with the limits in force; only a file that
//! passes all of it is applied.
//!
//! # Kinds of word
//!
//! An entry says which kind its word is, so that a file holds keys limited
//! in different ways. Version 1 writes two: `"pace"`, a pacing key's `tat`
//! in ns relative to the save's Unix time (negative: credit banked; the
//! time down is `persist.rs`'), and `"window"`, a window key's word (its
//! window's index and count), which is on Unix time already and is saved
//! and put back as it is, keeping its count until its window ends. Keys
//! at rest are left out; a load that does not know a kind refuses the
//! file.
//!
//! # Writing
//!
//! The file is written whole to `<name>.tmp` beside it, fsynced, renamed
//! over the target, and the directory fsynced: a crash leaves the old file
//! or the new, whole. A temporary file left by a crash is overwritten by
//! the next save and never read. A save holds the limiter's admin lock
//! (the one changes of limits take), so the state and the fingerprint
//! are of one set of limits and two saves of one limiter never share the
//! temporary file; takes go on meanwhile, each shard read-locked in turn.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

/// The file's first line: the format's name.
pub const FORMAT: &str = "paceline keyed state";

/// The format's version, the file's second line. A load reads this one
/// only: another is refused, whatever it holds.
pub const VERSION: u32 = 1;

/// One entry's state word, by kind: the tag its line carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Word {
    /// A pacing key's `tat`, ns after the save's time (negative: before).
    Pace(i64),
    /// A window key's window word (its window's index and count), on Unix
    /// time, as it is.
    Window(u64),
}

/// The tag of [`Word::Pace`].
pub(super) const PACE: &str = "pace";
/// The tag of [`Word::Window`].
pub(super) const WINDOW: &str = "window";

/// A file that passed every check: its limits' fingerprint, the Unix time
/// of its save, and its entries.
pub(super) struct Parsed<K> {
    pub(super) fingerprint: String,
    pub(super) saved: u64,
    pub(super) entries: Vec<(K, Word)>,
}

/// The whole file: the header (`fingerprint`, the save's Unix time
/// `unix`, `entries` and the `body` of as many entry lines), the body,
/// and the checksum of both.
pub(super) fn seal(fingerprint: &str, unix: u64, entries: usize, mut body: Vec<u8>) -> Vec<u8> {
    let mut file = format!(
        "{FORMAT}\nversion {VERSION}\nfingerprint {fingerprint}\nsaved-unix-ns {unix}\n\
         entries {entries}\n\n"
    )
    .into_bytes();
    file.append(&mut body);
    let sum = hex(&Sha256::digest(&file));
    file.extend_from_slice(format!("sha256 {sum}\n").as_bytes());
    file
}

/// Checks and reads a state file's bytes; `Err` says what was wrong.
pub(super) fn parse<K: DeserializeOwned>(bytes: &[u8]) -> Result<Parsed<K>, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not text (corrupt): {e}"))?;
    let mut lines = text.split_inclusive('\n');
    let first = lines.next().unwrap_or("");
    if first.trim_end_matches('\n') != FORMAT {
        return Err(format!(
            "not a {FORMAT:?} file (its first line is {:?})",
            short(first.trim_end_matches('\n'))
        ));
    }
    let version = lines.next().unwrap_or("").trim_end_matches('\n');
    match version.strip_prefix("version ") {
        Some(v) if v == VERSION.to_string() => {}
        Some(v) => {
            return Err(format!(
                "format version {}, this build reads version {VERSION}",
                short(v)
            ))
        }
        None => return Err(format!("no version line (found {:?})", short(version))),
    }
    // The checksum: the last line, over every byte before it.
    let Some(content) = text.strip_suffix('\n') else {
        return Err("truncated: it does not end with a whole line".into());
    };
    let split = content.rfind('\n').map_or(0, |i| i + 1);
    let (covered, last) = text.split_at(split);
    let Some(stated) = last.trim_end_matches('\n').strip_prefix("sha256 ") else {
        return Err("truncated or corrupt: its last line is not its checksum".into());
    };
    let actual = hex(&Sha256::digest(covered.as_bytes()));
    if stated != actual {
        return Err(format!(
            "checksum mismatch, the file is corrupt or truncated (sha256 {} stated, {actual} \
             of its content)",
            short(stated)
        ));
    }
    // Covered by the checksum from here on: a bad line is a file this
    // format does not write.
    let mut lines = covered.lines().skip(2);
    let mut field = |name: &str| {
        let line = lines.next().unwrap_or("");
        line.strip_prefix(name)
            .and_then(|v| v.strip_prefix(' '))
            .map(str::to_owned)
            .ok_or_else(|| format!("no {name} line (found {:?})", short(line)))
    };
    let fingerprint = field("fingerprint")?;
    let saved = field("saved-unix-ns")?;
    let saved: u64 = saved
        .parse()
        .map_err(|_| format!("saved-unix-ns {:?} is not a time", short(&saved)))?;
    let count = field("entries")?;
    let count: usize = count
        .parse()
        .map_err(|_| format!("entries {:?} is not a count", short(&count)))?;
    if lines.next() != Some("") {
        return Err("no blank line after the header".into());
    }
    let mut entries = Vec::with_capacity(count.min(1 << 20));
    for (i, line) in lines.enumerate() {
        let (key, kind, word): (K, String, serde_json::Value) = serde_json::from_str(line)
            .map_err(|e| format!("entry {} does not parse: {e}", i + 1))?;
        let word = match kind.as_str() {
            PACE => word
                .as_i64()
                .map(Word::Pace)
                .ok_or_else(|| format!("entry {}: a pace word {word} is not a time", i + 1))?,
            WINDOW => word.as_u64().map(Word::Window).ok_or_else(|| {
                format!("entry {}: a window word {word} is not a 64-bit word", i + 1)
            })?,
            other => {
                return Err(format!(
                    "entry {}: a state of kind {:?}, which this build does not read",
                    i + 1,
                    short(other)
                ))
            }
        };
        entries.push((key, word));
    }
    if entries.len() != count {
        return Err(format!(
            "{} entries where its header says {count}",
            entries.len()
        ));
    }
    Ok(Parsed {
        fingerprint,
        saved,
        entries,
    })
}

/// At most 80 characters of `s`, for a message about a file of any size.
fn short(s: &str) -> &str {
    s.char_indices().nth(80).map_or(s, |(i, _)| &s[..i])
}

/// `bytes` in lower-case hex.
pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where a save of `path` is written before its rename: `<name>.tmp`, in
/// the same directory (a rename is atomic only within one file system).
fn temporary(path: &Path) -> io::Result<PathBuf> {
    let Some(name) = path.file_name() else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the path names no file",
        ));
    };
    let mut name = name.to_os_string();
    name.push(".tmp");
    Ok(path.with_file_name(name))
}

/// Writes `bytes` to `path` so that a crash leaves the old file or the
/// new, whole: to the temporary file (truncating one a crash left),
/// fsynced, renamed over `path`, and the directory fsynced, so that the
/// rename itself is on disk.
pub(super) fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = temporary(path)?;
    let mut file = File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    fs::rename(&tmp, path)?;
    sync_directory(path)
}

/// Fsyncs the directory that holds `path` (on Unix, where a directory can
/// be opened and synced; elsewhere the rename is left to the OS).
fn sync_directory(path: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        File::open(dir)?.sync_all()?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_temporary_file_is_beside_the_target() {
        let tmp = temporary(Path::new("/var/lib/app/keys.state")).unwrap();
        assert_eq!(tmp, Path::new("/var/lib/app/keys.state.tmp"));
        assert!(temporary(Path::new("/")).is_err());
    }

    #[test]
    fn a_file_of_another_kind_names_it() {
        let text = format!("{FORMAT}\nversion 1\n");
        let body =
            format!("{text}fingerprint x\nsaved-unix-ns 5\nentries 1\n\n[\"k\",\"tide\",3]\n");
        let file = format!("{body}sha256 {}\n", hex(&Sha256::digest(body.as_bytes())));
        let err = parse::<String>(file.as_bytes()).err().unwrap();
        assert!(err.contains("kind \"tide\""), "{err}");
        let good = file.replace("tide", PACE);
        let sum = |s: &str| hex(&Sha256::digest(s.as_bytes()));
        let body = good.rsplit_once("sha256").unwrap().0;
        let good = format!("{body}sha256 {}\n", sum(body));
        let parsed = parse::<String>(good.as_bytes()).unwrap();
        assert_eq!(parsed.entries, vec![("k".to_string(), Word::Pace(3))]);
        assert_eq!((parsed.saved, parsed.fingerprint.as_str()), (5, "x"));
    }
}
