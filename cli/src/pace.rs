//! [`Pace`]: the one place the CLI asks paceline for permits, over an
//! in-process `AtomicLimiter`, the blocking `RedisLimiter` or
//! `PostgresLimiter`, or nothing (`--unlimited`).
//!
//! A request first *tries* (`try_take_n`, which never waits). Refused, it
//! lets the caller flush (the lines loop writes out what it holds), and a
//! wait shorter than [`COALESCE`] is stretched to it. Then it waits, but
//! never in one long blocking `take`: a SIGINT must end a run paced at
//! `1/min` promptly, and a SIGHUP must change the rate of a run that is
//! waiting. So it asks with `take_n_timeout(cost, WAKE)`: granted (and
//! waited for) when its slot is at most [`WAKE`] away, otherwise refused,
//! storing nothing; it then sleeps towards the slot in steps of at most
//! `WAKE`, looking at the signal flags between steps. A lone process books
//! each slot exactly as a blocking `take` would (the schedule decides the
//! slot, not when the caller asked); processes sharing a key book in
//! the order they come within `WAKE` of their slots, and the window bound
//! holds either way, since it is the step's.
//!
//! Bytes (`--bytes`) go through `paceline::io::PacedWriter` with a `&Pace`
//! as its [`ByteLimiter`]: a unit of bytes is a permit (see
//! [`crate::units`]), paid first, in chunks of one burst.

use std::cell::{Cell, RefCell};
use std::io;
use std::sync::Arc;
use std::time::Duration;

use paceline::io::ByteLimiter;
use paceline::postgres::PostgresLimiter;
use paceline::redis::{Error as SharedError, RedisLimiter};

use crate::args::Server;
use paceline::{AtomicLimiter, TakeError};

use crate::args::{parse_rate_file, Limit};
use crate::signals::Flags;

/// How long a waiting request may hold its slot before the slot comes: the
/// longest a SIGINT or SIGHUP goes unnoticed while waiting.
pub const WAKE: Duration = Duration::from_millis(50);

/// How long a short wait is stretched to, so that at high rates lines go
/// out in small batches, a wake-up and a `write(2)` per millisecond rather
/// than per line (at 100k lines/s a wake-up per line cost about 25 % of a
/// core, a millisecond's batches 3 %). A line is then up to this much past
/// its slot (plus the sleep's own lateness), never before it; the rate
/// holds because the wait is at most half the banked window.
pub const COALESCE: Duration = Duration::from_millis(1);

/// What became of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Paid for: go.
    Go,
    /// Refused (`--drop`): the limit had no room now.
    Dropped,
    /// A stop signal came while waiting: nothing was taken.
    Stopped,
}

/// The limiter behind the CLI.
enum Engine {
    Unlimited,
    Local(Box<AtomicLimiter>),
    /// A limit kept in Redis or PostgreSQL, shared by every process using
    /// the same server and key.
    Shared {
        limiter: SharedLimiter,
        key: String,
    },
}

/// The blocking limiter of a shared limit.
enum SharedLimiter {
    Redis(RedisLimiter),
    Postgres(PostgresLimiter),
}

/// `$body` with `$l` bound to whichever limiter `$shared` holds: both have
/// the same calls and errors.
macro_rules! on_shared {
    ($shared:expr, $l:ident => $body:expr) => {
        match $shared {
            SharedLimiter::Redis($l) => $body,
            SharedLimiter::Postgres($l) => $body,
        }
    };
}

/// The CLI's limiter: one of the engines, the limit in force, and what a
/// byte payment carries over.
pub struct Pace {
    engine: RefCell<Engine>,
    limit: Cell<Option<Limit>>,
    /// Bytes paid for and not yet used (bytes are paid in whole units).
    credit: Cell<u64>,
    flags: Arc<Flags>,
    /// `--rate-file` and `--burst`, for SIGHUP.
    rate_file: Option<std::path::PathBuf>,
    burst: Option<u64>,
    bytes: bool,
    quiet: bool,
}

/// A failure of the limiter (its server down, a broken configuration): the run
/// ends with status 1 and this message.
#[derive(Debug)]
pub struct Failure(pub String);

impl Pace {
    /// The limiter for `limit` (`None`: unlimited), in process or in a
    /// server.
    pub fn new(
        limit: Option<Limit>,
        shared: Option<(Server, String)>,
        flags: Arc<Flags>,
        rate_file: Option<std::path::PathBuf>,
        burst: Option<u64>,
        bytes: bool,
        quiet: bool,
    ) -> Result<Pace, Failure> {
        let engine = match (limit, shared) {
            (None, _) => Engine::Unlimited,
            (Some(l), None) => Engine::Local(Box::new(
                AtomicLimiter::builder(l.given.rate())
                    .slack(l.slack)
                    // A pipeline's first burst goes at once, as `--burst`
                    // promises (a library limiter starts without credit).
                    .full_credit(true)
                    .build()
                    .map_err(|e| Failure(format!("rate {}: {e}", l.given)))?,
            )),
            (Some(l), Some((server, key))) => {
                let failed = |e: &dyn std::fmt::Display| {
                    Failure(format!("{} {}: {e}", server.flag(), server.address()))
                };
                let limiter = match &server {
                    Server::Redis(url) => SharedLimiter::Redis(
                        RedisLimiter::builder(url.as_str(), l.given.rate())
                            .slack(l.slack)
                            .build()
                            .map_err(|e| failed(&e))?,
                    ),
                    Server::Postgres(conn) => {
                        let limiter = PostgresLimiter::builder(conn, l.given.rate())
                            .slack(l.slack)
                            .build()
                            .map_err(|e| failed(&e))?;
                        // The table, if it is not there yet (idempotent).
                        limiter.install().map_err(|e| failed(&e))?;
                        SharedLimiter::Postgres(limiter)
                    }
                };
                // Fail now, naming the server, rather than at the first line.
                on_shared!(&limiter, l => l.ping()).map_err(|e| failed(&e))?;
                Engine::Shared { limiter, key }
            }
        };
        Ok(Pace {
            engine: RefCell::new(engine),
            limit: Cell::new(limit),
            credit: Cell::new(0),
            flags,
            rate_file,
            burst,
            bytes,
            quiet,
        })
    }

    /// The most permits one request may cost: `slack + 1`.
    fn burst_permits(&self) -> u64 {
        match &*self.engine.borrow() {
            Engine::Unlimited => u64::MAX,
            Engine::Local(l) => l.slack().saturating_add(1),
            Engine::Shared { limiter, .. } => on_shared!(limiter, l => l.slack()).saturating_add(1),
        }
    }

    /// The shortest a waiting request sleeps: [`COALESCE`], but at most
    /// half the banked window (`slack * T / 2`), which the sleep's lateness
    /// must fit in for the rate to hold; zero without slack.
    fn coalesce(&self) -> Duration {
        let (rate, slack) = match &*self.engine.borrow() {
            Engine::Unlimited => return Duration::ZERO,
            Engine::Local(l) => (l.rate(), l.slack()),
            Engine::Shared { limiter, .. } => on_shared!(limiter, l => (l.rate(), l.slack())),
        };
        let banked = rate
            .interval()
            .checked_mul(u32::try_from(slack).unwrap_or(u32::MAX))
            .unwrap_or(Duration::MAX);
        COALESCE.min(banked / 2)
    }

    fn unit(&self) -> u64 {
        self.limit.get().map_or(1, |l| l.given.unit())
    }

    /// Takes as many permits as the limit has room for now, up to `max`,
    /// without waiting: one request of that cost, admitted at once (so the
    /// same decision as that many single takes at this instant). The lines
    /// loop passes a run of lines with one write this way. Over Redis it
    /// asks for one permit (a round trip per line, as when waiting), and
    /// returns 0 if a try finds no room.
    pub fn grab(&self, max: u64) -> Result<u64, Failure> {
        if max == 0 {
            return Ok(0);
        }
        self.reload_if_asked();
        let engine = self.engine.borrow();
        let want = match &*engine {
            Engine::Unlimited => return Ok(max),
            Engine::Local(l) => l.available().min(max),
            Engine::Shared { .. } => 1,
        };
        if want == 0 {
            return Ok(0);
        }
        let answer = match &*engine {
            Engine::Unlimited => return Ok(max),
            Engine::Local(l) => l.try_take_n(want).map_err(Refusal::Local),
            Engine::Shared { limiter, key } => {
                on_shared!(limiter, l => l.try_take_n(key, want)).map_err(Refusal::Shared)
            }
        };
        match answer {
            Ok(()) => Ok(want),
            Err(r) if r.retry_after().is_some() => Ok(0),
            Err(r) => Err(Failure(r.to_string())),
        }
    }

    /// Pays for `cost` permits: at once if the limit has room; otherwise
    /// waits for the slot (or, with `drop`, refuses). `before_wait` runs
    /// before any sleep (the lines loop flushes there).
    pub fn admit(
        &self,
        cost: u64,
        drop: bool,
        before_wait: &mut dyn FnMut(),
    ) -> Result<Admit, Failure> {
        // First a try, which never waits; only once it is refused does
        // `before_wait` run (the lines loop flushes there), and then the
        // bounded takes, which may wait up to WAKE inside the limiter.
        let mut tried = false;
        loop {
            self.reload_if_asked();
            let may_wait = tried && !drop;
            let answer = {
                let engine = self.engine.borrow();
                match &*engine {
                    Engine::Unlimited => return Ok(Admit::Go),
                    Engine::Local(l) if !may_wait => l.try_take_n(cost).map_err(Refusal::Local),
                    Engine::Local(l) => l
                        .take_n_timeout(cost, WAKE)
                        .map(drop_it)
                        .map_err(Refusal::Local),
                    Engine::Shared { limiter, key } if !may_wait => {
                        on_shared!(limiter, l => l.try_take_n(key, cost)).map_err(Refusal::Shared)
                    }
                    Engine::Shared { limiter, key } => {
                        on_shared!(limiter, l => l.take_n_timeout(key, cost, WAKE).map(drop_it))
                            .map_err(Refusal::Shared)
                    }
                }
            };
            let wait = match answer {
                Ok(()) => return Ok(Admit::Go),
                Err(refusal) => match refusal.retry_after() {
                    Some(_) if drop => return Ok(Admit::Dropped),
                    Some(wait) => wait,
                    None => return Err(Failure(refusal.to_string())),
                },
            };
            if self.flags.stopping() {
                return Ok(Admit::Stopped);
            }
            if !tried {
                tried = true;
                before_wait();
                // A short wait is stretched to the coalescing window: the
                // lines due meanwhile then go together, one wake-up and one
                // write for many (never early: the sleep only lengthens).
                let coalesce = self.coalesce();
                if wait < coalesce {
                    self.flags.sleep(coalesce);
                }
                continue;
            }
            // Sleep until the slot is within WAKE (it is then granted), in
            // steps of at most WAKE so that signals are seen.
            let nap = wait
                .saturating_sub(WAKE)
                .clamp(Duration::from_millis(1), WAKE);
            self.flags.sleep(nap);
            if self.flags.stopping() {
                return Ok(Admit::Stopped);
            }
        }
    }

    /// Applies a `--rate-file` re-read if SIGHUP asked for one.
    pub fn reload_if_asked(&self) {
        if !self.flags.take_reload() {
            return;
        }
        let Some(path) = &self.rate_file else {
            if !self.quiet {
                eprintln!("paceline: SIGHUP without --rate-file: the rate stays as it is");
            }
            return;
        };
        let result = std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|text| parse_rate_file(&text, self.bytes, self.burst))
            .and_then(|limit| self.apply(limit).map(|()| limit));
        match (result, self.limit.get()) {
            (Ok(new), _) => {
                if !self.quiet {
                    eprintln!("paceline: {}: rate now {}", path.display(), new.given);
                }
            }
            (Err(e), Some(old)) => {
                eprintln!("paceline: {}: {e}; keeping {}", path.display(), old.given)
            }
            (Err(e), None) => eprintln!("paceline: {}: {e}", path.display()),
        }
    }

    /// Puts `limit` in force: live on the in-process limiter (booked slots
    /// stand, banked credit is kept in permits, never refilled), or as the
    /// limit this process's Redis requests are paced by.
    fn apply(&self, limit: Limit) -> Result<(), String> {
        let mut engine = self.engine.borrow_mut();
        match &mut *engine {
            Engine::Unlimited => return Err("--unlimited runs do not pace".into()),
            Engine::Local(l) => l
                .set_limit(limit.given.rate(), limit.slack)
                .map_err(|e| e.to_string())?,
            Engine::Shared { limiter, .. } => on_shared!(limiter, l => {
                *l = l
                    .with_limit(limit.given.rate(), limit.slack)
                    .map_err(|e| e.to_string())?;
            }),
        }
        self.limit.set(Some(limit));
        Ok(())
    }
}

fn drop_it<T>(_: T) {}

/// A refusal from either engine.
enum Refusal {
    Local(TakeError),
    Shared(SharedError),
}

impl Refusal {
    fn retry_after(&self) -> Option<Duration> {
        match self {
            Refusal::Local(e) => e.retry_after(),
            Refusal::Shared(e) => e.retry_after(),
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Local(e) => write!(f, "{e}"),
            Refusal::Shared(e) => write!(f, "shared limit: {e}"),
        }
    }
}

/// Why a paced write stopped: a stop signal, or the limiter failed. It
/// travels inside an `io::Error` through `PacedWriter`.
#[derive(Debug)]
pub enum PayStop {
    /// SIGINT or SIGTERM.
    Stopped,
    /// The limiter failed.
    Failed(String),
}

impl std::fmt::Display for PayStop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PayStop::Stopped => f.write_str("stopped by a signal"),
            PayStop::Failed(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for PayStop {}

/// Bytes: a byte limiter in units of [`Pace::unit`] bytes, paid first.
impl ByteLimiter for Pace {
    fn burst(&self) -> u64 {
        self.burst_permits().saturating_mul(self.unit())
    }

    fn pay(&self, bytes: u64) -> io::Result<()> {
        self.reload_if_asked();
        let credit = self.credit.get();
        if bytes <= credit {
            self.credit.set(credit - bytes);
            return Ok(());
        }
        let unit = self.unit();
        let owed = bytes - credit;
        // Whole units, rounded up: the bytes are paid before they go. A
        // chunk is one burst, but a SIGHUP may have shrunk the burst since
        // the writer sized it: then pay in more than one request.
        let mut permits = owed.div_ceil(unit);
        while permits > 0 {
            let now = permits.min(self.burst_permits());
            match self.admit(now, false, &mut || {}) {
                Ok(Admit::Go) => permits -= now,
                Ok(Admit::Stopped | Admit::Dropped) => {
                    return Err(io::Error::other(PayStop::Stopped))
                }
                Err(Failure(e)) => return Err(io::Error::other(PayStop::Failed(e))),
            }
        }
        self.credit
            .set(owed.div_ceil(unit).saturating_mul(unit) - owed);
        Ok(())
    }
}
