//! `paceline::all`: a request goes only if every part admits it; a refusal
//! gives the earlier parts back; under threads racing, no part ever admits
//! more than its own bound.
#![cfg(feature = "keyed")]

use paceline::Take;
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use paceline::all::All;
use paceline::{clock::ManualClock, AtomicLimiter, Error, KeyedLimiter, MutexLimiter, Rate};

#[test]
fn a_refusal_by_a_later_part_gives_the_earlier_ones_back() {
    let clock = ManualClock::new();
    let per_user = KeyedLimiter::<String>::builder(Rate::per_second(1))
        .slack(4)
        .clock(clock.clone())
        .build()
        .unwrap();
    let global = AtomicLimiter::builder(Rate::per_second(1))
        .slack(1)
        .full_credit(true)
        .stats(true)
        .clock(clock.clone())
        .build()
        .unwrap();
    let other = MutexLimiter::builder(Rate::per_second(1))
        .slack(9)
        .full_credit(true)
        .clock(clock.clone())
        .build()
        .unwrap();
    let alice = per_user.bucket("alice");
    let parts: [&dyn Take; 3] = [&alice, &other, &global];
    All::new(parts).try_take(&()).unwrap();
    All::new(parts).try_take(&()).unwrap();
    // The global burst of 2 is spent: the third request takes from no one.
    let refused = All::new(parts).try_take(&());
    assert!(matches!(refused, Err(Error::RetryAfter(_))), "{refused:?}");
    assert_eq!(per_user.available("alice"), 3);
    assert_eq!(other.available(), 8);
    assert_eq!(global.available(), 0);
    // A refusal by the first part asks no other.
    let alone = KeyedLimiter::<String>::builder(Rate::per_second(1))
        .slack(0)
        .clock(clock.clone())
        .build()
        .unwrap();
    alone.try_take("bob").unwrap();
    clock.advance(Duration::from_secs(1));
    assert_eq!(global.available(), 1);
    assert!(All::new([&alone.bucket("bob"), &global])
        .try_take(&())
        .is_ok());
    assert!(All::new([&alone.bucket("bob"), &global])
        .try_take(&())
        .is_err());
    assert_eq!(global.available(), 0);
    let stats = global.stats().unwrap();
    assert_eq!((stats.admitted, stats.refused), (3, 1));
}

#[test]
fn costs_and_timeouts_apply_to_every_part() {
    let clock = ManualClock::with_auto_advance();
    let a = AtomicLimiter::builder(Rate::per_second(10)) // T = 100 ms
        .slack(0)
        .clock(clock.clone())
        .build()
        .unwrap();
    let b = KeyedLimiter::<u8>::builder(Rate::per_second(4)) // T = 250 ms
        .slack(3)
        .clock(clock.clone())
        .build()
        .unwrap();
    // A cost above a part's burst can never go now.
    assert!(matches!(
        All::new([&b.bucket(&1), &a]).try_take_n(&(), 2),
        Err(Error::ExceedsBurst { .. })
    ));
    assert_eq!(b.available(&1), 4, "given back");
    All::new([&b.bucket(&1), &a]).try_take_n(&(), 1).unwrap();
    // The next permit of `a` is 100 ms away: too far for 50 ms.
    assert!(matches!(
        All::new([&b.bucket(&1), &a]).take_timeout(&(), Duration::from_millis(50)),
        Err(Error::QueueFull { .. })
    ));
    assert_eq!(b.available(&1), 3, "given back");
    // Within 150 ms it goes, after the later slot.
    let before = clock.elapsed();
    All::new([&b.bucket(&1), &a])
        .take_timeout(&(), Duration::from_millis(150))
        .unwrap();
    assert_eq!(clock.elapsed() - before, Duration::from_millis(100));
    // A blocking take waits for the latest slot of all.
    All::new([&a, &b.bucket(&1)]).take_n(&(), 1).unwrap();
    assert_eq!(clock.elapsed() - before, Duration::from_millis(200));
}

/// Rounds of racing threads at one clock reading each; between rounds the
/// clock moves on. Every part's admissions, counted per round, must fit its
/// bound in every window of rounds: `slack + 1 + (t_j - t_i) / T`.
#[test]
fn racing_threads_never_exceed_any_one_limit() {
    // The recommended order (the contended global limit last), and the
    // other, whose give-backs of the global limit race its takers.
    race(false);
    race(true);
}

fn race(global_first: bool) {
    const THREADS: usize = 4;
    const ROUNDS: usize = 60;
    const TRIES: usize = 40;
    const KEYS: u8 = 3;
    let clock = ManualClock::new();
    // Global: 2000/s (T = 0.5 ms), a burst of 5. Per user: 500/s, a burst
    // of 3: each limit refuses some requests the other admitted.
    let (global_t, global_slack) = (500_000u64, 4u64);
    let (user_t, user_slack) = (2_000_000u64, 2u64);
    let global = AtomicLimiter::builder(Rate::per_second(2000))
        .slack(global_slack)
        .stats(true)
        .clock(clock.clone())
        .build()
        .unwrap();
    let per_user = KeyedLimiter::<u8>::builder(Rate::per_second(500))
        .slack(user_slack)
        .clock(clock.clone())
        .build()
        .unwrap();

    let start = Barrier::new(THREADS + 1);
    let end = Barrier::new(THREADS + 1);
    // admitted[round][key], and the clock of each round.
    let mut admitted = vec![[0u64; KEYS as usize]; ROUNDS];
    let mut times = Vec::with_capacity(ROUNDS);
    thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (global, per_user, start, end) = (&global, &per_user, &start, &end);
                s.spawn(move || {
                    let mut mine = vec![[0u64; KEYS as usize]; ROUNDS];
                    for round in mine.iter_mut() {
                        start.wait();
                        for i in 0..TRIES {
                            let key = ((t + i) % KEYS as usize) as u8;
                            let bucket = per_user.bucket(&key);
                            let parts: [&dyn Take; 2] = if global_first {
                                [global, &bucket]
                            } else {
                                [&bucket, global]
                            };
                            if All::new(parts).try_take(&()).is_ok() {
                                round[key as usize] += 1;
                            }
                        }
                        end.wait();
                    }
                    mine
                })
            })
            .collect();
        for round in 0..ROUNDS {
            times.push(clock.elapsed().as_nanos() as u64);
            start.wait();
            end.wait();
            // 0, 1 or 3 ms: some rounds with no new permits at all.
            clock.advance(Duration::from_millis([0, 1, 3][round % 3]));
        }
        for w in workers {
            for (round, counts) in w.join().unwrap().into_iter().enumerate() {
                for k in 0..KEYS as usize {
                    admitted[round][k] += counts[k];
                }
            }
        }
    });

    let total: Vec<u64> = admitted.iter().map(|r| r.iter().sum()).collect();
    for i in 0..ROUNDS {
        for j in i..ROUNDS {
            let span = times[j] - times[i];
            let global_count: u64 = total[i..=j].iter().sum();
            assert!(
                global_count <= global_slack + 1 + span / global_t,
                "global: {global_count} in rounds {i}..={j} ({span} ns)"
            );
            for k in 0..KEYS as usize {
                let count: u64 = admitted[i..=j].iter().map(|r| r[k]).sum();
                assert!(
                    count <= user_slack + 1 + span / user_t,
                    "key {k}: {count} in rounds {i}..={j} ({span} ns)"
                );
            }
        }
    }
    let all_admitted: u64 = total.iter().sum();
    let stats = global.stats().unwrap();
    assert!(all_admitted > 0);
    if global_first {
        // Every grant of the global limit went through all, or was handed
        // back after a per-user refusal.
        assert_eq!(stats.admitted, all_admitted + stats.cancelled);
    } else {
        // Last: it is asked only when every other part admitted.
        assert_eq!((stats.admitted, stats.cancelled), (all_admitted, 0));
    }
    println!(
        "global {}: admitted {all_admitted} of {} tries; the global limit granted {} and had {} handed back",
        if global_first { "first" } else { "last" },
        THREADS * ROUNDS * TRIES,
        stats.admitted,
        stats.cancelled
    );
}

/// The give-back's own race: threads whose requests a second part always
/// refuses book and hand back the global limit without pause, while
/// others take from it for real. Each undo that found another booking
/// after its own must leave that booking alone, so the real takers never
/// get more than the global bound, window by window.
#[test]
fn give_backs_racing_real_takers_never_exceed_the_bound() {
    const ROUNDS: usize = 200;
    const TRIES: usize = 200;
    let clock = ManualClock::new();
    // 1000/s (T = 1 ms), a burst of 9.
    let (global_t, global_slack) = (1_000_000u64, 8u64);
    let global = AtomicLimiter::builder(Rate::per_second(1000))
        .slack(global_slack)
        .stats(true)
        .clock(clock.clone())
        .build()
        .unwrap();
    // Refuses everything: each key's one permit is spent up front.
    let closed = KeyedLimiter::<usize>::builder(Rate::per_hour(1))
        .slack(0)
        .clock(clock.clone())
        .build()
        .unwrap();
    // Never the reason for a refusal.
    let open = AtomicLimiter::builder(Rate::per_second(1_000_000))
        .slack(1_000_000)
        .full_credit(true)
        .clock(clock.clone())
        .build()
        .unwrap();
    for key in 0..2 {
        closed.try_take(&key).unwrap();
    }

    let start = Barrier::new(5);
    let end = Barrier::new(5);
    let mut admitted = vec![0u64; ROUNDS];
    let mut times = Vec::with_capacity(ROUNDS);
    thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|t| {
                let (global, closed, open, start, end) = (&global, &closed, &open, &start, &end);
                s.spawn(move || {
                    let bucket = closed.bucket(&t);
                    let parts: [&dyn Take; 2] = if t < 2 {
                        [global, &bucket] // always handed back
                    } else {
                        [global, open]
                    };
                    let mut mine = vec![0u64; ROUNDS];
                    for round in mine.iter_mut() {
                        start.wait();
                        for _ in 0..TRIES {
                            if All::new(parts).try_take(&()).is_ok() {
                                *round += 1;
                            }
                        }
                        end.wait();
                    }
                    mine
                })
            })
            .collect();
        for _ in 0..ROUNDS {
            times.push(clock.elapsed().as_nanos() as u64);
            start.wait();
            end.wait();
            clock.advance(Duration::from_millis(2));
        }
        for w in workers {
            for (round, n) in w.join().unwrap().into_iter().enumerate() {
                admitted[round] += n;
            }
        }
    });
    for i in 0..ROUNDS {
        for j in i..ROUNDS {
            let count: u64 = admitted[i..=j].iter().sum();
            let span = times[j] - times[i];
            assert!(
                count <= global_slack + 1 + span / global_t,
                "{count} in rounds {i}..={j} ({span} ns)"
            );
        }
    }
    let stats = global.stats().unwrap();
    let total: u64 = admitted.iter().sum();
    println!(
        "real takers got {total} (the bound over the run: {}); {} handed back",
        global_slack + 1 + (times[ROUNDS - 1] - times[0]) / global_t,
        stats.cancelled
    );
}

/// `All` answers the interface as one limiter: what a take found, the
/// state and the limit are the binding part's (the fewest permits free),
/// a question is whether every part could.
#[test]
fn all_answers_the_interface_as_its_binding_part() {
    let clock = ManualClock::new();
    let wide = AtomicLimiter::builder(Rate::per_second(10))
        .slack(9)
        .full_credit(true)
        .clock(clock.clone())
        .build()
        .unwrap();
    let narrow = MutexLimiter::builder(Rate::per_second(1))
        .slack(2)
        .full_credit(true)
        .clock(clock.clone())
        .build()
        .unwrap();
    let both = All::new([&wide, &narrow]);
    assert!(both.can_take(&(), 3).unwrap());
    assert!(!both.can_take(&(), 4).unwrap(), "the narrow burst is 3");
    assert_eq!(both.limit_for(&()), Some(narrow.limit()));
    let taken = both.try_take_n("any key", 2).unwrap();
    assert_eq!((taken.available(), taken.at()), (1, Duration::ZERO));
    assert_eq!(both.state(&()).unwrap(), narrow.state());
    assert_eq!((wide.available(), narrow.available()), (8, 1));
    // Refused by the narrow part: the wide one is given its permits back.
    let e = both.try_take_n(&(), 2).unwrap_err();
    assert!(matches!(e, Error::RetryAfter(_)), "{e}");
    assert_eq!(wide.available(), 8);
}

/// Requests and tokens at once, each part its own cost, the tokens settled
/// from the answer: a remote part (the in-memory backend, one key) beside
/// an in-process one, and the async faces through `AsyncAll`.
#[cfg(feature = "tokio")]
#[test]
fn each_part_books_its_own_cost_and_settles_its_actual() {
    use paceline::remote::memory::{MemoryBackend, MemoryLimiter};
    use paceline::remote::FailPolicy;
    use paceline::take::{OnKey, Within};
    use paceline::Limit;

    let clock = ManualClock::new();
    let requests = AtomicLimiter::builder(Rate::per_second(1))
        .slack(4)
        .full_credit(true)
        .clock(clock.clone())
        .build()
        .unwrap();
    let tokens = KeyedLimiter::<String>::builder(Rate::per_second(100))
        .slack(999) // a burst of 1000 tokens
        .clock(clock.clone())
        .build()
        .unwrap();
    let remote = MemoryLimiter::with_backend(
        MemoryBackend::new(),
        Limit::new(Rate::per_second(1), 9),
        FailPolicy::Closed,
    )
    .unwrap();
    let (on_tokens, on_remote) = (
        tokens.bucket("model"),
        OnKey::new(&remote, "api".to_string()),
    );
    let all = All::new([&requests, &on_tokens, &on_remote]);
    // A call estimated at 600 tokens, which cost 150.
    let booked = all.book_each([1, 600, 1], Within::Now).unwrap();
    assert_eq!(booked.taken().available(), 4, "the binding part: requests");
    assert_eq!(tokens.available("model"), 400);
    all.settle_each(booked, [1, 150, 1]).unwrap();
    assert_eq!(tokens.available("model"), 850, "450 tokens back");
    assert_eq!(requests.available(), 4);
    // The tokens refuse 900: the requests and the remote key get theirs back.
    let e = all.book_each([1, 900, 1], Within::Now).unwrap_err();
    assert!(matches!(e, Error::RetryAfter(_)), "{e}");
    assert_eq!(requests.available(), 4, "given back");
    assert_eq!(tokens.available("model"), 850);
}

#[cfg(feature = "tokio")]
#[tokio::test(start_paused = true)]
async fn async_parts_book_and_settle_all_or_nothing() {
    use paceline::all::AsyncAll;
    use paceline::take::{OnKey, Within};
    use paceline::tokio::{AsyncKeyedLimiter, AsyncLimiter, TokioClock};
    use paceline::AsyncTake;

    let requests = AsyncLimiter::builder(Rate::per_second(1))
        .slack(4)
        .full_credit(true)
        .clock(TokioClock::new())
        .build()
        .unwrap();
    let tokens = AsyncKeyedLimiter::from(
        KeyedLimiter::<String, _>::builder(Rate::per_second(100))
            .slack(999)
            .clock(TokioClock::new())
            .build()
            .unwrap(),
    );
    let on_tokens = OnKey::new(tokens.clone(), "model".to_string());
    let all = AsyncAll::new([&requests, &on_tokens]);
    let booked = all.book_each([1, 600], Within::Now).await.unwrap();
    all.settle_each(booked, [1, 100]).await.unwrap();
    assert_eq!(tokens.limiter().available("model"), 900, "500 back");
    let e = all.book_each([1, 950], Within::Now).await.unwrap_err();
    assert!(matches!(e, Error::RetryAfter(_)), "{e}");
    assert_eq!(requests.state().await.available(), 4, "given back");
    // A waiting take waits for every part's slot, as a task.
    let taken = AsyncTake::take_n(&all, &(), 5).await.unwrap();
    assert_eq!(taken.available(), 0);
    assert_eq!(all.limit_for(&()), Some(requests.limiter().limit()));
}
