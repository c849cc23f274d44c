//! Signals as flags: SIGINT and SIGTERM ask the run to stop (it finishes
//! the line in hand, flushes and summarises); SIGHUP asks for the
//! `--rate-file` to be read again. A thread of signal-hook's `Signals`
//! sets them; the work loops look at them between lines and while waiting.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// What the signals asked for. Relaxed orderings throughout: each flag is
/// a request on its own, guarding no other data.
#[derive(Debug, Default)]
pub struct Flags {
    /// The stop signal's number, 0 while none came.
    stop: AtomicI32,
    reload: AtomicBool,
}

impl Flags {
    /// Whether a stop signal came.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed) != 0
    }

    /// The stop signal's number, if one came.
    pub fn stop_signal(&self) -> Option<i32> {
        Some(self.stop.load(Ordering::Relaxed)).filter(|&s| s != 0)
    }

    /// Whether a reload was asked for since the last call (and clears it).
    pub fn take_reload(&self) -> bool {
        // Cheap when nothing came: a load, no write.
        self.reload.load(Ordering::Relaxed) && self.reload.swap(false, Ordering::Relaxed)
    }

    /// Sleeps `d`, or less if a stop signal comes meanwhile.
    pub fn sleep(&self, d: Duration) {
        const STEP: Duration = Duration::from_millis(10);
        let mut left = d;
        while !left.is_zero() && !self.stopping() {
            let now = left.min(STEP);
            thread::sleep(now);
            left -= now;
        }
    }
}

/// Installs the handlers and starts the thread that turns signals into
/// flags.
///
/// # Errors
/// The operating system refused a handler.
pub fn install() -> std::io::Result<Arc<Flags>> {
    let flags = Arc::new(Flags::default());
    let mut signals = Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    let f = Arc::clone(&flags);
    thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                match sig {
                    SIGHUP => f.reload.store(true, Ordering::Relaxed),
                    other => {
                        // The first stop signal is the one reported.
                        let _ =
                            f.stop
                                .compare_exchange(0, other, Ordering::Relaxed, Ordering::Relaxed);
                    }
                }
            }
        })?;
    Ok(flags)
}
