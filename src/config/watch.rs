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
//! use paceline::config::watch::Watch;
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
//! The watcher polls (every 250 ms by default) and applies a new version
//! only once its bytes have stayed unchanged for the settle time (1 s by
//! default), so a file saved in place is never applied half-written; a
//! version that cannot be read or fails its reload is reported once and
//! changes nothing (kept for [`Watcher::last_error`], sent to
//! [`on_error`](Watch::on_error), and with feature `tracing` a `warn`
//! event; a version applied is an `info` one); only a regular file is read (never a FIFO, which could
//! hold the watcher), and nothing in it panics. The details, and when
//! `.settle(Duration::ZERO)` is safe: the guide's
//! [configuration](crate::guide::config#how-a-change-is-seen-the-settle-time)
//! chapter.

use std::error::Error as StdError;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::primitive::{lock, Mutex};
use crate::values::error::BuildError;

pub use crate::values::error::Cause;

/// What a reload returns: any error, reported as it is.
pub type ReloadResult = Result<(), Box<dyn StdError + Send + Sync>>;

type OnError = Box<dyn FnMut(&BuildError) + Send>;

/// Configures a watcher of one file; [`start`](Self::start) runs it.
#[must_use = "a Watch does nothing until .start()"]
pub struct Watch {
    path: PathBuf,
    every: Duration,
    settle: Duration,
    on_error: Option<OnError>,
}

/// How often the file is read by default.
const EVERY: Duration = Duration::from_millis(250);

/// How long a new version's bytes must stay unchanged, by default: far
/// longer than a writer pauses between two writes of one save (a disk
/// flush, a scheduler stall), short enough that a save is in force within
/// about a second.
const SETTLE: Duration = Duration::from_secs(1);

/// A file that could not be read.
fn unreadable(path: &Path, error: io::Error) -> BuildError {
    BuildError::FileUnreadable {
        path: path.to_owned(),
        error: Cause::new(error, None),
    }
}

/// A file whose reload failed.
fn not_loaded(path: &Path, error: Box<dyn StdError + Send + Sync>) -> BuildError {
    BuildError::FileNotLoaded {
        path: path.to_owned(),
        error: Cause::new(error, None),
    }
}

impl Watch {
    /// A watcher of the file at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Watch {
        Watch {
            path: path.into(),
            every: EVERY,
            settle: SETTLE,
            on_error: None,
        }
    }

    crate::values::setters! {
        /// How often the file is read (default 250 ms; at least 1 ms).
        every(interval: Duration) => every = interval.max(Duration::from_millis(1));
        /// How long a new version of the file must stay unchanged before it is
        /// loaded (default 1 s): a file saved in place is not applied while it
        /// is half-written, so long as its writer pauses for less than this.
        /// While a version settles, the file is read every tenth of this (at
        /// most every [`every`](Self::every), at least every millisecond).
        /// `Duration::ZERO` loads a new version as soon as it is seen: safe only
        /// when every save is a rename over the file (see the module's docs).
        settle(time: Duration) => settle;
        /// Where a version that could not be loaded is reported
        /// ([`BuildError::FileUnreadable`] or [`BuildError::FileNotLoaded`]), on
        /// the watcher's thread (default: nowhere but [`Watcher::last_error`] and,
        /// with feature `tracing`, a `warn` event; paceline never prints).
        on_error(report: impl FnMut(&BuildError) + Send + 'static) =>
            on_error = Some(Box::new(report));
    }

    /// Loads the file once, now, with `reload`; then watches it on a thread
    /// of its own until the returned [`Watcher`] is dropped.
    ///
    /// # Errors
    /// The first load's error ([`BuildError::FileUnreadable`] or
    /// [`BuildError::FileNotLoaded`]): a service should not start on limits
    /// it could not read. Nothing is watched then.
    pub fn start(
        self,
        mut reload: impl FnMut(&str) -> ReloadResult + Send + 'static,
    ) -> Result<Watcher, BuildError> {
        // How often the file is read while a new version settles.
        let fast = (self.settle / 10).clamp(Duration::from_millis(1), self.every);
        let first = load(&self.path, &mut reload)?;
        crate::observe::event::info!(path = %self.path.display(), "paceline: limits loaded");
        let last_error = Arc::new(Mutex::new(None));
        let mut watching = Watching {
            path: self.path.clone(),
            settle: self.settle,
            reload,
            on_error: self.on_error,
            last_error: Arc::clone(&last_error),
            last: Some(first),
            settling: None,
        };
        let worker = Worker::spawn("paceline-watch", move |stop| {
            let mut wait = self.every;
            while !stop.load(Ordering::Acquire) {
                thread::park_timeout(wait);
                if stop.load(Ordering::Acquire) {
                    break;
                }
                // Read again soon while a version settles: at its due
                // time, or sooner to see a change sooner.
                wait = watching.poll().map_or(self.every, |due| due.min(fast));
            }
        });
        Ok(Watcher {
            _worker: worker.map_err(|e| unreadable(&self.path, e))?,
            last_error,
        })
    }
}

impl fmt::Debug for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watch")
            .field("path", &self.path)
            .field("every", &self.every)
            .field("settle", &self.settle)
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
fn load(path: &Path, reload: &mut impl FnMut(&str) -> ReloadResult) -> Result<Vec<u8>, BuildError> {
    let bytes = read(path).map_err(|e| unreadable(path, e))?;
    let text = String::from_utf8_lossy(&bytes);
    reload(&text).map_err(|e| not_loaded(path, e))?;
    Ok(bytes)
}

/// The watching thread's own: the file, what it has seen of it, and where
/// its outcomes go (the caller's function, the last error kept, the events).
struct Watching<F> {
    path: PathBuf,
    settle: Duration,
    reload: F,
    on_error: Option<OnError>,
    last_error: Arc<Mutex<Option<BuildError>>>,
    /// The version last loaded or tried (`None`: the file could not be read).
    last: Option<Vec<u8>>,
    /// A newer version, and when it was first seen with these bytes.
    settling: Option<(Vec<u8>, Instant)>,
}

impl<F: FnMut(&str) -> ReloadResult> Watching<F> {
    /// One look at the file: a version that differs from the last one
    /// settles (its bytes unchanged for `settle`) and is then reloaded, or
    /// reported if that fails (once: `last` then holds it, so it is not
    /// tried again until it changes). `Some(left)` while a version settles:
    /// how long until it may go in force.
    fn poll(&mut self) -> Option<Duration> {
        let bytes = match read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) => {
                self.settling = None;
                // Reported once until the file is back.
                if self.last.take().is_some() {
                    self.failed(unreadable(&self.path, e));
                }
                return None;
            }
        };
        if self.last.as_deref() == Some(&bytes[..]) {
            // Back to the version in force (or never left it).
            self.settling = None;
            return None;
        }
        let now = Instant::now();
        // When these bytes were first seen: a change starts again.
        let since = match &self.settling {
            Some((settling, since)) if *settling == bytes => *since,
            _ => {
                self.settling = Some((bytes.clone(), now));
                now
            }
        };
        let settled = now.saturating_duration_since(since);
        if settled < self.settle {
            return Some(self.settle - settled);
        }
        self.settling = None;
        match (self.reload)(&String::from_utf8_lossy(&bytes)) {
            Ok(()) => {
                crate::observe::event::info!(path = %self.path.display(), "paceline: limits reloaded");
                self.keep(None);
            }
            Err(e) => self.failed(not_loaded(&self.path, e)),
        }
        self.last = Some(bytes);
        None
    }

    fn failed(&mut self, e: BuildError) {
        crate::observe::event::warning!(path = %self.path.display(), error = %e, "paceline: limits not loaded");
        if let Some(on_error) = &mut self.on_error {
            on_error(&e);
        }
        self.keep(Some(e));
    }

    /// Keeps `error` for [`Watcher::last_error`] (`None`: the file's newest
    /// version is in force).
    fn keep(&self, error: Option<BuildError>) {
        *lock(&self.last_error) = error;
    }
}

/// A running watcher; dropping it stops the watching thread (and waits for
/// a reload in progress to finish).
#[derive(Debug)]
pub struct Watcher {
    _worker: Worker,
    last_error: Arc<Mutex<Option<BuildError>>>,
}

impl Watcher {
    /// Why the file's newest version is not in force, if it is not: the
    /// last version (or read) that failed, until a version loads again.
    /// `None` while the limits in force are the file's.
    pub fn last_error(&self) -> Option<BuildError> {
        lock(&self.last_error).clone()
    }
}

/// A thread that runs until its handle is dropped: the drop raises the
/// stop flag the thread is given, wakes it if it is parked, and waits for
/// it to end.
#[derive(Debug)]
pub(crate) struct Worker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    /// Runs `run` on a thread named `name`, with the stop flag.
    pub(crate) fn spawn(
        name: &str,
        run: impl FnOnce(&AtomicBool) + Send + 'static,
    ) -> io::Result<Worker> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = thread::Builder::new()
            .name(name.into())
            .spawn(move || run(&flag))?;
        Ok(Worker {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            // A run that panicked ended the thread already: nothing to
            // report here.
            let _ = thread.join();
        }
    }
}
