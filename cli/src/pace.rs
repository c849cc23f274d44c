//! [`Pace`]: the one place the CLI asks paceline for permits, through the
//! take interface (`paceline::Take`): an in-process `AtomicLimiter`, a
//! limit shared through a server (the blocking `RedisLimiter`,
//! `PostgresLimiter` or `MemcachedLimiter`, chosen only where the flags are
//! read), or nothing
//! (`--unlimited`).
//!
//! A request first *tries* (`try_take_n`, which never waits). Refused, it
//! lets the caller flush (the lines loop writes out what it holds), and a
//! wait shorter than [`COALESCE`] is stretched to it. The lines loop asks
//! for a batch ([`Pace::batch`]: the lines in hand due within [`BATCH`],
//! at most the burst) in one request, which waits for the last one's slot:
//! a wake-up for many where the burst allows, none before its slot. Then it waits, but
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

use paceline::clock::StdClock;
use paceline::io::ByteLimiter;
use paceline::memcached::MemcachedLimiter;
use paceline::postgres::PostgresLimiter;
use paceline::redis::RedisLimiter;
use paceline::remote::{Backend, RemoteLimiter};
use paceline::{AtomicLimiter, Error, Rate, Slack, Take};

use crate::args::{parse_rate_file, Args, Limit, Server};
use crate::limits::Follow;
use crate::report::Stats;
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

/// How long the first line of a batch may wait past its slot for the lines
/// due after it, which then go with it (at most the burst): at 1000 lines/s
/// the default burst's 11 lines, at 100k/s its 1000, a wake-up each, where
/// a wake-up a line cost ten times `pv -L`'s CPU. The rate holds whatever
/// the batch: the last line goes at its slot, so the schedule is not
/// behind, and the banked window is left to absorb the sleep's lateness.
pub const BATCH: Duration = Duration::from_millis(10);

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

/// A limiter the CLI paces through: the take interface, keyed by text (an
/// in-process limiter ignores the key), and a way to put a new limit in
/// force on SIGHUP.
trait Limiter: Take<str> {
    /// Puts `rate` with `slack` in force from now on.
    fn relimit(&mut self, rate: Rate, slack: Slack) -> Result<(), String>;
}

/// Live: booked slots stand, banked credit is kept in permits.
impl Limiter for AtomicLimiter<StdClock> {
    fn relimit(&mut self, rate: Rate, slack: Slack) -> Result<(), String> {
        self.set_limit(rate, slack).map_err(|e| e.to_string())
    }
}

/// The limit this process's requests to the server are paced by.
impl<B: Backend> Limiter for RemoteLimiter<B> {
    fn relimit(&mut self, rate: Rate, slack: Slack) -> Result<(), String> {
        *self = self.with_limit(rate, slack).map_err(|e| e.to_string())?;
        Ok(())
    }
}

/// The limiter behind the CLI: nothing (`--unlimited`), or one limit.
enum Engine {
    Unlimited,
    Limited {
        limiter: Box<dyn Limiter>,
        /// The key of a shared limit (empty in process, where none is read).
        key: String,
        /// Whether the limit is kept in a server (each ask a round trip).
        shared: bool,
    },
}

/// The CLI's limiter: one of the engines, the limit in force, and what a
/// byte payment carries over.
pub struct Pace {
    engine: RefCell<Engine>,
    limit: Cell<Option<Limit>>,
    /// Bytes paid for and not yet used (bytes are paid in whole units).
    credit: Cell<u64>,
    flags: Arc<Flags>,
    /// Told when the limit first holds a request back.
    stats: Arc<Stats>,
    /// The limits document the limit is read from, followed.
    follow: Option<Follow>,
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
    /// The limiter for `limit` (`None`: unlimited; `args.limit`, or the
    /// one `follow` read), in process or in a server.
    pub fn new(
        args: &Args,
        follow: Option<Follow>,
        flags: Arc<Flags>,
        stats: Arc<Stats>,
    ) -> Result<Pace, Failure> {
        let limit = follow.as_ref().map_or(args.limit, |f| Some(f.limit));
        let engine = match (limit, args.shared.clone()) {
            (None, _) => Engine::Unlimited,
            (Some(l), None) => Engine::Limited {
                limiter: Box::new(
                    AtomicLimiter::builder(l.given.rate())
                        .slack(l.slack)
                        // A pipeline's first burst goes at once, as `--burst`
                        // promises (a library limiter starts without credit).
                        .full_credit(true)
                        .clock(StdClock::new())
                        .build()
                        .map_err(|e| Failure(format!("rate {}: {e}", l.given)))?,
                ),
                key: String::new(),
                shared: false,
            },
            (Some(l), Some((server, key))) => {
                let failed = |e: &dyn std::fmt::Display| {
                    Failure(format!("{} {}: {e}", server.flag(), server.address()))
                };
                let limiter: Box<dyn Limiter> = match &server {
                    Server::Redis(url) => Box::new(
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
                        Box::new(limiter)
                    }
                    Server::Memcached(addr) => Box::new(
                        MemcachedLimiter::builder(addr.as_str(), l.given.rate())
                            .slack(l.slack)
                            .build()
                            .map_err(|e| failed(&e))?,
                    ),
                };
                // Fail now, naming the server, rather than at the first
                // line: one look at the key.
                limiter.state(&key).map_err(|e| failed(&e))?;
                Engine::Limited {
                    limiter,
                    key,
                    shared: true,
                }
            }
        };
        Ok(Pace {
            engine: RefCell::new(engine),
            limit: Cell::new(limit),
            credit: Cell::new(0),
            flags,
            stats,
            follow,
            rate_file: args.rate_file.clone(),
            burst: args.burst,
            bytes: args.mode == crate::args::Mode::Bytes,
            quiet: args.quiet,
        })
    }

    /// The most permits one request may cost: `slack + 1`.
    fn burst_permits(&self) -> u64 {
        self.in_force().map_or(u64::MAX, |l| l.burst())
    }

    /// The limit in force, as the limiter states it (`None`: unlimited).
    fn in_force(&self) -> Option<paceline::Limit> {
        match &*self.engine.borrow() {
            Engine::Unlimited => None,
            Engine::Limited { limiter, key, .. } => limiter.limit_for(key),
        }
    }

    /// The shortest a waiting request sleeps: [`COALESCE`], but at most
    /// half the banked window (`slack * T / 2`), which the sleep's lateness
    /// must fit in for the rate to hold; zero without slack.
    fn coalesce(&self) -> Duration {
        self.in_force().map_or(Duration::ZERO, |l| {
            let slack = u32::try_from(l.burst() - 1).unwrap_or(u32::MAX);
            let banked = l.rate().interval().checked_mul(slack);
            COALESCE.min(banked.unwrap_or(Duration::MAX) / 2)
        })
    }

    /// How many of `max` lines in hand to ask for together when the limit
    /// has no room now: those due within [`BATCH`] of the first, at most
    /// the burst (one request cannot cost more), at least one.
    pub fn batch(&self, max: u64) -> u64 {
        self.in_force().map_or(max, |l| {
            let interval = l.rate().interval().as_nanos().max(1);
            let due = u64::try_from(BATCH.as_nanos() / interval).map_or(1, |n| n + 1);
            due.min(l.burst()).min(max).max(1)
        })
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
        let Engine::Limited {
            limiter,
            key,
            shared,
        } = &*engine
        else {
            return Ok(max);
        };
        // A shared limit asks for one (a look first would be a second
        // round trip); one in process asks for what it has.
        let want = match shared {
            true => 1,
            false => limiter.state(key).map_or(0, |s| s.available()).min(max),
        };
        if want == 0 {
            return Ok(0);
        }
        match limiter.try_take_n(key, want) {
            Ok(_) => Ok(want),
            Err(e) if e.retry_after().is_some() => Ok(0),
            Err(e) => Err(refused(&e, *shared)),
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
        let (mut tried, mut left) = (false, cost);
        loop {
            self.reload_if_asked();
            // A batch priced under one limit may meet a smaller burst after
            // a reload: it is then paid in parts of at most the burst, all
            // before any of it goes.
            let part = left.min(self.burst_permits());
            let may_wait = tried && !drop;
            let (answer, shared) = {
                let engine = self.engine.borrow();
                let Engine::Limited {
                    limiter,
                    key,
                    shared,
                } = &*engine
                else {
                    return Ok(Admit::Go);
                };
                let answer = match may_wait {
                    false => limiter.try_take_n(key, part),
                    true => limiter.take_n_timeout(key, part, WAKE),
                };
                (answer, *shared)
            };
            let wait = match answer {
                Ok(_) if part < left => {
                    left -= part;
                    continue;
                }
                Ok(_) => return Ok(Admit::Go),
                Err(e) => match e.retry_after() {
                    Some(_) if drop => return Ok(Admit::Dropped),
                    Some(wait) => wait,
                    None => return Err(refused(&e, shared)),
                },
            };
            if self.flags.stopping() {
                return Ok(Admit::Stopped);
            }
            if !tried {
                tried = true;
                // The steady schedule begins an interval before this
                // request's first slot: the summary's rate is from there.
                let interval = self
                    .in_force()
                    .map_or(Duration::ZERO, |l| l.rate().interval());
                let cost_32 = u32::try_from(part).unwrap_or(u32::MAX);
                self.stats.held_back(wait, interval.saturating_mul(cost_32));
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

    /// Applies a new version of the limits document, if one came, and a
    /// `--rate-file` re-read if SIGHUP asked for one.
    pub fn reload_if_asked(&self) {
        if let Some(news) = self.follow.as_ref().and_then(Follow::news) {
            match news.and_then(|(limit, said)| self.apply(limit).map(|()| said)) {
                Ok(said) if !self.quiet => eprintln!("paceline: {said}"),
                Ok(_) => {}
                Err(e) => eprintln!("paceline: {e}; the limit stays as it is"),
            }
        }
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
            Engine::Limited { limiter, .. } => limiter.relimit(limit.given.rate(), limit.slack)?,
        }
        self.limit.set(Some(limit));
        Ok(())
    }
}

/// The failure a refusal no wait cures (or a server's failure) ends the
/// run with; a shared limit's says so.
fn refused(e: &Error, shared: bool) -> Failure {
    match shared {
        true => Failure(format!("shared limit: {e}")),
        false => Failure(e.to_string()),
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

/// Bytes: a byte limiter in units of [`Pace::unit`] bytes, paid first (by
/// reference: the writer borrows the CLI's one `Pace`).
impl ByteLimiter for &Pace {
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
