//! [`Saver`]: a keyed limiter saved to its state file every period, on a
//! thread of its own, and once more when it stops (feature `persist`).

use std::fmt;
use std::hash::Hash;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use serde::Serialize;

use super::KeyedLimiter;
use crate::clock::Clock;
use crate::values::error::BuildError;

/// The shortest period [`KeyedLimiter::save_every`] saves on: a shorter
/// one is taken as this, since each save writes and fsyncs the whole file.
pub const MIN_SAVE_PERIOD: Duration = Duration::from_millis(10);

/// The handle of [`KeyedLimiter::save_every`]: while it lives, a thread
/// saves the limiter every period; [`stop`](Self::stop) (or dropping it)
/// ends the thread after one last save, so a clean shutdown loses
/// nothing.
///
/// A periodic save that fails is kept as [`last_error`](Self::last_error)
/// and tried again at the next period (the file stays the last good save:
/// writes are atomic). Stopping or dropping it waits for the last save
/// (a write and two fsyncs) on the calling thread.
#[must_use = "dropping the saver stops it at once (after one last save)"]
pub struct Saver {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<Result<usize, BuildError>>>,
    /// The last save, when no thread could be started to run it.
    last: Option<LastSave>,
    path: PathBuf,
}

/// A save run once, by the handle itself.
type LastSave = Box<dyn FnOnce() -> Result<usize, BuildError> + Send + Sync>;

/// What the saver's thread and its handle share.
struct Shared {
    /// Set by the handle to stop the thread.
    stop: Mutex<bool>,
    woken: Condvar,
    /// The last periodic save's error; `None` after a save that worked.
    last_error: Mutex<Option<BuildError>>,
}

impl<K, C> KeyedLimiter<K, C>
where
    K: Hash + Eq + Clone + Serialize + Send + Sync + 'static,
    C: Clock + 'static,
{
    /// Saves the limiter to `path` every `period` (at least
    /// [`MIN_SAVE_PERIOD`]) on a thread of its own, and once more when
    /// the returned [`Saver`] is stopped or dropped: a process that stops
    /// cleanly loses nothing, one that crashes loses at most a period of
    /// state. Each save is [`save`](Self::save)'s.
    ///
    /// ```
    /// use paceline::{KeyedLimiter, Rate};
    /// use paceline::Take;
    /// use std::sync::Arc;
    /// use std::time::Duration;
    ///
    /// let dir = std::env::temp_dir().join(format!("paceline-doc-every-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir)?;
    /// let path = dir.join("keys.state");
    ///
    /// let limiter = Arc::new(KeyedLimiter::<u64>::new(Rate::per_second(10)));
    /// let saver = limiter.save_every(&path, Duration::from_secs(30));
    /// limiter.try_take_n(&7, 11)?;
    /// saver.stop()?; // the last save: key 7 is in it
    /// assert_eq!(KeyedLimiter::<u64>::new(Rate::per_second(10)).load(&path)?.restored, 1);
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn save_every(self: &Arc<Self>, path: impl Into<PathBuf>, period: Duration) -> Saver {
        let path = path.into();
        let period = period.max(MIN_SAVE_PERIOD);
        let shared = Arc::new(Shared {
            stop: Mutex::new(false),
            woken: Condvar::new(),
            last_error: Mutex::new(None),
        });
        let last = {
            let (limiter, path) = (Arc::clone(self), path.clone());
            move || limiter.save(&path)
        };
        let spawned = {
            let (limiter, shared, path) = (Arc::clone(self), Arc::clone(&shared), path.clone());
            thread::Builder::new()
                .name("paceline-saver".into())
                .spawn(move || {
                    while !shared.wait(period) {
                        let failed = limiter.save(&path).err();
                        *shared.last_error.lock().unwrap_or_else(|e| e.into_inner()) = failed;
                    }
                    limiter.save(&path)
                })
        };
        let (thread, last): (_, Option<LastSave>) = match spawned {
            Ok(thread) => (Some(thread), None),
            // No thread, no periodic saves: said as the last error; the
            // last save still runs when the handle stops.
            Err(e) => {
                *shared.last_error.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(BuildError::StateFile {
                        path: path.clone(),
                        problem: format!("not saved every period: no thread to save on: {e}"),
                        error: None,
                    });
                (None, Some(Box::new(last)))
            }
        };
        Saver {
            shared,
            thread,
            last,
            path,
        }
    }
}

#[cfg(feature = "tokio")]
impl<K, C> super::AsyncKeyedLimiter<K, C>
where
    K: Hash + Eq + Clone + Serialize + Send + Sync + 'static,
    C: Clock + 'static,
{
    /// [`KeyedLimiter::save_every`] on the keyed limiter this face (and its
    /// clones) share. The saves run on the saver's own thread, never on
    /// the runtime's; stopping or dropping the [`Saver`] waits for the
    /// last save, so at shutdown do it where a thread may block (after the
    /// runtime, or in `spawn_blocking`).
    pub fn save_every(&self, path: impl Into<PathBuf>, period: Duration) -> Saver {
        self.shared().save_every(path, period)
    }
}

impl Shared {
    /// Waits `period` or until stopped; `true` when stopped.
    fn wait(&self, period: Duration) -> bool {
        let stop = self.stop.lock().unwrap_or_else(|e| e.into_inner());
        let (stop, _) = self
            .woken
            .wait_timeout_while(stop, period, |stop| !*stop)
            .unwrap_or_else(|e| e.into_inner());
        *stop
    }
}

impl Saver {
    /// The state file.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The last periodic save's error, if it failed (`None` once one has
    /// worked again).
    pub fn last_error(&self) -> Option<BuildError> {
        self.shared
            .last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Stops the periodic saves and saves once more, returning how many
    /// keys that last save wrote.
    ///
    /// # Errors
    /// The last save's [`BuildError::StateFile`].
    pub fn stop(mut self) -> Result<usize, BuildError> {
        self.finish()
    }

    /// Wakes the thread to stop, and waits for its last save.
    fn finish(&mut self) -> Result<usize, BuildError> {
        *self.shared.stop.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.shared.woken.notify_all();
        match self.thread.take() {
            Some(thread) => thread.join().unwrap_or_else(|_| {
                Err(BuildError::StateFile {
                    path: self.path.clone(),
                    problem: "not saved: the saving thread panicked".into(),
                    error: None,
                })
            }),
            None => self.last.take().map_or(Ok(0), |last| last()),
        }
    }
}

impl Drop for Saver {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

impl fmt::Debug for Saver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Saver")
            .field("path", &self.path)
            .field("last_error", &self.last_error())
            .finish_non_exhaustive()
    }
}
