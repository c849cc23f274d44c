//! KeyedLimiter's behaviours, on a manual clock.
#![cfg(feature = "keyed")]

use paceline::Take;
use std::time::Duration;

use paceline::keyed::path_parent;
use paceline::{clock::ManualClock, keyed::WhenFull, AtomicLimiter, Error, KeyedLimiter, Rate};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// 10/s (100 ms apart), slack 2: a burst of 3.
fn limiter<K: std::hash::Hash + Eq + Clone>(clock: &ManualClock) -> KeyedLimiter<K, ManualClock> {
    KeyedLimiter::builder(Rate::per_second(10))
        .slack(2)
        .clock(clock.clone())
        .build()
        .unwrap()
}

#[test]
fn a_new_key_bursts_slack_plus_one_then_waits_an_interval() {
    let clock = ManualClock::new();
    let l = limiter::<u32>(&clock);
    for _ in 0..3 {
        assert_eq!(l.try_take(&1).map(drop), Ok(()));
    }
    assert_eq!(l.try_take(&1), Err(Error::RetryAfter(ms(100).into())));
    clock.advance(ms(100));
    assert_eq!(l.try_take(&1).map(drop), Ok(()));
}

#[test]
fn keys_have_independent_buckets() {
    let clock = ManualClock::new();
    let l = limiter::<u32>(&clock);
    assert_eq!(l.try_take_n(&1, 3).map(drop), Ok(()));
    assert!(l.try_take(&1).is_err());
    assert_eq!(l.try_take_n(&2, 3).map(drop), Ok(()));
    assert_eq!(l.len(), 2);
}

#[test]
fn string_keys_are_looked_up_by_str() {
    let clock = ManualClock::new();
    let l = limiter::<String>(&clock);
    assert_eq!(l.try_take_n("alice", 3).map(drop), Ok(()));
    assert!(l.try_take("alice").is_err());
    assert!(!l.can_take("alice", 1).unwrap());
}

#[test]
fn can_take_consumes_nothing_and_tracks_no_key() {
    let clock = ManualClock::new();
    let l = limiter::<u32>(&clock);
    assert!(l.can_take(&9, 3).unwrap());
    assert!(!l.can_take(&9, 4).unwrap());
    assert!(l.is_empty());
}

#[test]
fn a_refused_first_request_tracks_no_key() {
    let clock = ManualClock::new();
    let l = limiter::<u32>(&clock);
    assert_eq!(
        l.try_take_n(&9, 4),
        Err(Error::ExceedsBurst { cost: 4, burst: 3 })
    );
    assert!(l.is_empty());
    assert_eq!(l.keyed_stats().refused, 1);
}

/// As the direct limiters: a timeout's refusal is `QueueFull` even when it
/// allowed no wait at all (`try_take`'s is `RetryAfter`).
#[test]
fn a_zero_timeout_refuses_with_queue_full_as_the_direct_limiters() {
    let clock = ManualClock::new();
    let l = limiter::<u32>(&clock);
    l.try_take_n(&1, 3).unwrap();
    assert_eq!(
        l.take_timeout(&1, Duration::ZERO),
        Err(Error::QueueFull {
            wait: ms(100),
            max_wait: Duration::ZERO
        })
    );
    assert_eq!(l.try_take(&1), Err(Error::RetryAfter(ms(100).into())));
}

#[test]
fn blocking_take_waits_for_the_keys_own_slot() {
    let clock = ManualClock::with_auto_advance();
    let l = limiter::<u32>(&clock);
    l.take_n(&1, 3).unwrap();
    // The fourth permit of key 1 goes 100 ms later; key 2 is not delayed.
    assert_eq!(l.take(&1).map(|t| t.at()), Ok(ms(100)));
    assert_eq!(l.take(&2).map(|t| t.at()), Ok(ms(100)));
    assert_eq!(
        l.take_timeout(&1, ms(50)),
        Err(Error::QueueFull {
            wait: ms(100),
            max_wait: ms(50)
        })
    );
    assert_eq!(l.take_timeout(&1, ms(100)).map(|t| t.at()), Ok(ms(200)));
}

#[test]
fn a_key_at_rest_is_pruned_and_then_decides_as_a_new_key() {
    let clock = ManualClock::new();
    let l = limiter::<u32>(&clock);
    l.try_take_n(&1, 3).unwrap();
    // Back at rest after 300 ms (3 intervals), dropped 1 ms later.
    clock.advance(ms(300));
    // At rest: no longer shown, though still tracked until swept.
    assert!(l.snapshot().is_empty());
    assert_eq!(l.len(), 1);
    assert_eq!(l.prune(), 0);
    clock.advance(ms(1));
    assert_eq!(l.prune(), 1);
    assert!(l.is_empty());
    assert_eq!(l.try_take_n(&1, 3).map(drop), Ok(()));
    let stats = l.keyed_stats();
    assert_eq!((stats.keys, stats.admitted, stats.pruned), (1, 2, 1));
}

#[test]
fn idle_keys_are_pruned_on_insert_without_being_asked() {
    let clock = ManualClock::new();
    let l = KeyedLimiter::<u32>::builder(Rate::per_second(10))
        .slack(2)
        .max_keys(64) // one key per shard: every insert checks its shard
        .when_full(WhenFull::Refuse)
        .clock(clock.clone())
        .build()
        .unwrap();
    for key in 0..1000 {
        // Refused while the map is full of busy keys...
        let _ = l.try_take(&key);
        clock.advance(ms(10));
    }
    // ... but keys come to rest (201 ms after their one use) and make room,
    // so most keys got a bucket.
    let stats = l.keyed_stats();
    assert!(stats.keys <= 64);
    assert!(stats.pruned > 500, "{stats:?}");
    assert!(stats.admitted > 500, "{stats:?}");
}

#[test]
fn refuse_keeps_tracked_keys_exact_and_refuses_new_ones() {
    let clock = ManualClock::new();
    let l = KeyedLimiter::<u32>::builder(Rate::per_second(10))
        .max_keys(1)
        .when_full(WhenFull::Refuse)
        .clock(clock.clone())
        .build()
        .unwrap();
    assert_eq!(l.try_take(&1).map(drop), Ok(()));
    assert_eq!(l.try_take(&2), Err(Error::TooManyKeys { max_keys: 1 }));
    assert_eq!(l.take(&2), Err(Error::TooManyKeys { max_keys: 1 }));
    assert_eq!(l.try_take(&1).map(drop), Ok(()));
    assert_eq!(l.len(), 1);
}

#[test]
fn admit_lets_new_keys_through_untracked_when_full() {
    let clock = ManualClock::new();
    let l = KeyedLimiter::<u32>::builder(Rate::per_second(10))
        .slack(0)
        .max_keys(1)
        .when_full(WhenFull::Admit)
        .clock(clock.clone())
        .build()
        .unwrap();
    assert_eq!(l.try_take(&1).map(drop), Ok(()));
    // Key 2 is not tracked, so it is never limited while the map is full.
    assert_eq!(l.try_take(&2).map(drop), Ok(()));
    assert_eq!(l.try_take(&2).map(drop), Ok(()));
    assert!(l.try_take(&1).is_err());
    let stats = l.keyed_stats();
    assert_eq!((stats.keys, stats.untracked, stats.admitted), (1, 2, 3));
}

#[test]
fn evict_drops_the_key_nearest_rest_and_tracks_the_new_one() {
    let clock = ManualClock::new();
    let l = KeyedLimiter::<u32>::builder(Rate::per_second(10))
        .slack(2)
        .max_keys(1)
        .clock(clock.clone())
        .build()
        .unwrap();
    assert_eq!(l.when_full(), WhenFull::Evict);
    l.try_take_n(&1, 3).unwrap();
    assert_eq!(l.try_take(&2).map(drop), Ok(()));
    assert_eq!(l.len(), 1);
    assert_eq!(l.snapshot()[0].key, 2);
    assert_eq!(l.keyed_stats().evicted, 1);
}

#[test]
fn an_override_applies_to_keys_already_tracked() {
    let clock = ManualClock::new();
    let l = limiter::<u32>(&clock);
    l.try_take_n(&1, 3).unwrap(); // the last slot at 0
    assert_eq!(l.try_take(&1), Err(Error::RetryAfter(ms(100).into())));
    // Key 1 gets 1/s with a slack of 5: its next slot is one new interval
    // after its last.
    l.set_override(1, Rate::per_second(1), 5).unwrap();
    assert_eq!(l.rate_for(&1), (Rate::per_second(1), 5));
    assert_eq!(l.try_take(&1), Err(Error::RetryAfter(ms(1000).into())));
    clock.advance(ms(1000));
    assert!(l.try_take(&1).is_ok());
    assert_eq!(l.try_take(&1), Err(Error::RetryAfter(ms(1000).into())));
    // Same slack, new rate: 500 ms after the slot at 1 s.
    l.set_override(1, Rate::per_second(2), 5).unwrap();
    assert_eq!(l.try_take(&1), Err(Error::RetryAfter(ms(500).into())));
    clock.advance(ms(500));
    assert!(l.try_take(&1).is_ok());
    assert_eq!(l.try_take(&1), Err(Error::RetryAfter(ms(500).into())));
    assert!(l.remove_override(&1));
    assert!(!l.remove_override(&1));
    assert_eq!(l.rate_for(&1), (Rate::per_second(10), 2));
    // Back at 10/s: 100 ms after the slot at 1.5 s.
    assert_eq!(l.try_take(&1), Err(Error::RetryAfter(ms(100).into())));
    clock.advance(ms(100));
    assert!(l.try_take(&1).is_ok());
    assert_eq!(l.try_take(&1), Err(Error::RetryAfter(ms(100).into())));
}

/// As `tests/set_rate.rs` pins for the direct limiters, per key: slowing a
/// busy key from 10/s to 1/s waits the whole new second, speeding it to
/// 100/s waits 10 ms; blocking takes return the same times as a lone
/// `AtomicLimiter` given the same calls.
#[test]
fn a_busy_keys_next_slot_is_one_new_interval_after_its_last() {
    let clock = ManualClock::with_auto_advance();
    let lone_clock = ManualClock::with_auto_advance();
    let l = KeyedLimiter::<u32>::builder(Rate::per_second(10))
        .slack(0)
        .clock(clock.clone())
        .build()
        .unwrap();
    let lone = AtomicLimiter::builder(Rate::per_second(10))
        .slack(0)
        .full_credit(true)
        .clock(lone_clock)
        .build()
        .unwrap();
    let mut times = vec![];
    assert_eq!(l.take(&7).map(|t| t.at()), Ok(Duration::ZERO));
    assert_eq!(lone.take().at(), Duration::ZERO);
    for (rate, takes) in [(Rate::per_second(1), 2), (Rate::per_second(100), 2)] {
        l.set_rate(rate).unwrap();
        lone.set_rate(rate).unwrap();
        for _ in 0..takes {
            let t = l.take(&7).unwrap().at();
            assert_eq!(t, lone.take().at());
            times.push(t);
        }
    }
    assert_eq!(times, [ms(1000), ms(2000), ms(2010), ms(2020)]);
}

#[test]
fn speeding_a_key_up_from_one_per_hour_does_not_wait_out_the_hour() {
    let clock = ManualClock::new();
    let l = KeyedLimiter::<u32>::builder(Rate::per_hour(1))
        .clock(clock.clone())
        .build()
        .unwrap();
    l.try_take_n(&7, 11).unwrap();
    assert!(l.try_take(&7).is_err());
    l.set_override(7, Rate::per_second(100), 10).unwrap();
    clock.advance(ms(10));
    assert!(l.try_take(&7).is_ok());
    assert!(l.try_take(&7).is_err());
    assert!(l.remove_override(&7));
    clock.advance(ms(10));
    assert_eq!(
        l.try_take(&7),
        Err(Error::RetryAfter(
            (Duration::from_secs(3600) - ms(10)).into()
        ))
    );
}

/// A key at rest when its rate drops decides as an absent key: a whole
/// burst at the new rate. (Rebased, its banked time would have bought
/// nothing for another 40 ms.)
#[test]
fn a_key_at_rest_stays_at_rest_across_a_slowdown() {
    let clock = ManualClock::new();
    let l = KeyedLimiter::<u32>::builder(Rate::per_second(100))
        .slack(3)
        .clock(clock.clone())
        .build()
        .unwrap();
    l.try_take(&1).unwrap();
    clock.advance(ms(30)); // back at rest, not yet pruned
    assert_eq!(l.len(), 1);
    l.set_rate(Rate::per_second(10)).unwrap();
    for key in [1, 2] {
        assert!(l.try_take_n(&key, 4).is_ok(), "key {key}");
        assert_eq!(l.try_take(&key), Err(Error::RetryAfter(ms(100).into())));
    }
}

#[test]
fn string_keys_fall_back_through_their_parents_to_the_default() {
    let clock = ManualClock::new();
    let l = KeyedLimiter::<String>::builder(Rate::per_second(100))
        .parent(path_parent)
        .clock(clock.clone())
        .build()
        .unwrap();
    l.try_take("api/upload/10.0.0.7").unwrap(); // tracked before any override
    l.set_override("api".into(), Rate::per_second(10), 0)
        .unwrap();
    // At rest under 10/s with no slack, and for the grace a move allows a
    // clock read a little behind (`PRUNE_GRACE`).
    clock.advance(ms(1));
    l.set_override("api/upload".into(), Rate::per_second(1), 0)
        .unwrap();
    assert_eq!(l.rate_for("api/upload/10.0.0.7"), (Rate::per_second(1), 0));
    assert_eq!(l.rate_for("api/list/10.0.0.7"), (Rate::per_second(10), 0));
    assert_eq!(l.rate_for("web/10.0.0.7"), (Rate::per_second(100), 10));
    // The tracked key moved to its parent's 1/s (it had no debt to carry).
    assert!(l.try_take("api/upload/10.0.0.7").is_ok());
    assert_eq!(
        l.try_take("api/upload/10.0.0.7"),
        Err(Error::RetryAfter(ms(1000).into()))
    );
    assert!(l.try_take("api/list/10.0.0.7").is_ok());
    assert!(l.try_take("api/list/10.0.0.7").is_err());
    // The default rate changes for keys without an override only.
    l.set_rate(Rate::per_second(1)).unwrap();
    assert_eq!(l.rate_for("web/x"), (Rate::per_second(1), 10));
    assert_eq!(l.rate_for("api/x"), (Rate::per_second(10), 0));
}

#[test]
fn snapshot_shows_fill_next_free_idle_and_counts() {
    let clock = ManualClock::new();
    let l = limiter::<u32>(&clock);
    l.try_take(&1).unwrap();
    l.try_take_n(&2, 3).unwrap();
    let _ = l.try_take(&2);
    clock.advance(ms(40));
    let mut keys = l.snapshot();
    keys.sort_by_key(|k| k.key);
    // Key 1: one permit of a burst of 3 in use, 40 ms of it since repaid.
    assert!((keys[0].fill - 60.0 / 300.0).abs() < 1e-9, "{keys:?}");
    assert_eq!(keys[0].next_free, Duration::ZERO);
    // Idle time is kept to about a millisecond (2^20 ns).
    assert!(keys[0].idle.abs_diff(ms(40)) < Duration::from_nanos(1 << 20));
    assert_eq!(keys[0].refused, 0);
    // Key 2: whole burst in use, next permit 60 ms away.
    assert!((keys[1].fill - 260.0 / 300.0).abs() < 1e-9, "{keys:?}");
    assert_eq!(keys[1].next_free, ms(60));
    assert_eq!(keys[1].refused, 1);
    let stats = l.keyed_stats();
    assert_eq!((stats.keys, stats.admitted, stats.refused), (2, 2, 1));
}

#[test]
fn limiter_is_send_and_sync_and_shared_between_threads() {
    let l = std::sync::Arc::new(KeyedLimiter::<u64>::new(Rate::per_second(1)));
    let admitted: usize = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let l = &l;
                s.spawn(move || (0..100).filter(|_| l.try_take(&7).is_ok()).count())
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    // The burst of one key, once, however the threads interleave (the real
    // clock could only add a permit if a second passed).
    assert!((11..=12).contains(&admitted), "{admitted}");
}

#[test]
fn racing_threads_never_exceed_a_keys_burst_even_while_it_is_created() {
    // 4 threads race on 50 fresh keys each round, clock still: every key
    // admits exactly its burst (3), however inserts and CASes interleave.
    let clock = ManualClock::new();
    let l = limiter::<u32>(&clock);
    for round in 0..20u32 {
        let keys: Vec<u32> = (round * 50..round * 50 + 50).collect();
        let admitted: Vec<Vec<u32>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    let (l, keys) = (&l, &keys);
                    s.spawn(move || {
                        let mut got = Vec::new();
                        for _ in 0..4 {
                            for &k in keys {
                                if l.try_take(&k).is_ok() {
                                    got.push(k);
                                }
                            }
                        }
                        got
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut per_key = std::collections::HashMap::new();
        for k in admitted.into_iter().flatten() {
            *per_key.entry(k).or_insert(0) += 1;
        }
        assert!(
            keys.iter().all(|k| per_key.get(k) == Some(&3)),
            "{per_key:?}"
        );
    }
    assert_eq!(l.keyed_stats().admitted, 20 * 50 * 3);
}

#[test]
fn available_and_next_free_read_a_key_without_tracking_it() {
    let clock = ManualClock::new();
    let l = limiter::<u32>(&clock);
    assert_eq!((l.rate(), l.slack()), (Rate::per_second(10), 2));
    assert_eq!((l.available(&1), l.next_free(&1)), (3, Duration::ZERO));
    assert!(l.is_empty());
    l.try_take_n(&1, 2).unwrap();
    assert_eq!((l.available(&1), l.next_free(&1)), (1, Duration::ZERO));
    l.try_take(&1).unwrap();
    assert_eq!((l.available(&1), l.next_free(&1)), (0, ms(100)));
    // An override applies to keys not yet tracked, too.
    l.set_override(2, Rate::per_second(1), 0).unwrap();
    assert_eq!(l.available(&2), 1);
    l.try_take(&2).unwrap();
    assert_eq!(l.next_free(&2), ms(1000));
    clock.advance(ms(100));
    assert_eq!((l.available(&1), l.next_free(&1)), (1, Duration::ZERO));
    assert_eq!(l.len(), 2);
}

/// A lone `AtomicLimiter` with the keyed limiter's defaults for one key:
/// 10/s, slack 2, full credit.
fn lone(clock: &ManualClock) -> AtomicLimiter<ManualClock> {
    AtomicLimiter::builder(Rate::per_second(10))
        .slack(2)
        .full_credit(true)
        .clock(clock.clone())
        .build()
        .unwrap()
}

/// Permits `try_take` admits one by one until the first refusal.
fn drain(mut try_take: impl FnMut() -> bool) -> u32 {
    let mut n = 0;
    while n < 100 && try_take() {
        n += 1;
    }
    n
}

#[test]
fn a_rate_change_at_rest_gives_a_clock_a_little_behind_no_extra_permit() {
    let clock = ManualClock::new();
    let l = limiter::<u32>(&clock);
    let one = lone(&clock);
    clock.set(ms(1000));
    l.try_take_n(&1, 3).unwrap();
    one.try_take_n(3).unwrap();
    // Exactly at rest at 1300 ms; the rate "changes" to itself.
    clock.set(ms(1300));
    l.set_rate(Rate::per_second(10)).unwrap();
    one.set_rate(Rate::per_second(10)).unwrap();
    // Another core's reading, 1 µs behind: the interval since 1000 ms paid
    // for 2 permits, not a whole burst.
    clock.set(ms(1300) - Duration::from_micros(1));
    let keyed = drain(|| l.try_take(&1).is_ok());
    let alone = drain(|| one.try_take().is_ok());
    assert_eq!((keyed, alone), (2, 2));
}

#[test]
fn a_parent_cycle_resolves_to_the_default_and_is_counted_never_hangs() {
    #[allow(clippy::ptr_arg)] // a parent function takes `&K`
    fn cyclic(key: &String) -> Option<String> {
        // "" -> "" -> ...: a misconfigured parent function.
        Some(key.split('/').next().unwrap_or_default().to_string())
    }
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let l = KeyedLimiter::<String>::builder(Rate::per_second(10))
            .slack(2)
            .parent(cyclic)
            .clock(ManualClock::new())
            .build()
            .unwrap();
        l.set_override("other".into(), Rate::per_second(1), 0)
            .unwrap();
        let rate = l.rate_for("a/b");
        let taken = l.try_take_n("a/b", 3);
        done.send((rate, taken, l.keyed_stats().parent_walks_cut))
            .unwrap();
    });
    let (rate, taken, cut) = finished
        .recv_timeout(Duration::from_secs(20))
        .expect("key resolution hung on a parent cycle");
    assert_eq!(rate, (Rate::per_second(10), 2), "the default");
    assert_eq!(taken.map(drop), Ok(()));
    assert!(cut >= 2, "each cut walk counted: {cut}");
}

#[test]
fn a_cost_of_zero_counts_as_admitted_on_new_and_tracked_keys_alike() {
    let clock = ManualClock::new();
    let l = limiter::<u32>(&clock);
    assert_eq!(l.try_take_n(&1, 0).map(drop), Ok(())); // a new key: nothing tracked
    assert_eq!(l.len(), 0);
    assert_eq!(l.keyed_stats().admitted, 1);
    l.try_take(&2).unwrap();
    assert_eq!(l.try_take_n(&2, 0).map(drop), Ok(())); // a tracked key
    assert_eq!(l.take_n(&3, 0).map(|t| t.at()), Ok(Duration::ZERO));
    let stats = l.keyed_stats();
    assert_eq!((stats.keys, stats.admitted, stats.untracked), (1, 4, 0));
}

/// Distinct busy keys tracked when `WhenFull::Refuse` first refuses one, on a
/// fresh limiter with a ceiling of `max_keys`; checks the ceiling holds for
/// as many keys again.
fn tracked_at_first_refusal(max_keys: usize) -> usize {
    let l = KeyedLimiter::<u64>::builder(Rate::per_hour(1))
        .slack(0)
        .max_keys(max_keys)
        .when_full(WhenFull::Refuse)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let mut first = None;
    for key in 0..2 * max_keys as u64 {
        match l.try_take(&key) {
            Ok(_) => {}
            Err(Error::TooManyKeys { .. }) => {
                first.get_or_insert(l.len());
            }
            Err(e) => panic!("key {key}: {e}"),
        }
        assert!(l.len() <= max_keys, "{} keys over {max_keys}", l.len());
    }
    first.expect("a refusal past the ceiling")
}

#[test]
fn the_ceiling_refuses_only_near_max_keys_at_every_size() {
    for max_keys in [64, 1_000, 10_000] {
        let tracked: Vec<usize> = (0..4).map(|_| tracked_at_first_refusal(max_keys)).collect();
        println!("max_keys {max_keys}: first refusal at {tracked:?} keys");
        for &n in &tracked {
            assert!(
                n * 10 >= max_keys * 9,
                "max_keys {max_keys}: first refusal at {n} keys"
            );
        }
    }
}

#[test]
fn evict_makes_room_from_another_shard_when_the_new_keys_shard_is_empty() {
    // 64 keys over 64 shards: at the ceiling, a new key's shard is often
    // empty, and the room must come from another.
    let l = KeyedLimiter::<u64>::builder(Rate::per_hour(1))
        .slack(0)
        .max_keys(64)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    for key in 0..1_000 {
        assert_eq!(l.try_take(&key).map(drop), Ok(()), "key {key}");
        assert!(l.len() <= 64);
        // The new key is tracked: a second take is refused.
        assert!(l.try_take(&key).is_err(), "key {key} untracked");
    }
    let stats = l.keyed_stats();
    assert_eq!(stats.untracked, 0);
    assert_eq!(stats.keys as u64 + stats.evicted, 1_000);
}

/// Key 1 and a lone limiter spend a burst of 3 at 1000 ms; at 1301 ms (at
/// rest since 1300, plus the 1 ms grace) the key is pruned; then the clock
/// reads `back`. Returns the permits each then admits at once.
fn after_prune_and_step_back(back: Duration) -> (u32, u32) {
    let clock = ManualClock::new();
    let l = limiter::<u32>(&clock);
    let one = lone(&clock);
    clock.set(ms(1000));
    l.try_take_n(&1, 3).unwrap();
    one.try_take_n(3).unwrap();
    clock.set(ms(1301));
    assert_eq!(l.prune(), 1);
    clock.set(back);
    (
        drain(|| l.try_take(&1).is_ok()),
        drain(|| one.try_take().is_ok()),
    )
}

#[test]
fn a_clock_stepping_back_after_a_prune_admits_early_only_past_the_grace() {
    // Back by the grace: the pruned key decides as its dropped state would.
    assert_eq!(after_prune_and_step_back(ms(1300)), (3, 3));
    // Back by more (a wall clock set back), as documented: nothing of the
    // key is left, so it has a whole burst where its state gave 2.
    assert_eq!(after_prune_and_step_back(ms(1200)), (3, 2));
}

/// Keys at rest cost nothing for long: a shard whose table fills drops its
/// keys at rest before it grows. A stream of 200,000 new keys, each at rest
/// 2 ms after its one take (1000/s, slack 0, plus the 1 ms grace), arriving
/// one per microsecond, has about 2,000 keys busy at any time. A ceiling of
/// 100,000 keys gives 128 shards; each sweeps when its table (a few dozen
/// entries) fills, and frees nearly all of it, so the map stays at a few
/// thousand keys. Without those sweeps only the ceiling would bound it.
#[test]
fn a_stream_of_new_keys_coming_to_rest_keeps_the_map_near_the_busy_ones() {
    let clock = ManualClock::new();
    let limiter = KeyedLimiter::<u64>::builder(Rate::per_second(1000))
        .slack(0)
        .max_keys(100_000)
        .clock(clock.clone())
        .build()
        .unwrap();
    let mut most = 0;
    for key in 0..200_000u64 {
        limiter.try_take(&key).unwrap();
        clock.advance(Duration::from_micros(1));
        most = most.max(limiter.len());
    }
    println!("most keys tracked at once: {most}");
    assert!(most < 20_000, "{most} keys tracked, about 2,000 busy");
}

/// At the ceiling, keys at rest in *any* shard make room before a new key
/// is refused: 64 keys fill a ceiling of 64 (64 shards, so a new key's own
/// shard rarely holds one of them), all come to rest, and 64 new keys are
/// all admitted under `Refuse`; only the next one, with 64 busy keys
/// tracked, is refused.
#[test]
fn at_the_ceiling_keys_at_rest_in_other_shards_make_room_first() {
    let clock = ManualClock::new();
    let limiter = KeyedLimiter::<u32>::builder(Rate::per_second(1000))
        .slack(0)
        .max_keys(64)
        .when_full(WhenFull::Refuse)
        .clock(clock.clone())
        .build()
        .unwrap();
    for key in 0..64 {
        limiter.try_take(&key).unwrap();
    }
    assert_eq!(limiter.len(), 64);
    // 1 ms to rest, plus the 1 ms grace.
    clock.advance(ms(5));
    for key in 64..128 {
        assert_eq!(limiter.try_take(&key).map(drop), Ok(()), "key {key}");
    }
    assert_eq!(limiter.len(), 64);
    assert_eq!(
        limiter.try_take(&1000),
        Err(Error::TooManyKeys { max_keys: 64 })
    );
    assert_eq!(limiter.keyed_stats().pruned, 64);
}

/// A pruned key's admissions and refusals stay in `stats()`.
#[test]
fn stats_keep_the_counts_of_pruned_keys() {
    let clock = ManualClock::new();
    let limiter = KeyedLimiter::<u32>::builder(Rate::per_second(1000))
        .slack(0)
        .clock(clock.clone())
        .build()
        .unwrap();
    limiter.try_take(&1).unwrap();
    for _ in 0..3 {
        assert!(limiter.try_take(&1).is_err());
    }
    clock.advance(ms(5));
    limiter.prune();
    let stats = limiter.keyed_stats();
    assert_eq!((stats.keys, stats.pruned), (0, 1));
    assert_eq!((stats.admitted, stats.refused), (1, 3));
}

/// An evicted key's admissions and refusals stay in `stats()`, and each
/// eviction is counted: a ceiling of 1 key, two busy keys in turn.
#[test]
fn stats_keep_the_counts_of_evicted_keys() {
    let limiter = KeyedLimiter::<u32>::builder(Rate::per_hour(1))
        .slack(0)
        .max_keys(1)
        .when_full(WhenFull::Evict)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    limiter.try_take(&1).unwrap();
    assert!(limiter.try_take(&1).is_err());
    limiter.try_take(&2).unwrap(); // evicts 1, busy for an hour
    limiter.try_take(&1).unwrap(); // evicts 2
    let stats = limiter.keyed_stats();
    assert_eq!((stats.keys, stats.evicted), (1, 2));
    assert_eq!((stats.admitted, stats.refused), (3, 1));
}

#[test]
fn an_override_set_again_keeps_its_place_in_the_limits() {
    let clock = ManualClock::new();
    let l = limiter::<String>(&clock);
    for key in ["a", "b", "a"] {
        l.set_override(key.to_owned(), Rate::per_second(7), 1)
            .unwrap();
    }
    let limits = l.limits();
    let keys: Vec<&str> = limits.overrides().iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["a", "b"]);
}
