//! `PacedExt`: an iterator's items paced through a blocking limiter.

use std::time::Duration;

use paceline::{clock::ManualClock, AtomicLimiter, PacedExt, Rate, Take, Unlimited};

#[test]
fn paced_iterator_takes_one_permit_per_item_in_order() {
    let clock = ManualClock::with_auto_advance();
    let limiter = AtomicLimiter::builder(Rate::per_second(10))
        .clock(clock.clone())
        .build()
        .unwrap();
    let seen: Vec<(char, Duration)> = "abcd"
        .chars()
        .paced(&limiter)
        .map(|c| (c, clock.elapsed()))
        .collect();
    let ms = Duration::from_millis(100);
    assert_eq!(
        seen,
        [
            ('a', Duration::ZERO),
            ('b', ms),
            ('c', ms * 2),
            ('d', ms * 3)
        ]
    );
}

#[test]
fn exhausted_iterator_spends_no_permit() {
    let clock = ManualClock::with_auto_advance();
    let limiter = AtomicLimiter::builder(Rate::per_second(10))
        .slack(0)
        .clock(clock.clone())
        .build()
        .unwrap();
    let mut paced = [1, 2].into_iter().paced(&limiter);
    assert_eq!(paced.len(), 2);
    assert_eq!(paced.by_ref().collect::<Vec<_>>(), [1, 2]);
    assert_eq!(paced.next(), None);
    // Two permits (0 and 100 ms); pulling `None` waited for no third.
    assert_eq!(clock.elapsed(), Duration::from_millis(100));
    assert_eq!(limiter.next_free(), Duration::from_millis(100));
}

#[test]
fn paced_iterator_accepts_any_limiter_behind_dyn() {
    let limiters: [&dyn Take; 2] = [&Unlimited, &AtomicLimiter::new(Rate::per_second(1000))];
    for limiter in limiters {
        assert_eq!((0..3).paced(limiter).sum::<i32>(), 3);
    }
}
