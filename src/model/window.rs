//! The window step: a quota of `q` permits per window of the wall clock,
//! beside [`schedule::step`](super::schedule::step)'s pacing. Like it, a
//! pure function from (state, clock reading, cost, parameters) to a
//! decision, with no atomics and no clock, for every store to run.
//!
//! # Windows
//!
//! A [`Window`] cuts Unix time (UTC) into consecutive spans, each counted
//! on its own:
//!
//! - **fixed**: every `seconds` whole seconds from the Unix epoch, the way
//!   Envoy's rate limit service counts (its second, minute, hour, day, week
//!   of 7 days, month of 30 days and year of 365 days are `Fixed` windows
//!   of 1, 60, 3 600, 86 400, 604 800, 2 592 000 and 31 536 000 seconds);
//! - **calendar**: a day, a week from a named [`Weekday`], a month or a
//!   year, from local midnight at a fixed offset from UTC (seconds east,
//!   within ±26 h): a month is a month (28 to 31 days), a year 365 or 366
//!   days, by the Gregorian rules (civil-date arithmetic written here, after
//!   Howard Hinnant's `days_from_civil`; no time zone data, no summer time).
//!
//! Times are Unix time in nanoseconds, a `u64`: the scale of
//! [`UnixClock`](crate::clock::UnixClock), on which every remote store
//! decides, and of the waits [`Admit::Within`] and [`Deny::Wait`] carry, so
//! a refusal says to the nanosecond when the next window opens. It reaches
//! the year 2554; a window that starts or ends past it starts or ends at
//! `u64::MAX` (saturated), and the window holding the epoch starts at 0 at
//! the earliest. Windows are numbered by their **index**, counted from the
//! window holding the epoch (index 0): [`Params::index_at`] is the window
//! holding an instant, [`Params::start`] and [`Params::end`] its bounds
//! (`start(i + 1) == end(i)`, `start(i) <= t < end(i)` for the window
//! holding `t`, but where `end` saturates).
//!
//! # The state: one word
//!
//! The state is the window a store last counted in and what it counted
//! there, [`State`], packed in one `u64` ([`Params::pack`]): the index in
//! the high bits, the count in the low ones. The index needs only as many
//! bits as the window holding the clock's last instant: 35 for windows of
//! a second (`(2^64 - 1) / 10^9 < 2^35`), 29 for a minute, 18 for a day, 13
//! for a month, 10 for a year; the count gets the rest, from 29 bits up
//! (a quota of up to 536 870 911 a second, 70 368 744 177 663 a day; a
//! fixed split would leave a day 29 bits, too few for bytes or tokens).
//! The split depends on the window alone, so a change of quota leaves the
//! word as it is; a quota the count's bits cannot hold is refused by
//! [`Params::new`] ([`Invalid::QuotaTooLarge`]). [`EMPTY`], the word 0,
//! has counted nothing.
//!
//! # The promises
//!
//! - [`step`]: a cost is admitted in the window that holds `now` while the
//!   count there plus the cost is at most `q`; otherwise, if the caller may
//!   wait until the next window's start and the cost fits a fresh window,
//!   it is admitted there, its slot that start; otherwise it is refused
//!   with the wait to that start ([`Deny::Wait`]), or as never admissible
//!   when it is over `q` ([`Deny::ExceedsQuota`]). No window ever counts
//!   more than `q` by takes.
//! - The clock may step back: a `now` before the stored window's start is
//!   read as that window (a window already spent is never reopened), and a
//!   permit counted there goes at its start at the earliest: its slot is
//!   `max(now, start)`, so every permit's slot lies in the window it is
//!   counted in. One that steps forward starts the window it lands in.
//! - [`settle`], as [`schedule::settle`](super::schedule::settle) is for
//!   pacing: an excess is charged to the window the settle lands in, never
//!   refused; a refund gives back at most what was booked, only while the
//!   booking's window is still the current one, never below 0.
//! - [`rebase`]: a change of limit never gives back what a window spent.
//! - [`available`] and [`next_free`] ask and consume nothing.
//! - Exact integer arithmetic; nothing here panics, whatever the input.
//!
//! `tests/windows.rs` checks these on random interleavings of calls and
//! clock moves, and the calendar against a reference day by day.

use super::calendar::{Uniform, DAY};
pub use super::calendar::{Weekday, Window, MAX_OFFSET};
use super::schedule::{Admit, Grant};

/// The state that has counted nothing: window 0, count 0.
pub const EMPTY: u64 = 0;

/// Why [`Params::new`] refused its values: each names the bad value (a
/// user meets them as the `BuildError` variants of the same names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Invalid {
    /// A fixed window of 0 seconds.
    ZeroWindow,
    /// A calendar window's offset beyond ±[`MAX_OFFSET`].
    WindowOffset {
        /// The offset given, seconds east of UTC.
        offset: i32,
    },
    /// A quota over what the state word's count holds for this window.
    QuotaTooLarge {
        /// The quota given.
        quota: u64,
        /// The largest the count holds for this window.
        max: u64,
    },
}

/// A window's state, unpacked: the window a store last counted in, and
/// what it counted there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct State {
    /// The window's index (0: the window holding the Unix epoch).
    pub index: u64,
    /// The permits counted in it.
    pub count: u64,
}

/// A refused request; the state must not change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deny {
    /// Admitted only this many ns from now: at the start of the next
    /// window (or of the stored one, when the clock reads before it).
    Wait(u64),
    /// The cost is over the quota: no window ever admits it.
    ExceedsQuota,
    /// The window it would be counted in starts past the end of the clock
    /// (`u64::MAX` ns, in the year 2554): nothing is granted there.
    Saturated,
}

/// The configuration a decision depends on: the quota and the window,
/// checked, with what the step derives from them once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    quota: u64,
    window: Window,
    /// The calendar's number of the window holding the epoch (0 for fixed).
    first: i64,
    /// The index of the window holding the clock's last instant.
    last: u64,
    /// The count's bits in the word, `1..=63`.
    count_bits: u32,
    /// For a window of one length in nanoseconds (fixed, a day, a week):
    /// that length and where windows start; `None` for a month or a year
    /// (or a fixed window too long for a `u64` of ns), which the calendar
    /// numbers.
    uniform: Option<Uniform>,
}

impl Params {
    /// `quota` permits per `window`: refused when a fixed window is 0
    /// seconds, a calendar window's offset is beyond ±[`MAX_OFFSET`], or
    /// the quota is over what the count's bits hold for this window
    /// ([`max_quota`](Self::max_quota)). A quota of 0 is valid: nothing
    /// but a cost of 0 is ever admitted.
    pub fn new(quota: u64, window: Window) -> Result<Params, Invalid> {
        if window == (Window::Fixed { seconds: 0 }) {
            return Err(Invalid::ZeroWindow);
        }
        let offset = window.offset();
        if offset.unsigned_abs() > MAX_OFFSET.unsigned_abs() {
            return Err(Invalid::WindowOffset { offset });
        }
        let mut p = Params {
            quota,
            window,
            first: 0,
            last: 0,
            count_bits: 63,
            uniform: Uniform::of(window),
        };
        p.first = window.number(i64::from(offset).div_euclid(DAY));
        p.last = p.index_at(u64::MAX);
        let index_bits = (u64::BITS - p.last.leading_zeros()).max(1);
        p.count_bits = u64::BITS - index_bits;
        if quota > p.max_quota() {
            return Err(Invalid::QuotaTooLarge {
                quota,
                max: p.max_quota(),
            });
        }
        Ok(p)
    }

    /// `q`, the permits each window admits.
    pub const fn quota(self) -> u64 {
        self.quota
    }

    /// The window.
    pub const fn window(self) -> Window {
        self.window
    }

    /// The largest count the word holds for this window, and so the
    /// largest quota: `2^count_bits - 1`.
    pub const fn max_quota(self) -> u64 {
        (1 << self.count_bits) - 1
    }

    /// How many of the word's low bits hold the count (the rest hold the
    /// index).
    pub const fn count_bits(self) -> u32 {
        self.count_bits
    }

    /// The index of the window holding the clock's last instant
    /// (`u64::MAX` ns): no later window is ever granted.
    pub const fn last_index(self) -> u64 {
        self.last
    }

    /// The calendar's number of the window holding the epoch (days, weeks,
    /// months or years from the calendar's origins; 0 for a fixed window):
    /// a calendar window's index is its number less this. For a server
    /// that numbers windows itself.
    pub const fn first(self) -> i64 {
        self.first
    }

    /// The same window with another quota, checked as [`new`](Self::new)
    /// checks it.
    pub fn with_quota(self, quota: u64) -> Result<Params, Invalid> {
        if quota > self.max_quota() {
            return Err(Invalid::QuotaTooLarge {
                quota,
                max: self.max_quota(),
            });
        }
        Ok(Params { quota, ..self })
    }

    /// The index of the window holding `t` (Unix time, ns).
    #[inline]
    pub fn index_at(self, t: u64) -> u64 {
        match self.uniform {
            Some(uniform) => uniform.index_at(t),
            None => self.window.index_by_calendar(t, self.first),
        }
    }

    /// When the window `index` starts, Unix time in ns: 0 at the earliest
    /// (the window holding the epoch may have begun before it), `u64::MAX`
    /// for a window starting past the clock's end.
    #[inline]
    pub fn start(self, index: u64) -> u64 {
        match self.uniform {
            Some(uniform) => uniform.start(index),
            None => self.window.start_by_calendar(index, self.first),
        }
    }

    /// When the window `index` ends: the next one's start (`u64::MAX`,
    /// saturated, for the window holding the clock's end and later ones).
    #[inline]
    pub fn end(self, index: u64) -> u64 {
        self.start(index.saturating_add(1))
    }

    /// [`start`](Self::start) and [`end`](Self::end) of window `index`.
    #[inline(always)]
    pub fn bounds(self, index: u64) -> (u64, u64) {
        match self.uniform {
            Some(uniform) => uniform.bounds(index),
            None => (self.start(index), self.end(index)),
        }
    }

    /// The word holding `state`, or `None` when its index or count does
    /// not fit the bits this window gives them.
    pub fn pack(self, state: State) -> Option<u64> {
        let fits = state.index >> (u64::BITS - self.count_bits) == 0;
        (fits && state.count <= self.max_quota()).then(|| self.word(state.index, state.count))
    }

    /// The state a word holds.
    pub const fn unpack(self, word: u64) -> State {
        State {
            index: word >> self.count_bits,
            count: word & self.max_quota(),
        }
    }

    /// The window a take at `now` counts in, and what it has counted
    /// there: the stored window if it holds `now` or lies ahead of it (a
    /// clock stepped back, or permits booked in the next window), else the
    /// window holding `now`, with nothing counted.
    #[inline]
    pub fn current(self, word: u64, now: u64) -> State {
        let stored = self.unpack(word);
        // `index_at(now) <= i` exactly when `now` is before window `i`'s
        // end, or `i` is the last window (whose end saturates): a product
        // for a window of one length, where `index_at` divides.
        if now < self.end(stored.index) || stored.index >= self.last {
            return stored;
        }
        State {
            index: self.index_at(now),
            count: 0,
        }
    }

    /// The word for an index and a count that fit (the index from a word
    /// or at most `last`, the count at most `max_quota`).
    #[inline]
    const fn word(self, index: u64, count: u64) -> u64 {
        (index << self.count_bits) | count
    }
}

/// The one window step: the decision for a request of `cost` permits at
/// `now` (Unix time, ns) on the state `word`.
///
/// Counted in the [current](Params::current) window while its count plus
/// `cost` is at most the quota, its slot `now` (or the window's start, when
/// the clock reads before it); otherwise counted in the next window, its
/// slot that window's start, if `admit` allows the wait. A cost of 0 is
/// admitted at `now` and stores nothing; a cost over the quota is
/// [`Deny::ExceedsQuota`] whatever the wait; a window past the clock's end
/// is [`Deny::Saturated`]. The grant's `next` is the word to store.
#[inline(always)]
pub fn step(word: u64, now: u64, cost: u64, p: Params, admit: Admit) -> Result<Grant, Deny> {
    if cost == 0 {
        return Ok(Grant {
            prev: word,
            slot: now,
            next: word,
        });
    }
    if cost > p.quota {
        return Err(Deny::ExceedsQuota);
    }
    let current = p.current(word, now);
    let (index, count) = if current.count <= p.quota - cost {
        (current.index, current.count + cost)
    } else {
        (current.index.saturating_add(1), cost)
    };
    if index > p.last {
        return Err(Deny::Saturated);
    }
    let slot = p.start(index).max(now);
    if let Admit::Within(max) = admit {
        let wait = slot - now;
        if wait > max {
            return Err(Deny::Wait(wait));
        }
    }
    Ok(Grant {
        prev: word,
        slot,
        next: p.word(index, count),
    })
}

/// The state after a booking of `booked` permits, whose permit went at
/// `went` (its grant's slot), turns out at `now` to have cost `actual`:
///
/// - **as booked**: `word`, unchanged;
/// - **more**: the excess is counted in the [current](Params::current)
///   window at `now` (the window the settle lands in), whatever its count:
///   never refused, saturating at [`max_quota`](Params::max_quota), which
///   leaves nothing in that window;
/// - **less**: the difference comes off the count, never below 0, only
///   while the booking's window (the one holding `went`) is still the
///   current one; once it has closed, what it spent stays spent.
///
/// As with [`schedule::settle`](super::schedule::settle), a store runs it
/// in the parameters in force, and a refund of a booking made before a
/// change of the parameters is the caller's to drop.
pub fn settle(word: u64, now: u64, went: u64, booked: u64, actual: u64, p: Params) -> u64 {
    if actual == booked {
        return word;
    }
    let current = p.current(word, now);
    if actual > booked {
        let count = current.count.saturating_add(actual - booked);
        return p.word(current.index, count.min(p.max_quota()));
    }
    let stored = p.unpack(word);
    if stored.index != current.index || p.index_at(went) != stored.index {
        return word;
    }
    p.word(
        stored.index,
        stored.count - (booked - actual).min(stored.count),
    )
}

/// The state after the parameters change from `old` to `new` at `now`.
///
/// A change of quota alone leaves the word as it is: the count stays and
/// the new quota applies to it, so a quota lowered below the count leaves
/// nothing in this window, and one raised adds the difference. A change of
/// window carries what the current window (under `old`) has counted into
/// the window of `new` holding `now` (or the stored window's start, when
/// the clock reads before it): what was spent is never given back, even
/// when part of it was spent before the new window began. A state whose
/// window has closed counts nothing: [`EMPTY`].
pub fn rebase(word: u64, now: u64, old: Params, new: Params) -> u64 {
    if old.window == new.window {
        return word;
    }
    let stored = old.unpack(word);
    if stored.index < old.index_at(now) || stored.count == 0 {
        return EMPTY;
    }
    let at = old.start(stored.index).max(now);
    new.word(new.index_at(at), stored.count.min(new.max_quota()))
}

/// How many permits one request could take at `now` without waiting: the
/// quota less the current window's count, 0 while the clock reads before
/// the stored window's start.
pub fn available(word: u64, now: u64, p: Params) -> u64 {
    let current = p.current(word, now);
    if current.index > p.last || p.start(current.index) > now {
        return 0;
    }
    p.quota.saturating_sub(current.count)
}

/// What a state leaves at `now`, in one reading: [`available`], and
/// [`next_free`] (`u64::MAX` for never), and how long until the current
/// window ends (0 when it has counted nothing), ns. The same numbers as
/// those calls, with the current window found once.
#[inline(always)]
pub fn left(word: u64, now: u64, p: Params) -> (u64, u64, u64) {
    let current = p.current(word, now);
    if current.index > p.last {
        return (0, u64::MAX, 0);
    }
    let (start, end) = (p.start(current.index), p.end(current.index));
    let available = if start > now {
        0
    } else {
        p.quota.saturating_sub(current.count)
    };
    // As `step` would for a cost of 1: this window while it has room,
    // else the next one's start (`end`), if there is a next one.
    let next_free = if p.quota == 0 {
        u64::MAX
    } else if current.count < p.quota {
        start.max(now) - now
    } else if current.index >= p.last {
        u64::MAX
    } else {
        end.max(now) - now
    };
    let reset = if current.count == 0 {
        0
    } else {
        end.saturating_sub(now)
    };
    (available, next_free, reset)
}

/// What [`take`] answers: [`step`]'s grant with [`left`]'s, or its refusal.
pub type Taking = Result<(Grant, (u64, u64, u64)), Deny>;

/// [`step`], and on a grant [`left`] of its `next` at `now`: the stored
/// window's bounds found once when it is current and open (a busy key's
/// every take but its window's first), else both in turn.
#[inline(always)]
pub fn take(word: u64, now: u64, cost: u64, p: Params, admit: Admit) -> Taking {
    let stored = p.unpack(word);
    if cost > 0 && cost <= p.quota && stored.index < p.last {
        let (start, end) = p.bounds(stored.index);
        // The stored window holds `now`: it is the current one, and open.
        if start <= now && now < end {
            let to_end = end - now;
            if stored.count <= p.quota - cost {
                let available = p.quota - stored.count - cost;
                let next_free = if available > 0 { 0 } else { to_end };
                let grant = Grant {
                    prev: word,
                    slot: now,
                    // The count is the word's low bits.
                    next: word + cost,
                };
                return Ok((grant, (available, next_free, to_end)));
            }
            // Full: the next window (not past the clock's end) at `end`.
            if matches!(admit, Admit::Within(max) if to_end > max) {
                return Err(Deny::Wait(to_end));
            }
        }
    }
    take_in_full(word, now, cost, p, admit)
}

/// [`take`] past its common case (a busy window with room), out of line.
#[cold]
#[inline(never)]
fn take_in_full(word: u64, now: u64, cost: u64, p: Params, admit: Admit) -> Taking {
    let grant = step(word, now, cost, p, admit)?;
    Ok((grant, left(grant.next, now, p)))
}

/// How long until a request of cost 1 would be admitted, ns (0: now), or
/// `None` if it never would be (a quota of 0, or a next window past the
/// clock's end).
pub fn next_free(word: u64, now: u64, p: Params) -> Option<u64> {
    step(word, now, 1, p, Admit::Always)
        .ok()
        .map(|g| g.slot - now)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A xorshift generator from `seed` (not 0): the tests' random words
    /// and times, the same in every run.
    fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    impl Params {
        fn index_by_calendar(self, t: u64) -> u64 {
            self.window.index_by_calendar(t, self.first)
        }

        fn start_by_calendar(self, index: u64) -> u64 {
            self.window.start_by_calendar(index, self.first)
        }
    }

    #[test]
    fn left_reads_what_the_separate_questions_read() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1du64);
        let windows = [
            Window::SECOND,
            Window::Fixed { seconds: 90 },
            Window::Day { offset: 7_200 },
            Window::Month { offset: -3_600 },
        ];
        for w in windows {
            for quota in [0, 1, 3, 1_000] {
                let p = Params::new(quota, w).unwrap();
                for _ in 0..3_000 {
                    let t = next();
                    // Near `t`'s window or anywhere, counts about the quota.
                    let index = match next() % 3 {
                        0 => p.index_at(t),
                        1 => p.index_at(t).saturating_add(next() % 3).min(p.last_index()),
                        _ => next() % (p.last_index() + 1),
                    };
                    let count = (next() % (quota + 2)).min(p.max_quota());
                    let word = p.word(index, count);
                    let current = p.current(word, t);
                    let reset = if current.count == 0 {
                        0
                    } else {
                        p.end(current.index).saturating_sub(t)
                    };
                    let expected = (
                        available(word, t, p),
                        next_free(word, t, p).unwrap_or(u64::MAX),
                        reset,
                    );
                    assert_eq!(
                        left(word, t, p),
                        expected,
                        "{w:?} q={quota} word={word} t={t}"
                    );
                }
            }
        }
    }

    #[test]
    fn take_answers_as_step_then_left() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15u64);
        let windows = [
            Window::SECOND,
            Window::Fixed { seconds: 90 },
            Window::Day { offset: 0 },
            Window::Day { offset: -7_200 },
            Window::Month { offset: 3_600 },
        ];
        let (mut fast, mut refused) = (0, 0);
        for w in windows {
            for quota in [0, 1, 3, 1_000] {
                let p = Params::new(quota, w).unwrap();
                for _ in 0..3_000 {
                    let t = match next() % 4 {
                        0 => next() % (p.end(0) + 2),
                        _ => next(),
                    };
                    let index = match next() % 4 {
                        0 | 1 => p.index_at(t),
                        2 => p.index_at(t).saturating_add(next() % 3).min(p.last_index()),
                        _ => next() % (p.last_index() + 1),
                    };
                    let count = (next() % (quota + 2)).min(p.max_quota());
                    let word = p.word(index, count);
                    let cost = next() % (quota + 3);
                    for admit in [
                        Admit::Within(0),
                        Admit::Within(next() % (2 * p.end(0))),
                        Admit::Always,
                    ] {
                        let expected =
                            step(word, t, cost, p, admit).map(|g| (g, left(g.next, t, p)));
                        fast += u64::from(expected.is_ok_and(|(g, _)| g.slot == t));
                        refused += u64::from(matches!(expected, Err(Deny::Wait(_))));
                        assert_eq!(
                            take(word, t, cost, p, admit),
                            expected,
                            "{w:?} q={quota} word={word} t={t} cost={cost} {admit:?}"
                        );
                    }
                }
            }
        }
        // Both of the shortcut's answers were met, many times.
        assert!(fast > 10_000 && refused > 1_000, "{fast} {refused}");
    }

    #[test]
    fn bounds_are_the_start_and_the_end() {
        let windows = [
            Window::SECOND,
            Window::Fixed { seconds: u64::MAX },
            Window::Day { offset: 0 },
            Window::Day { offset: 7_200 },
            Window::Week {
                starts: Weekday::Monday,
                offset: -MAX_OFFSET,
            },
            Window::Year { offset: 0 },
        ];
        for w in windows {
            let p = p(1, w);
            let last = p.last_index();
            let near = [last.saturating_sub(1), last, last.saturating_add(1)];
            for index in [0, 1, 2, 1_000, u64::MAX - 1, u64::MAX]
                .into_iter()
                .chain(near)
            {
                assert_eq!(
                    p.bounds(index),
                    (p.start(index), p.end(index)),
                    "{w:?} {index}"
                );
            }
        }
    }

    #[test]
    fn windows_of_one_length_number_as_the_calendar_does() {
        let mut windows = vec![
            Window::SECOND,
            Window::MINUTE,
            Window::HOUR,
            Window::Fixed { seconds: 90 },
            Window::Fixed {
                seconds: 30 * 86_400,
            },
            Window::Fixed {
                seconds: 365 * 86_400,
            },
            Window::Fixed {
                seconds: 18_446_744_073,
            },
        ];
        let days = [
            Weekday::Monday,
            Weekday::Tuesday,
            Weekday::Wednesday,
            Weekday::Thursday,
            Weekday::Friday,
            Weekday::Saturday,
            Weekday::Sunday,
        ];
        for offset in [
            -MAX_OFFSET,
            -5 * 3_600 - 1_800,
            -1,
            0,
            1,
            3_600,
            86_399,
            MAX_OFFSET,
        ] {
            windows.push(Window::Day { offset });
            for starts in days {
                windows.push(Window::Week { starts, offset });
            }
        }
        // A generator of times across the clock, and each window's edges.
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15u64);
        for w in windows {
            let p = Params::new(1, w).unwrap();
            assert!(p.uniform.is_some(), "{w:?}");
            let mut times: Vec<u64> = (0..2_000).map(|_| next()).collect();
            times.extend([0, 1, u64::MAX - 1, u64::MAX, 1_795_996_790 * S]);
            for i in [0, 1, 2, 3, 20_000, p.last_index() - 1, p.last_index()] {
                let start = p.start_by_calendar(i);
                times.extend([start, start.saturating_sub(1), start.saturating_add(1)]);
            }
            for t in times {
                let i = p.index_at(t);
                assert_eq!(i, p.index_by_calendar(t), "{w:?} at {t}");
                for j in [i.saturating_sub(1), i, i.saturating_add(1)] {
                    assert_eq!(p.start(j), p.start_by_calendar(j), "{w:?} start of {j}");
                    // `current` by the end of the stored window, as by
                    // the index of `t`.
                    let word = p.word(j.min(p.last_index()), 1);
                    let stored = p.unpack(word);
                    let by_index = if stored.index >= p.index_by_calendar(t) {
                        stored
                    } else {
                        State {
                            index: p.index_by_calendar(t),
                            count: 0,
                        }
                    };
                    assert_eq!(p.current(word, t), by_index, "{w:?} at {t}, stored {j}");
                }
            }
            assert_eq!(p.start(u64::MAX), p.start_by_calendar(u64::MAX), "{w:?}");
        }
        // A month and a year keep the calendar's own numbering, and their
        // `current` agrees with it as well.
        for w in [Window::Month { offset: 0 }, Window::Year { offset: 3_600 }] {
            let p = Params::new(1, w).unwrap();
            assert_eq!(p.uniform, None);
            for _ in 0..2_000 {
                let (t, j) = (next(), next() % (p.last_index() + 1));
                let word = p.word(j, 1);
                let at = p.index_by_calendar(t);
                let expected = if j >= at {
                    p.unpack(word)
                } else {
                    State {
                        index: at,
                        count: 0,
                    }
                };
                assert_eq!(p.current(word, t), expected, "{w:?} at {t}, stored {j}");
            }
        }
    }

    /// Nanoseconds in a second.
    const S: u64 = 1_000_000_000;
    /// Unix times of midnight UTC, seconds.
    const Y2000_02_01: u64 = 949_363_200;
    const Y2000_03_01: u64 = 951_868_800;
    const Y2023_02_01: u64 = 1_675_209_600;
    const Y2023_03_01: u64 = 1_677_628_800;
    const Y2024_01_01: u64 = 1_704_067_200;
    const Y2024_02_01: u64 = 1_706_745_600;
    const Y2024_02_29: u64 = 1_709_164_800;
    const Y2024_03_01: u64 = 1_709_251_200;
    const Y2025_01_01: u64 = 1_735_689_600;
    const Y2100_01_01: u64 = 4_102_444_800;
    const Y2100_02_01: u64 = 4_105_123_200;
    const Y2100_03_01: u64 = 4_107_542_400;
    const Y2101_01_01: u64 = 4_133_980_800;
    const Y2400_02_01: u64 = 13_572_144_000;
    const Y2400_03_01: u64 = 13_574_649_600;

    fn p(quota: u64, window: Window) -> Params {
        Params::new(quota, window).unwrap()
    }

    /// The window holding `t` s, as (start, end) in s.
    fn bounds(p: Params, t: u64) -> (u64, u64) {
        let i = p.index_at(t * S);
        (p.start(i) / S, p.end(i) / S)
    }

    #[test]
    fn fixed_windows_are_envoy_s_units_from_the_epoch() {
        for seconds in [1, 60, 3_600, 86_400, 604_800, 2_592_000, 31_536_000, 7] {
            let p = p(1, Window::Fixed { seconds });
            for i in [0, 1, 2, 345] {
                let start = i * seconds * S;
                assert_eq!(p.start(i), start);
                assert_eq!(p.end(i), start + seconds * S);
                assert_eq!(p.index_at(start), i);
                assert_eq!(p.index_at(start + seconds * S - 1), i, "the last ns");
                assert_eq!(p.index_at(start + seconds * S), i + 1);
            }
        }
        // Envoy's month is 30 days: 2024-02-29 lies in the window from
        // 2024-02-25 (day 19778 = 30 * 659 + 8).
        let envoy_month = p(1, Window::Fixed { seconds: 2_592_000 });
        assert_eq!(bounds(envoy_month, Y2024_02_29).0, 659 * 2_592_000);
    }

    #[test]
    fn a_month_is_a_month_and_february_has_its_leap_day() {
        let month = p(1, Window::Month { offset: 0 });
        assert_eq!(bounds(month, Y2024_02_29), (Y2024_02_01, Y2024_03_01));
        assert_eq!(month.index_at(Y2024_02_29 * S), 54 * 12 + 1);
        assert_eq!(bounds(month, Y2024_03_01 - 1), (Y2024_02_01, Y2024_03_01));
        assert_eq!(bounds(month, Y2024_03_01).0, Y2024_03_01);
        assert_eq!(
            month.index_at(Y2024_03_01 * S - 1),
            54 * 12 + 1,
            "the last ns"
        );
        let february = |first| bounds(month, first).1 - first;
        for (leap, first) in [
            (true, Y2024_02_01),
            (true, Y2000_02_01),
            (true, Y2400_02_01),
        ] {
            assert_eq!(february(first) == 29 * 86_400, leap, "{first}");
        }
        for first in [Y2023_02_01, Y2100_02_01] {
            assert_eq!(february(first), 28 * 86_400, "{first}");
        }
        assert_eq!(bounds(month, Y2000_02_01 + 86_400).1, Y2000_03_01);
        assert_eq!(bounds(month, Y2023_02_01).1, Y2023_03_01);
        assert_eq!(bounds(month, Y2100_02_01).1, Y2100_03_01);
        assert_eq!(bounds(month, Y2400_02_01).1, Y2400_03_01);
        // December to January.
        assert_eq!(
            bounds(month, Y2025_01_01 - 1),
            (Y2025_01_01 - 31 * 86_400, Y2025_01_01)
        );
    }

    #[test]
    fn a_year_is_365_or_366_days() {
        let year = p(1, Window::Year { offset: 0 });
        assert_eq!(bounds(year, Y2024_02_29), (Y2024_01_01, Y2025_01_01));
        assert_eq!(Y2025_01_01 - Y2024_01_01, 366 * 86_400);
        assert_eq!(bounds(year, Y2100_03_01), (Y2100_01_01, Y2101_01_01));
        assert_eq!(Y2101_01_01 - Y2100_01_01, 365 * 86_400);
        assert_eq!(year.index_at(Y2024_02_29 * S), 54);
    }

    #[test]
    fn a_week_starts_on_its_weekday() {
        use Weekday::*;
        // 2024-02-29 was a Thursday.
        let days = [
            Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday,
        ];
        for (k, starts) in days.into_iter().enumerate() {
            let week = p(1, Window::Week { starts, offset: 0 });
            let back = (3 + 7 - k as u64) % 7;
            let start = Y2024_02_29 - back * 86_400;
            assert_eq!(
                bounds(week, Y2024_02_29),
                (start, start + 7 * 86_400),
                "{starts:?}"
            );
            assert_eq!(bounds(week, start + 7 * 86_400).0, start + 7 * 86_400);
        }
    }

    #[test]
    fn an_offset_moves_local_midnight() {
        let t = Y2024_02_29 + 3 * 3_600; // 03:00 UTC
        let east = p(1, Window::Day { offset: 3_600 });
        assert_eq!(
            bounds(east, t),
            (Y2024_02_29 - 3_600, Y2024_02_29 + 23 * 3_600)
        );
        // At UTC-5 it is 22:00 on the 28th.
        let west = p(1, Window::Day { offset: -5 * 3_600 });
        let start = Y2024_02_29 - 86_400 + 5 * 3_600;
        assert_eq!(bounds(west, t), (start, start + 86_400));
        // A month at UTC+14 starts at 10:00 UTC on the day before.
        let month = p(1, Window::Month { offset: 14 * 3_600 });
        assert_eq!(
            bounds(month, Y2024_03_01 - 3_600).0,
            Y2024_03_01 - 14 * 3_600
        );
        for offset in [MAX_OFFSET, -MAX_OFFSET] {
            assert!(Params::new(1, Window::Year { offset }).is_ok());
        }
        for offset in [MAX_OFFSET + 1, -MAX_OFFSET - 1, i32::MIN, i32::MAX] {
            let week = Window::Week {
                starts: Weekday::Sunday,
                offset,
            };
            assert_eq!(Params::new(1, week), Err(Invalid::WindowOffset { offset }));
        }
    }

    #[test]
    fn the_window_holding_the_epoch_is_index_0_and_starts_at_0_at_the_earliest() {
        for offset in [-MAX_OFFSET, -5 * 3_600, -1, 0, 1, 3_600, MAX_OFFSET] {
            for window in [
                Window::Day { offset },
                Window::Week {
                    starts: Weekday::Sunday,
                    offset,
                },
                Window::Month { offset },
                Window::Year { offset },
            ] {
                let p = p(1, window);
                assert_eq!((p.index_at(0), p.start(0)), (0, 0), "{window:?}");
                let end = p.end(0);
                assert!(end > 0 && p.index_at(end - 1) == 0 && p.index_at(end) == 1);
            }
        }
        let west = p(1, Window::Day { offset: -5 * 3_600 });
        assert_eq!(west.end(0), 5 * 3_600 * S);
    }

    #[test]
    fn the_word_splits_by_the_window() {
        let bits = |window| p(1, window).count_bits();
        assert_eq!(bits(Window::SECOND), 29, "35 bits of index");
        assert_eq!(bits(Window::MINUTE), 35);
        assert_eq!(bits(Window::Day { offset: 0 }), 46);
        assert_eq!(bits(Window::Month { offset: 0 }), 51);
        assert_eq!(bits(Window::Year { offset: MAX_OFFSET }), 54);
        assert_eq!(bits(Window::Fixed { seconds: u64::MAX }), 63);
        assert_eq!(p(1, Window::SECOND).last_index(), u64::MAX / S);
        let max = (1 << 29) - 1;
        assert_eq!(p(max, Window::SECOND).max_quota(), max);
        assert_eq!(
            Params::new(max + 1, Window::SECOND),
            Err(Invalid::QuotaTooLarge {
                quota: max + 1,
                max
            })
        );
        assert_eq!(
            Params::new(u64::MAX, Window::Fixed { seconds: u64::MAX }),
            Err(Invalid::QuotaTooLarge {
                quota: u64::MAX,
                max: u64::MAX >> 1
            })
        );
        assert_eq!(
            Params::new(1, Window::Fixed { seconds: 0 }),
            Err(Invalid::ZeroWindow)
        );
        let p = p(max, Window::SECOND);
        let state = State {
            index: p.last_index(),
            count: max,
        };
        assert_eq!(p.unpack(p.pack(state).unwrap()), state);
        assert_eq!(
            p.pack(State {
                count: max + 1,
                ..state
            }),
            None
        );
        assert_eq!(
            p.pack(State {
                index: 1 << 35,
                count: 0
            }),
            None
        );
        assert_eq!(p.unpack(EMPTY), State { index: 0, count: 0 });
    }

    #[test]
    fn takes_fill_the_window_then_wait_for_the_next() {
        let p = p(3, Window::MINUTE);
        let now = 90 * S; // window 1: [60 s, 120 s)
        let mut word = EMPTY;
        for left in (0..3).rev() {
            word = step(word, now, 1, p, Admit::Within(0)).unwrap().next;
            assert_eq!(available(word, now, p), left);
        }
        assert_eq!(
            step(word, now, 1, p, Admit::Within(0)),
            Err(Deny::Wait(30 * S))
        );
        assert_eq!(
            step(word, now, 1, p, Admit::Within(30 * S - 1)),
            Err(Deny::Wait(30 * S))
        );
        assert_eq!(next_free(word, now, p), Some(30 * S));
        // A caller that may wait is counted in the next window, at its start.
        let g = step(word, now, 2, p, Admit::Within(30 * S)).unwrap();
        assert_eq!(g.slot, 120 * S);
        assert_eq!(p.unpack(g.next), State { index: 2, count: 2 });
        // Until it starts, nothing goes at once, even with room left there.
        assert_eq!(available(g.next, now, p), 0);
        assert_eq!(
            step(g.next, now, 1, p, Admit::Within(0)),
            Err(Deny::Wait(30 * S))
        );
        let h = step(g.next, now, 1, p, Admit::Always).unwrap();
        assert_eq!((h.slot, p.unpack(h.next).count), (120 * S, 3));
        // Full too: the one after.
        let k = step(h.next, now, 1, p, Admit::Always).unwrap();
        assert_eq!(
            (k.slot, p.unpack(k.next)),
            (180 * S, State { index: 3, count: 1 })
        );
        // A forward step of the clock starts the window it lands in.
        assert_eq!(available(k.next, 1_000 * S, p), 3);
        assert_eq!(available(k.next, 180 * S, p), 2);
    }

    #[test]
    fn a_cost_over_the_quota_is_never_admitted_and_a_cost_of_0_stores_nothing() {
        let p = p(5, Window::HOUR);
        for admit in [Admit::Within(0), Admit::Within(u64::MAX), Admit::Always] {
            assert_eq!(step(EMPTY, 0, 6, p, admit), Err(Deny::ExceedsQuota));
            assert_eq!(step(EMPTY, 0, u64::MAX, p, admit), Err(Deny::ExceedsQuota));
        }
        let full = step(EMPTY, S, 5, p, Admit::Within(0)).unwrap().next;
        let g = step(full, S, 0, p, Admit::Within(0)).unwrap();
        assert_eq!((g.prev, g.slot, g.next), (full, S, full));
        // A quota of 0: nothing but a cost of 0, ever.
        let zero = p.with_quota(0).unwrap();
        assert_eq!(
            step(EMPTY, S, 1, zero, Admit::Always),
            Err(Deny::ExceedsQuota)
        );
        assert_eq!(step(EMPTY, S, 0, zero, Admit::Always).unwrap().next, EMPTY);
        assert_eq!(
            (available(EMPTY, S, zero), next_free(EMPTY, S, zero)),
            (0, None)
        );
    }

    #[test]
    fn a_clock_stepping_back_never_reopens_a_spent_window() {
        let p = p(2, Window::MINUTE);
        let word = step(EMPTY, 130 * S, 2, p, Admit::Within(0)).unwrap().next; // window 2
                                                                               // Back into window 1: read as window 2, spent.
        assert_eq!(p.current(word, 100 * S), State { index: 2, count: 2 });
        assert_eq!(
            step(word, 100 * S, 1, p, Admit::Within(0)),
            Err(Deny::Wait(80 * S))
        );
        let g = step(word, 100 * S, 1, p, Admit::Always).unwrap();
        assert_eq!(
            (g.slot, p.unpack(g.next)),
            (180 * S, State { index: 3, count: 1 })
        );
        // With room in the stored window, a permit goes at its start.
        let word = step(EMPTY, 130 * S, 1, p, Admit::Within(0)).unwrap().next;
        assert_eq!(available(word, 100 * S, p), 0);
        let g = step(word, 100 * S, 1, p, Admit::Within(20 * S)).unwrap();
        assert_eq!(
            (g.slot, p.unpack(g.next)),
            (120 * S, State { index: 2, count: 2 })
        );
        assert_eq!(next_free(word, 100 * S, p), Some(20 * S));
    }

    #[test]
    fn a_settle_charges_an_excess_and_refunds_only_in_the_booking_s_window() {
        let p = p(10, Window::MINUTE);
        let g = step(EMPTY, 70 * S, 4, p, Admit::Within(0)).unwrap();
        let (went, word) = (g.slot, g.next);
        assert_eq!(settle(word, 80 * S, went, 4, 4, p), word);
        // Less: the difference comes back in the window, never below 0.
        let less = settle(word, 80 * S, went, 4, 1, p);
        assert_eq!(p.unpack(less), State { index: 1, count: 1 });
        assert_eq!(p.unpack(settle(less, 80 * S, went, 4, 0, p)).count, 0);
        // After the window has closed, what it spent stays spent.
        assert_eq!(settle(word, 120 * S, went, 4, 0, p), word);
        // Nor does a refund of a booking from another window come off.
        assert_eq!(settle(word, 80 * S, 10 * S, 4, 0, p), word);
        // More: charged to the window the settle lands in, never refused.
        let more = settle(word, 80 * S, went, 4, 9, p);
        assert_eq!(p.unpack(more), State { index: 1, count: 9 });
        let over = settle(more, 80 * S, went, 1, 30, p);
        assert_eq!(
            p.unpack(over),
            State {
                index: 1,
                count: 38
            }
        );
        assert_eq!(available(over, 80 * S, p), 0);
        let later = settle(word, 200 * S, went, 4, 9, p);
        assert_eq!(p.unpack(later), State { index: 3, count: 5 });
        // Saturating at the count's largest.
        let most = settle(word, 80 * S, went, 0, u64::MAX, p);
        assert_eq!(p.unpack(most).count, p.max_quota());
    }

    #[test]
    fn a_change_of_limit_never_gives_back_what_a_window_spent() {
        let p8 = p(8, Window::Day { offset: 0 });
        let now = Y2024_02_29 * S + 3_600 * S;
        let word = step(EMPTY, now, 6, p8, Admit::Within(0)).unwrap().next;
        // The quota alone: the word stays, the new quota applies.
        let p4 = p8.with_quota(4).unwrap();
        assert_eq!(rebase(word, now, p8, p4), word);
        assert_eq!(available(word, now, p4), 0);
        assert_eq!(available(word, now, p8.with_quota(10).unwrap()), 4);
        // Another window: the count goes into the new window holding now.
        let hour = p(8, Window::HOUR);
        let moved = rebase(word, now, p8, hour);
        assert_eq!(
            hour.unpack(moved),
            State {
                index: hour.index_at(now),
                count: 6
            }
        );
        assert_eq!(available(moved, now, hour), 2);
        // A window closed spent nothing now.
        assert_eq!(rebase(word, now + 86_400 * S, p8, hour), EMPTY);
        // A count over the new word's holds saturates there: nothing left.
        let big = p((1 << 40) + 5, Window::Day { offset: 0 });
        let word = step(EMPTY, now, 1 << 40, big, Admit::Within(0))
            .unwrap()
            .next;
        let tight = p((1 << 29) - 1, Window::SECOND);
        let moved = rebase(word, now, big, tight);
        assert_eq!(tight.unpack(moved).count, tight.max_quota());
        assert_eq!(available(moved, now, tight), 0);
    }

    #[test]
    fn nothing_panics_at_the_extremes() {
        let windows = [
            Window::SECOND,
            Window::Fixed { seconds: u64::MAX },
            Window::Day {
                offset: -MAX_OFFSET,
            },
            Window::Week {
                starts: Weekday::Saturday,
                offset: MAX_OFFSET,
            },
            Window::Month { offset: MAX_OFFSET },
            Window::Year {
                offset: -MAX_OFFSET,
            },
        ];
        let edges = [0, 1, S, u64::MAX / 2, u64::MAX - 1, u64::MAX];
        for window in windows {
            let largest = Params::new(1, window).unwrap().max_quota();
            for quota in [0, 1, largest] {
                let p = p(quota, window);
                for &word in &edges {
                    for &now in &edges {
                        for &cost in &edges {
                            for admit in [Admit::Within(0), Admit::Within(u64::MAX), Admit::Always]
                            {
                                if let Ok(g) = step(word, now, cost, p, admit) {
                                    assert!(g.slot >= now);
                                }
                            }
                            let _ = settle(word, now, cost, cost / 2, cost, p);
                            let _ = settle(word, now, now, cost, cost / 2, p);
                        }
                        let _ = (available(word, now, p), next_free(word, now, p));
                        let _ = (p.index_at(now), p.start(word), p.end(word));
                        let _ = rebase(word, now, p, Params::new(1, Window::SECOND).unwrap());
                    }
                }
            }
        }
    }

    #[test]
    fn windows_past_the_clock_s_end_start_at_its_end_and_grant_nothing() {
        let year = p(1, Window::Year { offset: 0 });
        // The year 2554 holds the clock's last instant; 10000 is far past.
        assert_eq!(year.last_index(), 2554 - 1970);
        assert_eq!(year.start(2554 - 1970), 18_429_292_800 * S);
        assert_eq!(year.end(2554 - 1970), u64::MAX);
        assert_eq!(year.start(10_000 - 1970), u64::MAX);
        assert_eq!(year.start(u64::MAX), u64::MAX);
        // The last window full: the next is not granted, whatever the wait.
        let full = step(EMPTY, u64::MAX, 1, year, Admit::Within(0))
            .unwrap()
            .next;
        assert_eq!(
            step(full, u64::MAX, 1, year, Admit::Always),
            Err(Deny::Saturated)
        );
        assert_eq!(next_free(full, u64::MAX - S, year), None);
        // A stored index past the last window (no store writes one) too.
        let beyond = year
            .pack(State {
                index: 1_000,
                count: 0,
            })
            .unwrap();
        assert_eq!(
            step(beyond, 0, 1, year, Admit::Always),
            Err(Deny::Saturated)
        );
        assert_eq!(available(beyond, 0, year), 0);
        let second = p(1, Window::SECOND);
        assert_eq!(second.index_at(u64::MAX), u64::MAX / S);
        assert_eq!(second.end(u64::MAX / S), u64::MAX);
    }
}
