//! The configuration directory: every `*.yaml` (and `*.yml`) file in it
//! and in the directories below it, read in path order, and read again whenever the files' names or
//! contents change (looked at every `PACELINE_RELOAD_MS`, so a symbolic
//! link swapped over the runtime root, as goruntime's deployments do, is
//! followed as well as a file changed in place, whatever
//! `RUNTIME_WATCH_ROOT` says). A set that fails to load leaves the one in
//! force and is reported: a log line naming the file and why, and
//! `config_load_error`.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{Config, ConfigError};
use crate::service::Service;

/// What a look at the directory saw: each file's name and a hash of its
/// content (none if unreadable). Sizes and modification times would miss
/// a version written within one tick of the file system's clock at the
/// same size; the files are small, and read whole each look.
pub type Seen = Vec<(PathBuf, Option<u64>)>;

/// How deep below the configuration directory files are looked for.
const DEPTH: usize = 16;

/// The configuration files of `dir` and of its directories below, in path
/// order: as goruntime walks the runtime directory (a directory's link is
/// not followed), but only `*.yaml` and `*.yml`, and nothing whose name
/// starts with `.` (a Kubernetes volume's `..data` and its dated twins
/// hold the same files again).
fn files(dir: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let read = std::fs::read_dir(dir).map_err(|e| ConfigError {
        file: dir.display().to_string(),
        error: format!("cannot read the configuration directory: {e}"),
    })?;
    let mut out = Vec::new();
    walk(read, 0, &mut out);
    out.sort();
    Ok(out)
}

/// The files of one directory's `entries` into `out`, and its
/// directories' (a directory that cannot be read adds nothing).
fn walk(entries: std::fs::ReadDir, depth: usize, out: &mut Vec<PathBuf>) {
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if name.starts_with('.') {
            continue;
        }
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if is_dir {
            if depth < DEPTH {
                if let Ok(below) = std::fs::read_dir(&path) {
                    walk(below, depth + 1, out);
                }
            }
        } else if (name.ends_with(".yaml") || name.ends_with(".yml")) && path.is_file() {
            out.push(path);
        }
    }
}

/// What the directory holds now.
pub fn look(dir: &Path) -> Seen {
    files(dir)
        .unwrap_or_default()
        .into_iter()
        .map(|p| {
            let hash = std::fs::read(&p).ok().map(|bytes| {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                bytes.hash(&mut h);
                h.finish()
            });
            (p, hash)
        })
        .collect()
}

/// The configuration the directory's files make; none is an error unless
/// `allow_empty`.
pub fn load(dir: &Path, merge: bool, allow_empty: bool) -> Result<Config, ConfigError> {
    let mut contents = Vec::new();
    for path in files(dir)? {
        let text = std::fs::read_to_string(&path).map_err(|e| ConfigError {
            file: path.display().to_string(),
            error: format!("cannot read: {e}"),
        })?;
        contents.push((path.display().to_string(), text));
    }
    if contents.is_empty() && !allow_empty {
        return Err(ConfigError {
            file: dir.display().to_string(),
            error: "no configuration file (*.yaml) in the directory".into(),
        });
    }
    Config::load(&contents, merge)
}

/// Loads the directory into `service` now: `true` when it loaded.
pub fn load_into(service: &Service, dir: &Path, merge: bool, allow_empty: bool) -> bool {
    match load(dir, merge, allow_empty) {
        Ok(config) => {
            let domains = config.domains.len();
            service.set_config(config);
            service.stats().loads.fetch_add(1, Ordering::Relaxed);
            tracing::info!(dir = %dir.display(), domains, "configuration loaded");
            true
        }
        Err(e) => {
            service.stats().load_errors.fetch_add(1, Ordering::Relaxed);
            tracing::error!(error = %e, "configuration not loaded; the one in force stays");
            false
        }
    }
}

/// Waits until the directory loads (the ports open only then), looking
/// every `every`.
pub async fn first_load(service: &Service, dir: &Path, merge: bool, every: Duration) -> Seen {
    loop {
        let seen = look(dir);
        if load_into(service, dir, merge, false) {
            return seen;
        }
        tokio::time::sleep(every).await;
    }
}

/// Reloads whenever the directory changes, for as long as the server runs.
pub async fn watch(
    service: Arc<Service>,
    dir: PathBuf,
    merge: bool,
    every: Duration,
    mut seen: Seen,
) {
    loop {
        tokio::time::sleep(every).await;
        let now = look(&dir);
        if now != seen {
            seen = now;
            load_into(&service, &dir, merge, true);
        }
    }
}
