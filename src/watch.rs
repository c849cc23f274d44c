//! [`Watch`]: re-reads a configuration file when it changes and hands its
//! text to your reload function, on a thread of its own; a file that fails
//! to load is reported and changes nothing.
//!
//! paceline reads no file format itself: the reload function parses (with
//! the `serde` feature, a [`Limits`](crate::Limits) reads from TOML, YAML
//! or JSON) and applies, typically with
//! [`KeyedLimiter::apply`](crate::KeyedLimiter::apply), which takes the
//! whole set at once or nothing.
//!
//! ```no_run
//! # #[cfg(all(feature = "serde", feature = "keyed"))]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use paceline::watch::Watch;
//! use paceline::{KeyedLimiter, Limits, Rate};
//! use std::sync::Arc;
//!
//! let limiter = Arc::new(KeyedLimiter::<String>::new(Rate::per_second(10)));
//! let target = Arc::clone(&limiter);
//! let _watch = Watch::new("limits.toml").start(move |text| {
//!     let limits: Limits = toml::from_str(text)?;
//!     target.apply(&limits)?;
//!     Ok(())
//! })?; // the first load: its error, if any, is returned here
//! # Ok(())
//! # }
//! # #[cfg(not(all(feature = "serde", feature = "keyed")))]
//! # fn main() {}
//! ```
//!
//! # How a change is seen
//!
//! The watcher reads the file every [`every`](Watch::every) (default
//! 250 ms) and reloads when its bytes differ from the last ones it loaded
//! or tried: a portable poll, with no file-system notification crate, so
//! an edit is in force within one interval plus the reload. A file that
//! cannot be read (missing, mid-rename) or whose reload fails is reported
//! to [`on_error`](Watch::on_error) (default: a line on stderr), once per
//! version of its content, and the limits stay as they were; the next good
//! version is loaded as usual. Nothing in the watcher panics; a reload
//! function that panics ends the watcher's thread, and nothing else.
//!
//! Only a regular file is read (a symbolic link to one is followed). A FIFO,
//! a device or a directory at the path is reported as not a regular file
//! and never read: a FIFO's open or read would wait for a writer, and the
//! watcher (and dropping it) with it. On unix the file is opened with
//! `O_NONBLOCK` and checked again once open, so a path swapped for a FIFO
//! between the look and the open cannot hold the watcher either.

use std::error::Error as StdError;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// What a reload returns: any error, reported as it is.
pub type ReloadResult = Result<(), Box<dyn StdError + Send + Sync>>;

type OnError = Box<dyn FnMut(&WatchError) + Send>;

/// Configures a watcher of one file; [`start`](Self::start) runs it.
#[must_use = "a Watch does nothing until .start()"]
pub struct Watch {
    path: PathBuf,
    every: Duration,
    on_error: OnError,
}

/// Why a version of the watched file was not loaded.
#[derive(Debug)]
pub struct WatchError {
    path: PathBuf,
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    Read(std::io::Error),
    Reload(Box<dyn StdError + Send + Sync>),
}

impl WatchError {
    /// The watched file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl fmt::Display for WatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Read(e) => write!(f, "cannot read {}: {e}", self.path.display()),
            Kind::Reload(e) => write!(
                f,
                "{} not loaded, the limits in force are unchanged: {e}",
                self.path.display()
            ),
        }
    }
}

impl StdError for WatchError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match &self.kind {
            Kind::Read(e) => Some(e),
            Kind::Reload(e) => Some(e.as_ref()),
        }
    }
}

impl Watch {
    /// A watcher of the file at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Watch {
        Watch {
            path: path.into(),
            every: Duration::from_millis(250),
            on_error: Box::new(|e| eprintln!("paceline: {e}")),
        }
    }

    /// How often the file is read (default 250 ms; at least 1 ms).
    pub fn every(mut self, interval: Duration) -> Watch {
        self.every = interval.max(Duration::from_millis(1));
        self
    }

    /// Where a version that could not be loaded is reported (default: a
    /// line on stderr). Called on the watcher's thread.
    pub fn on_error(mut self, report: impl FnMut(&WatchError) + Send + 'static) -> Watch {
        self.on_error = Box::new(report);
        self
    }

    /// Loads the file once, now, with `reload`; then watches it on a thread
    /// of its own until the returned [`Watcher`] is dropped.
    ///
    /// # Errors
    /// The first load's [`WatchError`]: a service should not start on limits
    /// it could not read. Nothing is watched then.
    pub fn start(
        self,
        mut reload: impl FnMut(&str) -> ReloadResult + Send + 'static,
    ) -> Result<Watcher, WatchError> {
        let Watch {
            path,
            every,
            mut on_error,
        } = self;
        let first = load(&path, &mut reload)?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = Arc::clone(&stop);
            let watched = path.clone();
            thread::Builder::new()
                .name("paceline-watch".into())
                .spawn(move || {
                    let mut last = Some(first);
                    while !stop.load(Ordering::Acquire) {
                        thread::park_timeout(every);
                        if stop.load(Ordering::Acquire) {
                            break;
                        }
                        poll(&watched, &mut last, &mut reload, &mut on_error);
                    }
                })
                .map_err(|e| WatchError {
                    path,
                    kind: Kind::Read(e),
                })?
        };
        Ok(Watcher {
            stop,
            thread: Some(thread),
        })
    }
}

impl fmt::Debug for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watch")
            .field("path", &self.path)
            .field("every", &self.every)
            .finish_non_exhaustive()
    }
}

/// Refuses anything but a regular file, saying what it is.
fn regular(meta: &std::fs::Metadata) -> io::Result<()> {
    let kind = meta.file_type();
    if kind.is_file() {
        return Ok(());
    }
    let what = if kind.is_dir() {
        "a directory"
    } else {
        special(kind)
    };
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("not a regular file ({what})"),
    ))
}

/// What a special file is.
#[cfg(unix)]
fn special(kind: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_block_device() || kind.is_char_device() {
        "a device"
    } else {
        "a special file"
    }
}

/// What a special file is.
#[cfg(not(unix))]
fn special(_: std::fs::FileType) -> &'static str {
    "a special file"
}

/// The bytes of the regular file at `path`. Anything else is refused before
/// it is opened; on unix the open cannot wait (`O_NONBLOCK`, which a
/// regular file's reads ignore) and what was opened is checked again.
fn read(path: &Path) -> io::Result<Vec<u8>> {
    regular(&std::fs::metadata(path)?)?;
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let mut file: File = options.open(path)?;
    let meta = file.metadata()?;
    regular(&meta)?;
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Reads the file and reloads it; the bytes read, or why not.
fn load(path: &Path, reload: &mut impl FnMut(&str) -> ReloadResult) -> Result<Vec<u8>, WatchError> {
    let bytes = read(path).map_err(|e| WatchError {
        path: path.to_owned(),
        kind: Kind::Read(e),
    })?;
    let text = String::from_utf8_lossy(&bytes);
    reload(&text).map_err(|e| WatchError {
        path: path.to_owned(),
        kind: Kind::Reload(e),
    })?;
    Ok(bytes)
}

/// One look at the file: reload a new version, report one that fails
/// (once: `last` then holds it, so it is not tried again until it changes).
fn poll(
    path: &Path,
    last: &mut Option<Vec<u8>>,
    reload: &mut impl FnMut(&str) -> ReloadResult,
    on_error: &mut OnError,
) {
    match read(path) {
        Ok(bytes) if last.as_deref() == Some(&bytes[..]) => {}
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes).into_owned();
            if let Err(e) = reload(&text) {
                on_error(&WatchError {
                    path: path.to_owned(),
                    kind: Kind::Reload(e),
                });
            }
            *last = Some(bytes);
        }
        Err(e) => {
            // Reported once until the file is back.
            if last.is_some() {
                on_error(&WatchError {
                    path: path.to_owned(),
                    kind: Kind::Read(e),
                });
                *last = None;
            }
        }
    }
}

/// A running watcher; dropping it stops the watching thread (and waits for
/// a reload in progress to finish).
pub struct Watcher {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            // A reload that panicked ended the thread already: nothing to
            // report here.
            let _ = thread.join();
        }
    }
}

impl fmt::Debug for Watcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watcher").finish_non_exhaustive()
    }
}
