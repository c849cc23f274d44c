//! A keyed limiter's state saved to a file and read back (feature
//! `persist`): [`KeyedLimiter::save`], [`KeyedLimiter::load`], and what a
//! load did ([`Loaded`]). The guide's [persistence](crate::guide::persist)
//! chapter says how to use it; this doc says how it is built.
//!
//! The file, its checks and its atomic write are `state_file.rs`; this
//! file reads a limiter's state into it and back.
//!
//! # Time down
//!
//! A pacing key's `tat` is saved relative to the save's Unix time, since
//! its clock's origin dies with the process; a load puts it back relative
//! to its own reading, less the time between the save and the load. So
//! the time spent down counts as time passed, and never as more credit
//! than the burst: the step's floor `max(tat, now - tau)` forgets what is
//! older. A window key's word (its window's index and count) is on Unix
//! time already, and is saved and put back as it is: it keeps its count
//! until its window ends, down or not, and a window that ended while the
//! limiter was down counts nothing. A key at rest is not written: it
//! decides as a key never seen, which is what a key missing from the file
//! becomes. An entry whose kind is not its key's class's (a parent
//! function that resolves the key elsewhere now) starts as a new key.
//!
//! # The fingerprint
//!
//! A digest of the limits, not of their text: one line per class, the
//! default's `default pace <interval ns> <tau ns>` (`window <quota>
//! <window>` for a quota), each override's `override <key JSON> <same>`,
//! the overrides sorted, so the same set gives the same fingerprint in
//! every process, whatever order it was set in or how its rates were
//! spelled (`"60/min"` is `"1/s"`).

use std::fs;
use std::hash::{BuildHasher, Hash};
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::classes::{rest_time, Class, Resolved, Setting};
use super::shard::Entry;
use super::state_file::{hex, parse, seal, write_atomic, Word, PACE, WINDOW};
use super::KeyedLimiter;
use crate::clock::Clock;
use crate::model::schedule::{self, ORIGIN};
use crate::primitive::{lock, read, write, Ordering};
use crate::values::error::{BuildError, Cause};

/// What [`KeyedLimiter::load`] did with a file it accepted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Loaded {
    /// Keys whose saved state was put back: tracked now, with the time
    /// down counted as time passed.
    pub restored: usize,
    /// Keys that came to rest while the limiter was down: each decides as
    /// a new key (its whole burst), and one tracked here was forgotten.
    pub at_rest: usize,
    /// Keys not tracked for want of room under
    /// [`max_keys`](super::KeyedBuilder::max_keys): each starts as a new key.
    pub no_room: usize,
    /// The time between the save and the load, by the wall clock (zero if
    /// it reads earlier than the save's time).
    pub down: Duration,
}

impl<K: Hash + Eq + Clone + Serialize, C: Clock> KeyedLimiter<K, C> {
    /// Writes every tracked key's exact state to `path`, atomically (see
    /// the guide's [persistence](crate::guide::persist) chapter), with the
    /// fingerprint of the limits in force and the time of the save; returns
    /// how many keys it wrote. Keys at rest are left out: they decide as
    /// keys never seen. Takes go on meanwhile; a change of limits waits
    /// for the save.
    ///
    /// ```
    /// use paceline::{KeyedLimiter, Rate};
    /// use paceline::Take;
    ///
    /// let dir = std::env::temp_dir().join(format!("paceline-doc-save-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir)?;
    /// let path = dir.join("keys.state");
    ///
    /// let limiter = KeyedLimiter::<String>::builder(Rate::per_minute(1)).slack(2).build()?;
    /// limiter.try_take_n("alice", 3)?; // her whole burst
    /// assert_eq!(limiter.save(&path)?, 1);
    ///
    /// // After a restart: the same limits, and the state back.
    /// let restarted = KeyedLimiter::<String>::builder(Rate::per_minute(1)).slack(2).build()?;
    /// assert_eq!(restarted.load(&path)?.restored, 1);
    /// assert!(restarted.try_take("alice").is_err()); // still spent
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`BuildError::StateFile`] when a key cannot be written as JSON (a
    /// map with keys that are not strings) or the file cannot be written;
    /// the file at `path` is then as it was.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<usize, BuildError> {
        let path = path.as_ref();
        let _admin = lock(&self.admin);
        let resolved = Arc::clone(&read(&self.resolved));
        let fingerprint = fingerprint(&resolved)
            .map_err(|e| refused(path, format!("not saved: an override's key: {e}"), None))?;
        let (base, unix) = readings(&self.clock);
        let (mut body, mut entries) = (Vec::new(), 0usize);
        for lock in self.shards.iter() {
            let shard = read(lock);
            for (key, e) in shard.map.iter() {
                let class = &shard.classes[e.class() as usize];
                let word = e.tat.load(Ordering::Relaxed);
                if at_rest(word, base, class) {
                    continue;
                }
                let written = match class {
                    Class::Paced(_) => {
                        // Not at rest: `tat > base - tau`, and `tau <= 2^62`.
                        let ahead = i128::from(word) - i128::from(base);
                        let ahead = i64::try_from(ahead).unwrap_or(i64::MAX);
                        serde_json::to_writer(&mut body, &(key, PACE, ahead))
                    }
                    Class::Window(_) => serde_json::to_writer(&mut body, &(key, WINDOW, word)),
                };
                written
                    .map_err(|e| refused(path, format!("not saved: a key as JSON: {e}"), None))?;
                body.push(b'\n');
                entries += 1;
            }
        }
        write_atomic(path, &seal(&fingerprint, unix, entries, body))
            .map_err(|e| refused(path, "not saved".into(), Some(Cause::new(e, None))))?;
        Ok(entries)
    }

    /// Reads a state file [`save`](Self::save) wrote, and replaces the
    /// state of every key it names: each key's saved state comes back
    /// with the time since the save counted as time passed (a key that
    /// came to rest meanwhile decides as a new key; one tracked here is
    /// forgotten); keys it does not name are left as they are.
    ///
    /// A file is refused whole, and nothing applied, when it is not a
    /// state file of this format and version, when its checksum does not
    /// match (corrupt or truncated), when an entry does not parse, or when
    /// it was saved under other limits than those in force (its
    /// fingerprint).
    ///
    /// # Errors
    /// [`BuildError::StateFile`], naming the file and what was wrong
    /// (an I/O error, such as a file not found, is its
    /// [`source`](std::error::Error::source)).
    pub fn load(&self, path: impl AsRef<Path>) -> Result<Loaded, BuildError>
    where
        K: DeserializeOwned,
    {
        let path = path.as_ref();
        let bytes = fs::read(path)
            .map_err(|e| refused(path, "not loaded".into(), Some(Cause::new(e, None))))?;
        let parsed = parse::<K>(&bytes).map_err(|problem| {
            refused(
                path,
                format!("not loaded: {problem}; nothing applied"),
                None,
            )
        })?;
        let _admin = lock(&self.admin);
        let resolved = Arc::clone(&read(&self.resolved));
        let ours = fingerprint(&resolved)
            .map_err(|e| refused(path, format!("not loaded: an override's key: {e}"), None))?;
        if parsed.fingerprint != ours {
            return Err(refused(
                path,
                format!(
                    "not loaded: saved under other limits (fingerprint {} in the file, {} \
                     in force); nothing applied",
                    parsed.fingerprint, ours
                ),
                None,
            ));
        }
        let (base, unix) = readings(&self.clock);
        let down = unix.saturating_sub(parsed.saved);
        let mut loaded = Loaded {
            down: Duration::from_nanos(down),
            ..Loaded::default()
        };
        for (key, word) in parsed.entries {
            self.restore(key, word, base, down, &mut loaded);
        }
        #[cfg(feature = "tokio")]
        self.changed.notify_waiters();
        Ok(loaded)
    }

    /// Puts `key`'s saved `word` back at `now`, `down` ns after the save,
    /// counting what it did in `loaded`. Under the admin lock, so every
    /// shard is at the class table in force (a change brings all shards to
    /// it under that lock).
    fn restore(&self, key: K, word: Word, now: u64, down: u64, loaded: &mut Loaded) {
        let (hash, lock) = self.shard(&key);
        let mut guard = write(lock);
        let shard = &mut *guard;
        let class = self.resolve(&shard.resolved, &key);
        let p = &shard.classes[class as usize];
        // A word of another kind than the key's class starts it as new.
        let tat = match (word, p) {
            (Word::Pace(ahead), Class::Paced(_)) => Some(put_back(ahead, now, down)),
            (Word::Window(word), Class::Window(_)) => Some(word),
            _ => None,
        };
        if tat.is_none_or(|tat| at_rest(tat, now, p)) {
            loaded.at_rest += 1;
            if let Ok(entry) = shard.map.find_entry(hash, |(k, _)| *k == key) {
                entry.remove();
                // The key's word changed: a booking on it gives nothing back.
                shard.generation += 1;
                self.release(1);
            }
            return;
        }
        let tat = tat.unwrap_or(p.initial());
        if let Some((_, e)) = shard.map.find_mut(hash, |(k, _)| *k == key) {
            *e = Entry::new(tat, class, now);
            // As above: a booking made before the load gives nothing back.
            shard.generation += 1;
        } else {
            // Relaxed, as `claim`'s: the count is one RMW per change.
            let below = |count| (count < self.max_keys).then_some(count + 1);
            if self
                .tracked
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, below)
                .is_err()
            {
                loaded.no_room += 1;
                return;
            }
            let hasher = &self.hasher;
            shard
                .map
                .insert_unique(hash, (key, Entry::new(tat, class, now)), |(k, _)| {
                    hasher.hash_one(k)
                });
        }
        let rest = rest_time(tat, p);
        shard.earliest_rest = shard.earliest_rest.min(rest);
        self.next_rest.fetch_min(rest, Ordering::Relaxed);
        loaded.restored += 1;
    }
}

/// Whether the word `word` of a key of `class` is at rest at the internal
/// reading `now`: a pacing key with its whole burst back, a window key
/// whose window has ended (or that has counted nothing).
fn at_rest(word: u64, now: u64, class: &Class) -> bool {
    match class {
        Class::Paced(p) => schedule::at_rest(word, now, *p, 0),
        Class::Window(w) => w.state(word, now).reset().is_zero(),
    }
}

/// The clock's reading in internal time, and the Unix time of the same
/// instant, ns: the clock's own where it knows its origin's
/// ([`Clock::unix_origin`]: a test's `ManualClock` sets the date), else
/// the host's.
fn readings<C: Clock>(clock: &C) -> (u64, u64) {
    let now = clock.now();
    let unix = match clock.unix_origin() {
        Some(origin) => origin.saturating_add(now),
        None => crate::clock::UnixClock.now(),
    };
    (now.saturating_add(ORIGIN), unix)
}

/// A saved `tat`, `ahead` of the save's time, put back at the internal
/// time `now`, `down` ns after the save: within the states a step makes.
fn put_back(ahead: i64, now: u64, down: u64) -> u64 {
    let tat = i128::from(now) + i128::from(ahead) - i128::from(down);
    let tat = tat.clamp(i128::from(schedule::FULL), i128::from(schedule::MAX_TAT));
    // In range by the clamp.
    u64::try_from(tat).unwrap_or(schedule::FULL)
}

/// The fingerprint of `resolved`'s limits (see the module doc), hex.
fn fingerprint<K: Hash + Eq + Serialize>(
    resolved: &Resolved<K>,
) -> Result<String, serde_json::Error> {
    let class = |s: &Setting| match &s.class {
        Class::Paced(p) => format!("pace {} {}", p.interval(), p.tau()),
        Class::Window(w) => format!("window {} {}", w.params.quota(), w.params.window()),
    };
    let mut overrides = resolved
        .in_order()
        .into_iter()
        .map(|(i, key)| {
            let key = serde_json::to_string(key)?;
            Ok(format!("override {key} {}\n", class(&resolved.settings[i])))
        })
        .collect::<Result<Vec<String>, serde_json::Error>>()?;
    overrides.sort_unstable();
    let mut digest = Sha256::new();
    digest.update(format!("default {}\n", class(&resolved.settings[0])));
    for line in overrides {
        digest.update(line);
    }
    Ok(hex(&digest.finalize()))
}

/// A [`BuildError::StateFile`] for `path`.
fn refused(path: &Path, problem: String, error: Option<Cause<io::Error>>) -> BuildError {
    BuildError::StateFile {
        path: path.to_owned(),
        problem,
        error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_tat_comes_back_less_the_time_down_within_the_states() {
        let now = ORIGIN + 10_000;
        assert_eq!(put_back(500, now, 0), now + 500);
        assert_eq!(put_back(500, now, 200), now + 300);
        assert_eq!(put_back(-500, now, 200), now - 700);
        assert_eq!(put_back(i64::MIN, now, u64::MAX), schedule::FULL);
        assert_eq!(put_back(i64::MAX, u64::MAX, 0), schedule::MAX_TAT);
    }
}
