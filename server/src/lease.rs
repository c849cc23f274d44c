//! Leased batches of a hot counter's window, so that one descriptor's
//! traffic is not one store round trip per request: a replica asks the
//! store for a batch of the window's hits in one `INCRBY` (the store's own
//! add, as for any hit), spends it locally, and asks again when it is
//! spent.
//!
//! # The bound
//! A batch of `b` added to a window's counter that reads `r` after the add
//! holds the hits numbered `r - b + 1 ..= r` of that window, across every
//! replica (the store orders the adds); the replica admits only those
//! numbered up to the limit, `min(b, limit - (r - b))`, and only in that
//! window. So every replica together admits at most the limit in each
//! window, as without leases; a replica leaves at most one batch unspent
//! at a window's end (counted in the store, admitted nowhere), and a
//! batch is at most a sixteenth of the limit.
//!
//! Once the store's count reaches the limit, the replica refuses the
//! window's hits locally until the window ends: those refusals are not
//! added to the store (envoyproxy/ratelimit adds every hit), and a leased
//! counter's remaining is what the store counted less what the replica
//! still holds. A counter is leased when its rule says `leased: true`, or
//! (`PACELINE_LEASE_ABOVE`) once this replica sends it more than that many
//! hits in one second, for the rest of its window.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A batch spent sooner than this doubles the next one.
const FAST: Duration = Duration::from_millis(10);
/// A batch spent slower than this halves the next one.
const SLOW: Duration = Duration::from_millis(100);
/// The first batch.
const FIRST: u64 = 8;
/// The most hits one batch holds, whatever the limit.
const MAX_BATCH: u64 = 1 << 16;
/// The most counters looked at for heat in one second.
const KEEP: usize = 4096;
/// The most counters leased at once; one more is counted unleased until
/// a window ends and makes room.
const MAX_CELLS: usize = 65_536;

/// What a replica holds of one counter's window.
#[derive(Debug)]
struct Held {
    /// The window's start, Unix seconds.
    window: u64,
    /// The window's length, seconds.
    length: u64,
    /// Hits held, not yet admitted.
    left: u64,
    /// The store's count after this replica's last batch, at most the
    /// limit.
    counted: u64,
    /// The store's count has reached the limit: the window's hits are
    /// refused here.
    spent: bool,
    /// The next batch's size.
    batch: u64,
    /// When the last batch came.
    since: Instant,
}

impl Held {
    fn new(window: u64, length: u64) -> Held {
        Held {
            window,
            length,
            left: 0,
            counted: 0,
            spent: false,
            batch: FIRST,
            since: Instant::now(),
        }
    }
}

/// One counter's window, as the store names it (its cache key and the
/// window's start).
pub struct Counter<'a> {
    /// The store's key.
    pub name: &'a str,
    /// The store's key of the same counter's window before this one
    /// (whose batch size this one starts from).
    pub previous: &'a str,
    /// The window's start, Unix seconds.
    pub window: u64,
    /// The window's length, seconds.
    pub length: u64,
    /// The rule's limit.
    pub limit: u64,
}

/// A leased counter's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Admitted; the count the decision reads (at most the limit).
    Admitted(u64),
    /// Refused.
    Refused,
    /// Not leased (too many counters are): to be counted as any other.
    Unleased,
}

/// The leased counters by the store's name of their window, and the
/// second their ended windows were last dropped.
#[derive(Default)]
struct Cells {
    by_name: HashMap<String, Arc<tokio::sync::Mutex<Held>>>,
    pruned: u64,
}

/// Each counter looked at for heat: its second and its hits in it.
type Seen = HashMap<String, (u64, u64)>;

/// Every leased counter of this replica.
#[derive(Default)]
pub struct Leases {
    held: Mutex<Cells>,
    /// `PACELINE_LEASE_ABOVE`: hits per second on this replica past
    /// which a counter is leased.
    above: Option<u64>,
    /// The unleased counters' hits here in their last second.
    /// (And the second they were last pruned.)
    seen: Mutex<(Seen, u64)>,
}

impl Leases {
    /// Leases for the counters rules mark, and (`above`) for those found
    /// hot.
    pub fn new(above: Option<u64>) -> Leases {
        Leases {
            held: Mutex::default(),
            above,
            seen: Mutex::default(),
        }
    }

    /// Whether counters are looked at for heat (`PACELINE_LEASE_ABOVE`).
    pub fn finds(&self) -> bool {
        self.above.is_some()
    }

    /// Whether `name` is leased here now (found hot in its window).
    pub fn found(&self, name: &str) -> bool {
        self.above.is_some() && self.cells().by_name.contains_key(name)
    }

    /// After `hits` on `counter` went to the store unleased at `now_s`:
    /// leases it from now on (in its window) once this replica has sent
    /// it more than `PACELINE_LEASE_ABOVE` hits in one second.
    pub fn observe(&self, counter: &Counter<'_>, hits: u64, now_s: u64) {
        let Some(above) = self.above else { return };
        if counter.limit < 16 {
            return;
        }
        let hot = {
            let mut guard = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
            let (seen, pruned) = &mut *guard;
            if seen.len() >= KEEP && !seen.contains_key(counter.name) {
                // Only this second's counters count: the others make room,
                // dropped at most once a second; else (as many in this
                // second already) this one is looked at from the next.
                if *pruned != now_s {
                    *pruned = now_s;
                    seen.retain(|_, (second, _)| *second == now_s);
                }
                if seen.len() >= KEEP {
                    return;
                }
            }
            let (second, n) = seen.entry(counter.name.to_owned()).or_insert((now_s, 0));
            if *second != now_s {
                (*second, *n) = (now_s, 0);
            }
            *n += hits;
            *n > above
        };
        if hot {
            let _ = self.cell(counter, now_s);
            self.seen
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .0
                .remove(counter.name);
            tracing::debug!(counter = counter.name, "a hot counter, leased");
        }
    }

    fn cells(&self) -> std::sync::MutexGuard<'_, Cells> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The cell of `counter`, made if missing; none when `MAX_CELLS` are
    /// leased in windows not ended.
    fn cell(&self, counter: &Counter<'_>, now_s: u64) -> Option<Arc<tokio::sync::Mutex<Held>>> {
        let mut cells = self.cells();
        if let Some(cell) = cells.by_name.get(counter.name) {
            return Some(Arc::clone(cell));
        }
        if cells.by_name.len() >= MAX_CELLS {
            // Drop the counters of windows that have ended (one busy now
            // is kept until the next time), at most once a second.
            if cells.pruned != now_s {
                cells.pruned = now_s;
                cells.by_name.retain(|_, cell| {
                    cell.try_lock()
                        .map_or(true, |h| h.window + h.length > now_s)
                });
            }
            if cells.by_name.len() >= MAX_CELLS {
                return None;
            }
        }
        let held = &mut cells.by_name;
        let mut fresh = Held::new(counter.window, counter.length);
        // A counter hot in the last window starts at the batch it had
        // grown to there.
        if let Some(Ok(last)) = held.get(counter.previous).map(|c| c.try_lock()) {
            fresh.batch = last.batch;
        }
        let cell = Arc::new(tokio::sync::Mutex::new(fresh));
        held.insert(counter.name.to_owned(), Arc::clone(&cell));
        Some(cell)
    }

    /// `hits` on the leased `counter`: spent from what this replica holds,
    /// else from a batch `add` asks the store for (its argument the
    /// batch's size, its answer the count after).
    pub async fn take<F, Fut>(
        &self,
        counter: &Counter<'_>,
        hits: u64,
        now_s: u64,
        add: F,
    ) -> Result<Answer, String>
    where
        F: FnOnce(u64) -> Fut,
        Fut: std::future::Future<Output = Result<u64, String>>,
    {
        let Some(cell) = self.cell(counter, now_s) else {
            return Ok(Answer::Unleased);
        };
        let mut held = cell.lock().await;
        if held.window != counter.window || held.length != counter.length {
            let batch = held.batch;
            *held = Held::new(counter.window, counter.length);
            held.batch = batch;
        }
        if held.left >= hits {
            held.left -= hits;
            return Ok(Answer::Admitted(held.counted.saturating_sub(held.left)));
        }
        if held.spent {
            return Ok(Answer::Refused);
        }
        let cap = (counter.limit / 16).clamp(1, MAX_BATCH);
        let took = held.since.elapsed();
        if took < FAST {
            held.batch = (held.batch * 2).min(cap);
        } else if took > SLOW {
            held.batch = (held.batch / 2).max(1);
        }
        let batch = held.batch.min(cap).max(hits - held.left);
        let after = add(batch).await?;
        let granted = batch.min(counter.limit.saturating_sub(after.saturating_sub(batch)));
        held.left += granted;
        held.counted = after.min(counter.limit);
        held.spent = after >= counter.limit;
        held.since = Instant::now();
        if held.left >= hits {
            held.left -= hits;
            Ok(Answer::Admitted(held.counted.saturating_sub(held.left)))
        } else {
            Ok(Answer::Refused)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A counter's window in a store that adds as `INCRBY` does.
    fn counter(limit: u64) -> Counter<'static> {
        Counter {
            name: "d_k_v_60",
            previous: "d_k_v_0",
            window: 60,
            length: 60,
            limit,
        }
    }

    /// The window after `counter`'s (made by [`counter`]).
    fn next_window(counter: &Counter<'static>) -> Counter<'static> {
        Counter {
            name: "d_k_v_120",
            previous: "d_k_v_60",
            window: 120,
            ..*counter
        }
    }

    async fn take(leases: &Leases, store: &AtomicU64, c: &Counter<'_>, hits: u64) -> Answer {
        let add = |b: u64| async move { Ok(store.fetch_add(b, Ordering::SeqCst) + b) };
        leases.take(c, hits, 61, add).await.unwrap()
    }

    fn held(leases: &Leases) -> u64 {
        let cells = leases.cells();
        cells
            .by_name
            .values()
            .map(|c| c.try_lock().unwrap().left)
            .sum()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn replicas_together_admit_the_limit_and_no_more() {
        let store = Arc::new(AtomicU64::new(0));
        let replicas: Vec<Arc<Leases>> = (0..3).map(|_| Arc::new(Leases::new(None))).collect();
        let admitted = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for t in 0..12u64 {
            let (store, leases, admitted) = (
                Arc::clone(&store),
                Arc::clone(&replicas[(t % 3) as usize]),
                Arc::clone(&admitted),
            );
            tasks.push(tokio::spawn(async move {
                for i in 0..400u64 {
                    let hits = 1 + (i + t) % 3;
                    if let Answer::Admitted(count) =
                        take(&leases, &store, &counter(1000), hits).await
                    {
                        assert!(count <= 1000, "a decision read {count}");
                        admitted.fetch_add(hits, Ordering::SeqCst);
                    }
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let admitted = admitted.load(Ordering::SeqCst);
        let unspent: u64 = replicas.iter().map(|l| held(l)).sum();
        // Every hit the store counted up to the limit is admitted or still
        // held (those over it were granted to no one).
        assert!(store.load(Ordering::SeqCst) >= 1000);
        assert_eq!(
            admitted + unspent,
            1000,
            "admitted {admitted}, held {unspent}"
        );
        assert!(
            unspent <= 3 * 2,
            "a replica holds less than a hit of 3 once spent: {unspent}"
        );
    }

    #[tokio::test]
    async fn a_batch_grows_while_spent_fast_and_never_passes_a_sixteenth() {
        let store = AtomicU64::new(0);
        let leases = Leases::new(None);
        let c = counter(1600);
        let mut round_trips = 0;
        let mut last = 0;
        for _ in 0..1000 {
            assert!(matches!(
                take(&leases, &store, &c, 1).await,
                Answer::Admitted(_)
            ));
            let now = store.load(Ordering::SeqCst);
            if now != last {
                round_trips += 1;
                assert!(now - last <= 100, "a batch of {}", now - last);
                last = now;
            }
        }
        assert!(round_trips < 20, "{round_trips} round trips for 1000 hits");
    }

    #[tokio::test]
    async fn past_max_cells_a_counter_is_unleased_until_a_window_ends() {
        let leases = Leases::new(None);
        // Each counter's first batch: the count after is the batch.
        let add = |b: u64| async move { Ok(b) };
        let names: Vec<String> = (0..=MAX_CELLS).map(|i| format!("u{i}_60")).collect();
        fn at(name: &str) -> Counter<'_> {
            Counter {
                name,
                previous: "",
                window: 60,
                length: 60,
                limit: 1000,
            }
        }
        for name in &names[..MAX_CELLS] {
            let a = leases.take(&at(name), 1, 61, add).await.unwrap();
            assert!(matches!(a, Answer::Admitted(_)));
        }
        let one_more = leases.take(&at(&names[MAX_CELLS]), 1, 61, add).await;
        assert_eq!(one_more, Ok(Answer::Unleased));
        // Their window over, the next one's counter finds room.
        let next = Counter {
            name: "u0_120",
            window: 120,
            ..at("")
        };
        let a = leases.take(&next, 1, 121, add).await.unwrap();
        assert!(matches!(a, Answer::Admitted(_)), "{a:?}");
        assert_eq!(leases.cells().by_name.len(), 1);
    }

    #[tokio::test]
    async fn a_hit_larger_than_the_batch_asks_for_itself_and_refuses_past_the_limit() {
        let store = AtomicU64::new(0);
        let leases = Leases::new(None);
        let c = counter(100);
        assert_eq!(take(&leases, &store, &c, 60).await, Answer::Admitted(60));
        assert_eq!(store.load(Ordering::SeqCst), 60);
        // 40 are left in the window: 41 are refused, and the 40 they
        // added to the store stay held here for smaller hits.
        assert_eq!(take(&leases, &store, &c, 41).await, Answer::Refused);
        assert_eq!(held(&leases), 40);
        assert_eq!(take(&leases, &store, &c, 40).await, Answer::Admitted(100));
        // Spent: refused here, without asking the store.
        assert_eq!(take(&leases, &store, &c, 1).await, Answer::Refused);
        assert_eq!(store.load(Ordering::SeqCst), 101);
    }

    #[tokio::test]
    async fn a_new_window_starts_afresh() {
        let store = AtomicU64::new(0);
        let leases = Leases::new(None);
        let c = counter(16);
        for _ in 0..16 {
            assert!(matches!(
                take(&leases, &store, &c, 1).await,
                Answer::Admitted(_)
            ));
        }
        assert_eq!(take(&leases, &store, &c, 1).await, Answer::Refused);
        let next = next_window(&c);
        let fresh = AtomicU64::new(0);
        assert_eq!(take(&leases, &fresh, &next, 1).await, Answer::Admitted(1));
    }

    #[tokio::test]
    async fn the_next_window_starts_at_the_batch_the_last_grew_to() {
        let leases = Leases::new(None);
        let c = counter(1 << 20);
        let store = AtomicU64::new(0);
        for _ in 0..2000 {
            let _ = take(&leases, &store, &c, 1).await;
        }
        let grown = leases.cells().by_name["d_k_v_60"].try_lock().unwrap().batch;
        assert!(grown >= 256, "spent fast, the batch grew: {grown}");
        let next = next_window(&c);
        let fresh = AtomicU64::new(0);
        let _ = take(&leases, &fresh, &next, 1).await;
        assert!(
            fresh.load(Ordering::SeqCst) >= grown,
            "the first batch of the next window"
        );
    }

    #[tokio::test]
    async fn a_failed_batch_is_the_store_s_error_and_what_is_held_is_kept() {
        let leases = Leases::new(None);
        let store = AtomicU64::new(0);
        let c = counter(160);
        assert!(matches!(
            take(&leases, &store, &c, 1).await,
            Answer::Admitted(_)
        ));
        let before = held(&leases);
        let failed = leases
            .take(&c, before + 1, 61, |_| async {
                Err("redis error (here): down".to_owned())
            })
            .await;
        assert_eq!(failed, Err("redis error (here): down".to_owned()));
        assert_eq!(held(&leases), before);
    }

    #[test]
    fn a_counter_is_found_hot_past_its_hits_in_one_second() {
        let leases = Leases::new(Some(100));
        let c = counter(1000);
        // 100 in second 61, then 100 in second 62: never past 100.
        leases.observe(&c, 60, 61);
        leases.observe(&c, 40, 61);
        leases.observe(&c, 100, 62);
        assert!(!leases.found(c.name));
        leases.observe(&c, 1, 62);
        assert!(leases.found(c.name));
        // A limit under 16 is never leased; nor is anything without the
        // setting.
        let small = Leases::new(Some(1));
        small.observe(&counter(15), 1000, 61);
        assert!(!small.found("d_k_v_60"));
        let off = Leases::new(None);
        off.observe(&c, u64::MAX, 61);
        assert!(!off.found(c.name));
    }
}
