//! `PostgresLimiter` against a real PostgreSQL this file starts itself: one
//! limit shared by clients in separate processes, the calls' meaning, what
//! is written (and what is not), the schema, pruning, transactions, and what
//! callers see while the server is down, restarted, hung or stuck on a lock.
#![cfg(feature = "postgres")]

use paceline::Take;
#[path = "support/pg_server.rs"]
mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use paceline::postgres::{deadpool_postgres, tokio_postgres, Error, FailPolicy, PostgresLimiter};
use paceline::Rate;
use support::PgServer;

/// 1000 per second: T = 1 ms.
const T_NS: u64 = 1_000_000;
/// 50 ms banked (as for Redis: covers clients that all stall together on a
/// loaded machine).
const SLACK: u64 = 50;
/// How long the shared-limit run measures.
const MEASURE: Duration = Duration::from_secs(3);

static ONE_RUN_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_run_at_a_time() -> MutexGuard<'static, ()> {
    ONE_RUN_AT_A_TIME
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

fn limiter(server: &PgServer, rate: Rate, slack: u64) -> PostgresLimiter {
    let lim = PostgresLimiter::builder(&server.conn(), rate)
        .slack(slack)
        .build()
        .unwrap();
    lim.install().unwrap();
    lim
}

/// The server's Unix time, ns.
fn server_time(server: &PgServer) -> u64 {
    server
        .psql("SELECT (extract(epoch FROM clock_timestamp()) * 1000000000)::bigint")
        .parse()
        .unwrap()
}

/// `xmin:ctid` of `key`'s row (empty if none): changes with every write of
/// the row, a lock included (a row lock sets xmax, not these; a `FOR
/// UPDATE` is checked apart).
fn row_version(server: &PgServer, key: &str) -> String {
    server.psql(&format!(
        "SELECT xmin::text || ':' || ctid::text || ':' || xmax::text FROM paceline_limits WHERE key = '{key}'"
    ))
}

fn rows(server: &PgServer) -> u64 {
    server
        .psql("SELECT count(*) FROM paceline_limits")
        .parse()
        .unwrap()
}

fn pace_until(limiter: &PostgresLimiter, key: &str, stop: u64) -> Vec<u64> {
    let mut times = Vec::new();
    loop {
        let at = limiter.take(key).expect("take").at().as_nanos() as u64;
        times.push(at);
        if at >= stop {
            return times;
        }
    }
}

/// Over any window of length `w`, at most `slack + 1 + w / T` permits; and
/// within 1 % of the rate over `[from, from + MEASURE)`.
fn check_shared_limit(mut times: Vec<u64>, from: u64) -> f64 {
    times.sort_unstable();
    // Two permits may carry one time: a permit from banked credit goes at
    // once, stamped with the server's clock, which counts microseconds, and
    // two connections' calls can start within one. A slot handed out twice
    // would be one permit too many, which the window bound below catches.
    let tau = i128::from(SLACK * T_NS);
    let (mut min_h, mut worst) = (i128::MAX, 0);
    for (k, &g) in times.iter().enumerate() {
        let h = k as i128 * i128::from(T_NS) - i128::from(g);
        min_h = min_h.min(h);
        worst = worst.max(h - min_h);
        assert!(
            h - min_h <= tau,
            "more than slack + 1 + w / T permits in a window ending at permit {k}"
        );
    }
    println!(
        "largest excess over 1 + w / T in a window: {:.1} permits; slack {SLACK}",
        worst as f64 / T_NS as f64
    );
    let to = from + MEASURE.as_nanos() as u64;
    let count = times.iter().filter(|&&g| g >= from && g < to).count();
    let rate = count as f64 / MEASURE.as_secs_f64();
    assert!(
        (rate - 1000.0).abs() <= 10.0,
        "achieved {rate}/s over {MEASURE:?}, not within 1 % of 1000/s"
    );
    rate
}

const CHILD_ENV: &str = "PACELINE_POSTGRES_CHILD";

#[test]
fn eight_clients_in_four_processes_share_one_limit_of_1000_per_second() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        // The child's half: two clients, each a limiter of its own (its own
        // pool); print every permit's time for the parent.
        let (conn, stop) = spec.split_once(';').unwrap();
        let stop: u64 = stop.parse().unwrap();
        let clients: Vec<_> = (0..2)
            .map(|_| {
                let conn = conn.to_owned();
                thread::spawn(move || {
                    // Generous timeouts: this test is about the rate, on a
                    // machine its other tests (and other work) load too.
                    let lim = PostgresLimiter::builder(&conn, Rate::per_second(1000))
                        .slack(SLACK)
                        .response_timeout(Duration::from_secs(10))
                        .connect_timeout(Duration::from_secs(10))
                        .pool_size(1)
                        .build()
                        .unwrap();
                    pace_until(&lim, "processes", stop)
                })
            })
            .collect();
        for c in clients {
            for t in c.join().unwrap() {
                println!("PERMIT {t}");
            }
        }
        return;
    }
    let _one = one_run_at_a_time();
    let server = PgServer::start();
    limiter(&server, Rate::per_second(1000), SLACK); // install
    let from = server_time(&server) + 1_500_000_000;
    let stop = from + MEASURE.as_nanos() as u64 + 50_000_000;
    let children: Vec<_> = (0..4)
        .map(|_| {
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "eight_clients_in_four_processes_share_one_limit_of_1000_per_second",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_ENV, format!("{};{stop}", server.conn()))
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn a child process")
        })
        .collect();
    let mut times = Vec::new();
    for mut child in children {
        let out = BufReader::new(child.stdout.take().unwrap());
        let mine: Vec<u64> = out
            .lines()
            .map_while(Result::ok)
            .filter_map(|l| l.strip_prefix("PERMIT ").map(|t| t.parse().unwrap()))
            .collect();
        assert!(child.wait().unwrap().success(), "a child process failed");
        assert!(!mine.is_empty(), "a child process took nothing");
        assert!(
            mine.iter().min().unwrap() < &from,
            "a child process started after the measurement began"
        );
        times.extend(mine);
    }
    let rate = check_shared_limit(times, from);
    println!("8 clients, 4 processes: {rate:.1}/s");
}

#[test]
fn calls_refuse_wait_and_write_as_documented() {
    let server = PgServer::start();
    // 2 per second, slack 2: T = 500 ms (long beside a psql call on a
    // loaded machine).
    let lim = limiter(&server, Rate::per_second(2), 2);
    // An absent key: the whole burst; can_take writes nothing.
    assert!(lim.can_take("k", 3).unwrap());
    assert!(!lim.can_take("k", 4).unwrap());
    assert_eq!(lim.available("k").unwrap(), 3);
    assert_eq!(lim.next_free("k").unwrap(), Duration::ZERO);
    assert_eq!(rows(&server), 0, "peeks wrote a row");
    // The slots are on the server's clock; a take never returns before its
    // slot, so never before (the burst's request) + k * T here. (Only lower
    // bounds: a loaded machine may make anything later.)
    const T: Duration = Duration::from_millis(500);
    let burst = Instant::now();
    lim.try_take_n("k", 3).unwrap();
    let written = row_version(&server, "k");
    assert!(!written.is_empty());
    // A refusal: the wait, and the row untouched (not even locked).
    match lim.try_take("k") {
        Err(Error::RetryAfter(d)) => {
            assert!(d.duration() > Duration::ZERO && d.duration() <= T, "{d:?}")
        }
        other => panic!("expected RetryAfter, got {other:?}"),
    }
    match lim.take_timeout("k", Duration::from_millis(1)) {
        Err(Error::QueueFull { .. }) => {}
        other => panic!("expected QueueFull, got {other:?}"),
    }
    match lim.try_take_n("k", 4) {
        Err(Error::ExceedsBurst { .. }) => {}
        other => panic!("expected ExceedsBurst, got {other:?}"),
    }
    assert!(!lim.can_take("k", 1).unwrap() || burst.elapsed() >= T);
    assert_eq!(
        row_version(&server, "k"),
        written,
        "a refusal or a peek wrote"
    );
    // take waits out its slot: one interval after the burst.
    lim.take("k").unwrap();
    assert!(burst.elapsed() >= T, "{:?}", burst.elapsed());
    assert_ne!(row_version(&server, "k"), written, "a grant writes");
    // take_timeout within its bound books and waits for the next.
    lim.take_timeout("k", Duration::from_secs(1)).unwrap();
    assert!(burst.elapsed() >= 2 * T, "{:?}", burst.elapsed());
    // Keys are separate; with_limit shares the table at another rate.
    assert_eq!(lim.available("other").unwrap(), 3);
    // (At 2/s the eleventh is refused unless the machine stalls 500 ms
    // between two calls; at 1000/s a 1 ms stall under a loaded test run
    // admitted it.)
    let slow = lim.with_limit(Rate::per_second(2), 9).unwrap();
    slow.try_take_n("f", 10).unwrap();
    assert!(slow.try_take("f").is_err());
    // reset: the row is gone, the key back at rest.
    assert!(lim.reset("k").unwrap());
    assert!(!lim.reset("k").unwrap());
    assert_eq!(row_version(&server, "k"), "");
    assert_eq!(lim.available("k").unwrap(), 3);
    // A cost of 0 is admitted and writes nothing.
    lim.try_take_n("zero", 0).unwrap();
    assert_eq!(row_version(&server, "zero"), "");
    lim.ping().unwrap();
}

#[test]
fn install_is_idempotent_safe_concurrently_unlogged_on_request_and_checks_the_shape() {
    let server = PgServer::start();
    let build = |table: &str, unlogged: bool| {
        PostgresLimiter::builder(&server.conn(), Rate::per_second(10))
            .table(table)
            .unlogged(unlogged)
            .build()
            .unwrap()
    };
    // Eight installs at once, then again: no error.
    let installs: Vec<_> = (0..8)
        .map(|_| {
            let lim = build("paceline_limits", false);
            thread::spawn(move || lim.install())
        })
        .collect();
    for i in installs {
        i.join().unwrap().unwrap();
    }
    build("paceline_limits", false).install().unwrap();
    assert_eq!(
        server.psql("SELECT relpersistence FROM pg_class WHERE relname = 'paceline_limits'"),
        "p"
    );
    assert_eq!(
        server.psql("SELECT indexdef FROM pg_indexes WHERE indexname = 'paceline_limits_rest_at'"),
        "CREATE INDEX paceline_limits_rest_at ON public.paceline_limits USING btree (rest_at)"
    );
    // UNLOGGED, in a schema, with a name that needs quoting.
    server.psql("CREATE SCHEMA app");
    let lim = build("app.Limits", true);
    lim.install().unwrap();
    assert!(lim
        .schema_sql()
        .starts_with("CREATE UNLOGGED TABLE IF NOT EXISTS \"app\".\"Limits\""));
    assert_eq!(
        server.psql("SELECT relpersistence FROM pg_class WHERE relname = 'Limits'"),
        "u"
    );
    lim.try_take("x").unwrap();
    assert_eq!(server.psql("SELECT count(*) FROM app.\"Limits\""), "1");
    // A table of another shape: a clear error, naming it.
    server.psql("CREATE TABLE other (key text PRIMARY KEY, n int)");
    match build("other", false).install() {
        Err(Error::Config(e)) => assert!(e.contains("\"other\""), "{e}"),
        other => panic!("expected a config error, got {other:?}"),
    }
    // Bad names are refused at build.
    match PostgresLimiter::builder(&server.conn(), Rate::per_second(1))
        .table("a.")
        .build()
    {
        Err(Error::Config(e)) => assert!(e.contains("\"a.\""), "{e}"),
        other => panic!("expected a config error, got {other:?}"),
    }
}

#[test]
fn a_permit_taken_inside_the_applications_transaction_survives_its_rollback() {
    let server = PgServer::start();
    // The application's own pool, handed to the limiter.
    let config: tokio_postgres::Config = server.conn().parse().unwrap();
    let manager = deadpool_postgres::Manager::new(config, tokio_postgres::NoTls);
    let pool = deadpool_postgres::Pool::builder(manager)
        .max_size(2)
        .build()
        .unwrap();
    let lim = PostgresLimiter::from_pool(pool.clone(), Rate::per_minute(1))
        .slack(0)
        .build()
        .unwrap();
    lim.install().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut app = pool.get().await.unwrap();
        let tx = app.transaction().await.unwrap();
        tx.execute("CREATE TABLE orders (id int)", &[])
            .await
            .unwrap();
        // The throttle, from inside the app's unit of work: on the pool's
        // other connection, in a statement of its own.
        let lim2 = lim.clone();
        tokio::task::spawn_blocking(move || lim2.try_take("checkout"))
            .await
            .unwrap()
            .unwrap();
        tx.rollback().await.unwrap();
    });
    assert_eq!(
        server.psql("SELECT count(*) FROM pg_class WHERE relname = 'orders'"),
        "0",
        "the app's transaction rolled back"
    );
    assert!(
        !row_version(&server, "checkout").is_empty(),
        "the permit's row is kept"
    );
    assert!(
        lim.try_take("checkout").is_err(),
        "and the permit stays spent"
    );
    assert!(pool.status().size <= 2, "the limiter used the app's pool");
}

#[test]
fn pruning_deletes_rows_at_rest_in_batches_through_the_index() {
    let server = PgServer::start();
    // 1000/s, slack 0: a row is at rest 1 ms after its grant, prunable
    // once its rest_at second has passed.
    let lim = PostgresLimiter::builder(&server.conn(), Rate::per_second(1000))
        .slack(0)
        .prune(0, 100) // by hand only
        .build()
        .unwrap();
    lim.install().unwrap();
    for i in 0..250 {
        lim.try_take(&format!("k{i}")).unwrap();
    }
    assert_eq!(rows(&server), 250);
    // Rows not yet at rest plus a second of grace stay (all of them, unless
    // this machine took over a second for the loop above).
    let early = lim.prune().unwrap();
    // rest_at rounds up to the second, plus a second of grace.
    thread::sleep(Duration::from_millis(2100));
    lim.try_take("fresh").unwrap();
    let late = lim.prune().unwrap();
    println!("pruned {early} early, {late} after 2.1 s");
    assert_eq!(early + late, 250, "every row at rest, in batches of 100");
    assert_eq!(rows(&server), 1, "the fresh key stays");
    // The batch walks the rest_at index (on a table big enough for the
    // planner to care), never the whole table.
    server.psql(
        "INSERT INTO paceline_limits SELECT 'f' || i, 0, NULL, 4000000000 + i \
         FROM generate_series(1, 20000) i; ANALYZE paceline_limits",
    );
    let plan = server.psql(
        "EXPLAIN DELETE FROM paceline_limits WHERE key IN (SELECT key FROM paceline_limits \
         WHERE rest_at < 1000 ORDER BY rest_at LIMIT 64 FOR UPDATE SKIP LOCKED) AND rest_at < 1000",
    );
    assert!(
        plan.contains("Index Scan using paceline_limits_rest_at"),
        "{plan}"
    );
    assert!(!plan.contains("Seq Scan"), "{plan}");
}

#[test]
fn automatic_pruning_keeps_idle_keys_from_piling_up() {
    let server = PgServer::start();
    let lim = PostgresLimiter::builder(&server.conn(), Rate::per_second(1000))
        .slack(0)
        .prune(4, 8)
        .build()
        .unwrap();
    lim.install().unwrap();
    for i in 0..100 {
        lim.try_take(&format!("old{i}")).unwrap();
    }
    thread::sleep(Duration::from_millis(2100));
    // The batches of the first 100 found nothing at rest: the schedule has
    // backed off to a batch every 4 << 3 = 32 writes. 200 new keys: the
    // first batch within 32 of them comes back full, and from then on one
    // every 4 (over 40 batches of up to 8 rows): every old row goes.
    for i in 0..200 {
        lim.try_take(&format!("new{i}")).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.psql("SELECT count(*) FROM paceline_limits WHERE key LIKE 'old%'") != "0" {
        assert!(Instant::now() < deadline, "old rows were not pruned");
        thread::sleep(Duration::from_millis(50));
    }
    assert!(rows(&server) <= 200);
}

const TIMEOUT: Duration = Duration::from_millis(300);
/// Scheduling noise on a loaded machine, on top of a timeout.
const MARGIN: Duration = Duration::from_millis(400);

/// A server that refuses the limiter's login answered: `Error::Script`,
/// which `FailPolicy::Open` never admits (a typo in the connection string
/// must not lift the limit), as a refused Redis `AUTH` is.
#[test]
fn a_refused_login_fails_closed_even_under_the_open_policy() {
    let server = PgServer::start();
    let conn = server.conn().replace("user=paceline", "user=nobody_here");
    let open = PostgresLimiter::builder(&conn, Rate::per_hour(1))
        .slack(0)
        .on_error(FailPolicy::Open)
        .build()
        .unwrap();
    for _ in 0..3 {
        let result = open.try_take("k");
        assert!(matches!(result, Err(Error::Script(_))), "{result:?}");
    }
}

fn faulty_limiter(server: &PgServer, policy: FailPolicy) -> PostgresLimiter {
    let lim = PostgresLimiter::builder(&server.conn(), Rate::per_minute(1))
        .slack(1000)
        .on_error(policy)
        .connect_timeout(TIMEOUT)
        .response_timeout(TIMEOUT)
        .build()
        .unwrap();
    lim.install().unwrap();
    lim
}

fn recovery_time(lim: &PostgresLimiter) -> Duration {
    let start = Instant::now();
    loop {
        match lim.try_take("k") {
            Ok(_) => return start.elapsed(),
            Err(e) => assert!(
                start.elapsed() < Duration::from_secs(10),
                "no recovery within 10 s: {e}"
            ),
        }
        thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn server_down_fails_closed_or_open_and_the_limiter_recovers_after_restart() {
    let mut server = PgServer::start();
    let closed = faulty_limiter(&server, FailPolicy::Closed);
    let open = faulty_limiter(&server, FailPolicy::Open);
    closed.try_take("k").unwrap();
    open.try_take("k").unwrap();
    server.stop();
    for _ in 0..3 {
        let start = Instant::now();
        match closed.try_take("k") {
            Err(Error::Unavailable(e)) => println!("down: {e}"),
            other => panic!("expected Unavailable, got {other:?}"),
        }
        assert!(
            start.elapsed() < TIMEOUT * 2 + MARGIN,
            "{:?}",
            start.elapsed()
        );
        assert!(matches!(closed.take("k"), Err(Error::Unavailable(_))));
        assert!(matches!(
            closed.can_take("k", 1),
            Err(Error::Unavailable(_))
        ));
        open.try_take("k").unwrap();
        open.take("k").unwrap();
        assert!(open.can_take("k", 1).unwrap());
        // Peeks and resets report the failure whatever the policy.
        assert!(matches!(open.available("k"), Err(Error::Unavailable(_))));
        assert!(matches!(open.reset("k"), Err(Error::Unavailable(_))));
    }
    server.restart();
    let took = recovery_time(&closed);
    println!("recovered {took:?} after the restart");
    // The state was kept across the restart (a logged table).
    assert_eq!(closed.available("k").unwrap(), 1001 - 3);
}

#[test]
fn a_hung_server_times_out_within_the_timeouts_and_recovers() {
    let server = PgServer::start();
    let lim = faulty_limiter(&server, FailPolicy::Closed);
    let open = faulty_limiter(&server, FailPolicy::Open);
    lim.try_take("k").unwrap();
    open.try_take("k").unwrap();
    server.pause();
    for _ in 0..3 {
        let start = Instant::now();
        match lim.try_take("k") {
            Err(Error::Timeout) => {}
            other => panic!("expected Timeout, got {other:?}"),
        }
        let took = start.elapsed();
        assert!(took >= TIMEOUT - Duration::from_millis(20), "{took:?}");
        assert!(took < TIMEOUT * 2 + MARGIN, "{took:?}");
        let start = Instant::now();
        open.try_take("k").unwrap();
        assert!(start.elapsed() < TIMEOUT * 2 + MARGIN);
    }
    server.resume();
    let took = recovery_time(&lim);
    println!("recovered {took:?} after SIGCONT");
}

#[test]
fn a_step_stuck_on_a_lock_ends_at_the_statement_timeout_and_the_connection_stays() {
    let server = PgServer::start();
    let lim = PostgresLimiter::builder(&server.conn(), Rate::per_minute(1))
        .slack(100)
        .statement_timeout(Duration::from_millis(200))
        .response_timeout(Duration::from_secs(3))
        .pool_size(1)
        .build()
        .unwrap();
    lim.install().unwrap();
    lim.try_take("k").unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (mut other, conn) = tokio_postgres::connect(&server.conn(), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        let tx = other.transaction().await.unwrap();
        tx.execute(
            "SELECT 1 FROM paceline_limits WHERE key = 'k' FOR UPDATE",
            &[],
        )
        .await
        .unwrap();
        let lim2 = lim.clone();
        let (result, took) = tokio::task::spawn_blocking(move || {
            let start = Instant::now();
            (lim2.try_take("k"), start.elapsed())
        })
        .await
        .unwrap();
        assert!(matches!(result, Err(Error::Timeout)), "{result:?}");
        assert!(took < Duration::from_millis(200) + MARGIN, "{took:?}");
        // Reads never wait on the lock, and the one connection still works.
        let lim2 = lim.clone();
        tokio::task::spawn_blocking(move || {
            assert!(lim2.can_take("k", 1).unwrap());
            lim2.try_take("other").unwrap();
        })
        .await
        .unwrap();
        tx.rollback().await.unwrap();
    });
    lim.try_take("k").unwrap();
    assert_eq!(lim.available("k").unwrap(), 101 - 2);
}

#[test]
fn stats_count_decisions_and_the_server_failures_under_either_policy() {
    for policy in [FailPolicy::Closed, FailPolicy::Open] {
        let mut server = PgServer::start();
        // 1 a minute, slack 1: a burst of 2, then refusals.
        let limiter = PostgresLimiter::builder(&server.conn(), Rate::per_minute(1))
            .slack(1)
            .on_error(policy)
            .connect_timeout(TIMEOUT)
            .response_timeout(TIMEOUT)
            .stats(true)
            .build()
            .unwrap();
        limiter.install().unwrap();
        let sibling = limiter.with_limit(Rate::per_minute(1), 0).unwrap();
        limiter.try_take("a").unwrap();
        limiter.take_n("b", 2).unwrap();
        assert!(limiter.try_take("b").is_err());
        assert!(limiter.try_take_n("c", 3).is_err()); // ExceedsBurst, no round trip
        assert!(sibling.try_take_n("d", u64::MAX).is_err()); // CostTooLarge
        sibling.try_take("d").unwrap();
        let stats = limiter.stats().unwrap();
        assert_eq!((stats.admitted, stats.permits, stats.refused), (3, 4, 3));
        assert_eq!((stats.failed, stats.cancelled), (0, 0));
        assert_eq!(sibling.stats(), Some(stats)); // one limiter's counts

        server.stop();
        let failed = limiter.try_take("e");
        let stats = limiter.stats().unwrap();
        assert_eq!(stats.failed, 1, "{policy:?}");
        match policy {
            FailPolicy::Closed => {
                assert!(failed.is_err());
                assert_eq!((stats.admitted, stats.refused), (3, 4));
            }
            FailPolicy::Open => {
                failed.unwrap();
                assert_eq!((stats.admitted, stats.refused), (4, 3));
            }
        }
    }
    // Without `.stats(true)`, nothing is counted.
    let server = PgServer::start();
    let limiter = limiter(&server, Rate::per_second(1), 1);
    limiter.try_take("a").unwrap();
    assert_eq!(limiter.stats(), None);
}

/// The server's error reaches the caller's message, not only the source
/// chain: a key a DBA's constraint refuses, a table that is not there, a
/// table without the step's function.
/// (Each is an `Error::Script`, for that call only.)
#[test]
fn a_servers_error_says_why_in_the_message() {
    let server = PgServer::start();
    let lim = limiter(&server, Rate::per_second(10), 1);
    let script = |r: Result<paceline::Taken, Error>| match r {
        Err(e @ Error::Script(_)) => e.to_string(),
        other => panic!("expected a script error, got {other:?}"),
    };
    server.psql(
        "ALTER TABLE paceline_limits ADD CONSTRAINT short_keys CHECK (octet_length(key) < 8)",
    );
    let refused = script(lim.try_take("a-long-key"));
    assert!(refused.contains("\"short_keys\""), "{refused}");
    let gone = PostgresLimiter::builder(&server.conn(), Rate::per_second(10))
        .table("nowhere.limits")
        .build()
        .unwrap();
    let missing = script(gone.try_take("k"));
    assert!(missing.contains("\"nowhere\" does not exist"), "{missing}");
    // A table made without `install` (by hand, or by an older paceline):
    // the step's function is missing, and the message names it.
    server.psql(
        "CREATE TABLE bare (key text COLLATE \"C\" PRIMARY KEY, tat bigint NOT NULL, \
         prev_tat bigint, rest_at bigint NOT NULL)",
    );
    let bare = PostgresLimiter::builder(&server.conn(), Rate::per_second(10))
        .table("bare")
        .build()
        .unwrap();
    let no_step = script(bare.try_take("k"));
    assert!(
        no_step.contains("bare_step") && no_step.contains("does not exist"),
        "{no_step}"
    );
    bare.install().unwrap();
    bare.try_take("k").unwrap();
    lim.try_take("k").unwrap();
}

/// `len` bytes of printable ASCII that do not compress (a fixed LCG).
fn random_text(len: usize, seed: u64) -> String {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            char::from(b'!' + (x >> 58) as u8)
        })
        .collect()
}

/// Keys a client may send that PostgreSQL cannot hold as given, by length
/// (its btree index takes at most ~2.7 KB) or by byte (`text` has no NUL),
/// or that an operator should not read raw; each starts with `tag`.
fn hostile_keys(tag: &str) -> Vec<(&'static str, String)> {
    let long = random_text(3 << 10, 1);
    let mut other = long.clone();
    other.pop();
    other.push('#');
    vec![
        ("3 KB of random text", format!("{tag}:{long}")),
        ("the same but its last byte", format!("{tag}:{other}")),
        ("a NUL byte", format!("{tag}:a\0b")),
        ("a NUL byte elsewhere", format!("{tag}:a\0c")),
        ("non-ASCII", format!("{tag}:ключ🙂")),
        ("a terminal escape", format!("{tag}:\x1b[31mred")),
        (
            "64 KB that compress",
            format!("{tag}:{}", "x".repeat(64 << 10)),
        ),
    ]
}

/// 100 `try_take`s on `key` at 1/min with a burst of 3: how many were
/// admitted; every other one must be the limit's refusal, not an error.
fn admitted_of_100(lim: &PostgresLimiter, key: &str, name: &str) -> usize {
    let mut admitted = 0;
    for _ in 0..100 {
        match lim.try_take(key) {
            Ok(_) => admitted += 1,
            Err(e) if e.is_refusal() => {}
            Err(e) => panic!("{name}: {e}"),
        }
    }
    admitted
}

/// A key is the client's to choose, so every key a limiter accepts is
/// limited, whatever its length or bytes: one of ~3 KB
/// of random text (over the index's limit) or with a NUL byte (which
/// `text` cannot hold) used to fail every call with `Error::Script` (and,
/// before fail-open was narrowed, 100 of 100 calls were admitted under
/// `Open`). Such keys are stored under their digest: exactly 3 of 100
/// admitted at 1/min with a burst of 3, under either policy, and reset
/// and peeks find the same row.
#[test]
fn every_key_is_limited_whatever_its_length_or_bytes() {
    let server = PgServer::start();
    for policy in [FailPolicy::Closed, FailPolicy::Open] {
        let lim = PostgresLimiter::builder(&server.conn(), Rate::per_minute(1))
            .slack(2)
            .on_error(policy)
            .stats(true)
            .build()
            .unwrap();
        lim.install().unwrap();
        let tag = format!("{policy:?}");
        for (name, key) in hostile_keys(&tag) {
            let admitted = admitted_of_100(&lim, &key, name);
            assert_eq!(admitted, 3, "{name} under {policy:?}");
            assert_eq!(lim.available(&key).unwrap(), 0, "{name}");
            // Reset finds the same row: the whole burst again.
            assert!(lim.reset(&key).unwrap(), "{name}: reset found no row");
            assert_eq!(admitted_of_100(&lim, &key, name), 3, "{name}");
        }
        let stats = lim.stats().unwrap();
        assert_eq!(stats.failed, 0, "{policy:?}: {stats:?}");
        // A readable key is stored as given.
        lim.try_take(&format!("{tag}:user:42")).unwrap();
        assert_eq!(
            server.psql(&format!(
                "SELECT count(*) FROM paceline_limits WHERE key = '{tag}:user:42'"
            )),
            "1"
        );
    }
    // Every row's key is at most 512 bytes of printable ASCII.
    assert_eq!(
        server.psql(
            "SELECT count(*) FROM paceline_limits WHERE octet_length(key) > 512 OR key !~ '^[ -~]*$'"
        ),
        "0"
    );
    // 7 keys under each policy, each its own row, each under its digest.
    assert_eq!(
        server.psql("SELECT count(*) FROM paceline_limits WHERE key LIKE '~sha256:%'"),
        "14"
    );
    // A key that shows a digest is not the key it was made from: its own
    // bucket, full (every digested row above is spent).
    let lim = limiter(&server, Rate::per_minute(1), 2);
    let shown = server.psql("SELECT key FROM paceline_limits WHERE key LIKE '~sha256:%' LIMIT 1");
    assert_eq!(admitted_of_100(&lim, &shown, "a digest as a key"), 3);
}

#[cfg(feature = "tokio")]
mod tokio_calls {
    use super::*;
    use paceline::postgres::AsyncPostgresLimiter;
    use paceline::AsyncTake;
    use paceline::Take;

    fn async_limiter(server: &PgServer, rate: Rate, slack: u64) -> AsyncPostgresLimiter {
        let lim = PostgresLimiter::builder(&server.conn(), rate)
            .slack(slack)
            .connect_timeout(TIMEOUT)
            .response_timeout(TIMEOUT)
            .build()
            .unwrap();
        AsyncPostgresLimiter::from(lim)
    }

    /// The blocking face waits on a std channel for its runtime thread: it
    /// works (blocking the thread, as any blocking call) even on a Tokio
    /// runtime's only thread, where a nested `block_on` would panic.
    #[tokio::test(flavor = "current_thread")]
    async fn blocking_calls_work_on_a_tokio_thread() {
        let server = PgServer::start();
        let lim = limiter(&server, Rate::per_minute(1), 5);
        lim.try_take("k").unwrap();
        assert_eq!(lim.available("k").unwrap(), 5);
        assert!(lim.reset("k").unwrap());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn async_calls_pace_refuse_and_write_as_the_blocking_ones() {
        let server = PgServer::start();
        let lim = async_limiter(&server, Rate::per_second(2), 2);
        lim.install().await.unwrap();
        lim.install().await.unwrap();
        assert_eq!(lim.available("k").await.unwrap(), 3);
        let burst = Instant::now();
        lim.try_take_n("k", 3).await.unwrap();
        assert!(matches!(lim.try_take("k").await, Err(Error::RetryAfter(_))));
        lim.take("k").await.unwrap();
        assert!(burst.elapsed() >= Duration::from_millis(500));
        assert!(matches!(
            lim.take_timeout("k", Duration::from_millis(1)).await,
            Err(Error::QueueFull { .. })
        ));
        assert!(lim.next_free("k").await.unwrap() > Duration::ZERO);
        assert!(lim.reset("k").await.unwrap());
        assert_eq!(lim.available("k").await.unwrap(), 3);
        lim.ping().await.unwrap();
        // Eight tasks on one limit of 100/s, slack 0, for ~0.5 s: paced.
        let lim = lim.with_limit(Rate::per_second(100), 0).unwrap();
        let start = Instant::now();
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let lim = lim.clone();
                tokio::spawn(async move {
                    for _ in 0..6 {
                        lim.take("shared").await.unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        // 48 permits from rest at 100/s: the last at >= 470 ms.
        assert!(
            start.elapsed() >= Duration::from_millis(460),
            "{:?}",
            start.elapsed()
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_take_cancelled_before_its_slot_gives_the_slot_back() {
        let server = PgServer::start();
        let lim = async_limiter(&server, Rate::per_second(1), 0);
        lim.install().await.unwrap();
        lim.try_take("k").await.unwrap();
        let before = lim.next_free("k").await.unwrap();
        // take_timeout books at once; cancel it while it waits.
        let r = tokio::time::timeout(
            Duration::from_millis(20),
            lim.take_timeout("k", Duration::from_secs(1)),
        )
        .await;
        assert!(r.is_err(), "it should still have been waiting");
        // The give-back is a task of its own: give it a moment.
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            let now = lim.next_free("k").await.unwrap();
            if now <= before {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the slot was not given back: {now:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn async_server_down_and_hung_fail_within_the_timeouts_then_recover() {
        let mut server = PgServer::start();
        let lim = async_limiter(&server, Rate::per_minute(1), 100);
        lim.install().await.unwrap();
        lim.try_take("k").await.unwrap();
        server.pause();
        let start = Instant::now();
        assert!(matches!(lim.try_take("k").await, Err(Error::Timeout)));
        assert!(
            start.elapsed() < TIMEOUT * 2 + MARGIN,
            "{:?}",
            start.elapsed()
        );
        server.resume();
        server.stop();
        let start = Instant::now();
        assert!(matches!(
            lim.try_take("k").await,
            Err(Error::Unavailable(_))
        ));
        assert!(
            start.elapsed() < TIMEOUT * 2 + MARGIN,
            "{:?}",
            start.elapsed()
        );
        server.restart();
        let deadline = Instant::now() + Duration::from_secs(10);
        while lim.try_take("k").await.is_err() {
            assert!(Instant::now() < deadline, "no recovery");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
