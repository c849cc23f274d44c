//! The configuration directory read again while the real binary serves:
//! a broken file keeps the last good set (the log names the file, the
//! debug port's `/rlconfig` still shows the old limits), a reload under
//! load answers every request from one version, and
//! `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED` follows what is loaded.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::{brief, call, descriptor, http, request, stats, write_config, Server, HOUR, OK};

fn limits(a: u32, b: u32) -> String {
    format!(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {{unit: hour, requests_per_unit: {a}}}\n  - key: b\n    rate_limit: {{unit: hour, requests_per_unit: {b}}}\n"
    )
}

/// Asks `a` and `b` (counting nothing) until `a`'s limit is `want`, at
/// most 10 s.
async fn until_a_is(server: &Server, want: u32) {
    let mut c = server.client().await;
    let mut look = descriptor(&[("a", "x")]);
    look.hits_addend = Some(envoy_types::pb::google::protobuf::UInt64Value { value: 0 });
    for _ in 0..400 {
        let got = brief(&call(&mut c, request("d", vec![look.clone()])).await);
        if got.1[0].1 == Some((want, HOUR)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the limit of a never became {want}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_file_keeps_the_last_good_set_and_is_named() {
    let s = Server::start(&[("d.yaml", &limits(2, 3))], &[]);
    // `unlimited` with a unit: refused, as envoyproxy/ratelimit refuses it.
    let broken =
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, unlimited: true}\n";
    write_config(&s.dir, "d.yaml", broken);
    let line = s.wait_for_log("configuration not loaded");
    assert!(line.contains("d.yaml"), "{line}");
    assert!(
        line.contains("should not specify rate limit unit when unlimited"),
        "{line}"
    );
    let (status, dump) = http(s.debug, "GET", "/rlconfig", "");
    assert_eq!(status, 200);
    assert!(
        dump.contains("d.a: requests_per_unit=2, unit=HOUR"),
        "{dump}"
    );
    assert!(
        dump.contains("d.b: requests_per_unit=3, unit=HOUR"),
        "{dump}"
    );
    let mut c = s.client().await;
    let a = call(&mut c, request("d", vec![descriptor(&[("a", "x")])])).await;
    assert_eq!(brief(&a), (OK, vec![(OK, Some((2, HOUR)), 1)]));
    let st = stats(&s);
    assert_eq!(st["ratelimit.service.config_load_error"], 1, "{st:?}");

    // A second broken file beside a good one: still the old set.
    write_config(&s.dir, "d.yaml", &limits(5, 6));
    until_a_is(&s, 5).await;
    write_config(
        &s.dir,
        "e.yaml",
        "domain: e\ndescriptors:\n  - key: k\n    bogus: 1\n",
    );
    let line = s.wait_for_log("configuration not loaded");
    assert!(
        line.contains("e.yaml") && line.contains("unknown key 'bogus'"),
        "{line}"
    );
    let (_, dump) = http(s.debug, "GET", "/rlconfig", "");
    assert!(dump.contains("d.a: requests_per_unit=5"), "{dump}");
    assert!(!dump.contains("domain e"), "{dump}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_under_load_answers_each_request_from_one_version() {
    let (one, two) = (limits(1000, 2000), limits(3000, 4000));
    let s = Server::start(&[("d.yaml", &one)], &[]);
    let client = s.client().await;
    let done = Arc::new(AtomicBool::new(false));
    let mut askers = Vec::new();
    for task in 0..4 {
        let (mut c, done) = (client.clone(), Arc::clone(&done));
        askers.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            // Bounded: at most 5000 requests a task, or until the swaps end.
            for _ in 0..5000 {
                if done.load(Ordering::Relaxed) {
                    break;
                }
                let ds = vec![
                    descriptor(&[("a", &format!("t{task}"))]),
                    descriptor(&[("b", &format!("t{task}"))]),
                ];
                let a = call(&mut c, request("d", ds)).await;
                let limit = |i: usize| {
                    a.statuses[i]
                        .current_limit
                        .as_ref()
                        .unwrap()
                        .requests_per_unit
                };
                seen.push((limit(0), limit(1)));
            }
            seen
        }));
    }
    for i in 0..20 {
        tokio::time::sleep(Duration::from_millis(60)).await;
        write_config(&s.dir, "d.yaml", if i % 2 == 0 { &two } else { &one });
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    done.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for t in askers {
        all.extend(t.await.unwrap());
    }
    let mixed: Vec<_> = all
        .iter()
        .filter(|p| **p != (1000, 2000) && **p != (3000, 4000))
        .collect();
    assert!(
        mixed.is_empty(),
        "answers from two versions at once: {mixed:?}"
    );
    // Both versions answered, or the test saw no reload at all.
    assert!(all.contains(&(1000, 2000)) && all.contains(&(3000, 4000)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthy_with_at_least_one_config_loaded_follows_the_domains_loaded() {
    for needs_config in [true, false] {
        let env = [(
            "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
            if needs_config { "true" } else { "false" },
        )];
        let s = Server::start(&[("d.yaml", &limits(1, 1))], &env);
        assert_eq!(http(s.http, "GET", "/healthcheck", "").0, 200);
        // Every file gone: an empty configuration, no limits.
        std::fs::remove_file(s.dir.join("d.yaml")).unwrap();
        s.wait_for_log("configuration loaded");
        let mut c = s.client().await;
        let a = call(&mut c, request("d", vec![descriptor(&[("a", "x")])])).await;
        assert_eq!(brief(&a), (OK, vec![(OK, None, 0)]));
        let want = if needs_config { 500 } else { 200 };
        assert_eq!(http(s.http, "GET", "/healthcheck", "").0, want, "{env:?}");
        // A domain back: healthy again.
        write_config(&s.dir, "d.yaml", &limits(1, 1));
        until_a_is(&s, 1).await;
        assert_eq!(http(s.http, "GET", "/healthcheck", "").0, 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_port_opens_until_the_first_configuration_loads() {
    let dir = support::temp_dir("first");
    std::fs::write(
        dir.join("d.yaml"),
        "domain: d\ndescriptors:\n  - key: a\n    nope: 1\n",
    )
    .unwrap();
    let good = limits(7, 8);
    let (s, early) = Server::start_in_after(dir.clone(), &[], Duration::from_millis(600), || {
        write_config(&dir, "d.yaml", &good)
    });
    // While the only file was broken: its error, again, and no port.
    assert!(
        early
            .iter()
            .any(|l| l.contains("d.yaml") && l.contains("unknown key 'nope'")),
        "{early:?}"
    );
    assert!(
        !early.iter().any(|l| l.contains(" on 127.0.0.1:")),
        "{early:?}"
    );
    // Open, so healthy, and the limits are in.
    assert_eq!(http(s.http, "GET", "/healthcheck", ""), (200, "OK".into()));
    let mut c = s.client().await;
    let a = call(&mut c, request("d", vec![descriptor(&[("a", "x")])])).await;
    assert_eq!(brief(&a), (OK, vec![(OK, Some((7, HOUR)), 6)]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_of_the_runtime_root_s_link_reloads_whatever_runtime_watch_root_says() {
    for watch_root in ["true", "false"] {
        let root = support::temp_dir("runtime");
        for (version, n) in [("v1", 1), ("v2", 9)] {
            std::fs::create_dir_all(root.join(version).join("config")).unwrap();
            std::fs::write(root.join(version).join("config/d.yaml"), limits(n, n)).unwrap();
        }
        std::os::unix::fs::symlink(root.join("v1"), root.join("current")).unwrap();
        let env = [("RUNTIME_WATCH_ROOT", watch_root)];
        let s = Server::start_in(root.join("current/config"), &env);
        until_a_is(&s, 1).await;
        // As goruntime's deployments do: a new link renamed over the old.
        std::os::unix::fs::symlink(root.join("v2"), root.join("next")).unwrap();
        std::fs::rename(root.join("next"), root.join("current")).unwrap();
        until_a_is(&s, 9).await;
        drop(s);
        let _ = std::fs::remove_dir_all(&root);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_rewritten_in_place_at_the_same_size_reloads() {
    let s = Server::start(&[("d.yaml", &limits(1, 1))], &[]);
    until_a_is(&s, 1).await;
    // Two versions of one size in a row, in place (one inode): whichever
    // the server sees between them, the last one is what it ends with.
    std::fs::write(s.dir.join("d.yaml"), limits(2, 2)).unwrap();
    std::fs::write(s.dir.join("d.yaml"), limits(3, 3)).unwrap();
    until_a_is(&s, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_in_directories_below_are_read_and_dotted_ones_are_not() {
    let dir = support::temp_dir("nested");
    // A Kubernetes volume's layout: the files in a dated directory, linked
    // through `..data`, each linked again at the top.
    std::fs::create_dir_all(dir.join("..2026_11_29")).unwrap();
    std::fs::write(dir.join("..2026_11_29/d.yaml"), limits(1, 1)).unwrap();
    std::os::unix::fs::symlink(dir.join("..2026_11_29"), dir.join("..data")).unwrap();
    std::os::unix::fs::symlink(dir.join("..data/d.yaml"), dir.join("d.yaml")).unwrap();
    std::fs::write(dir.join(".hidden.yaml"), "domain: d\n").unwrap();
    let s = Server::start_in(dir.clone(), &[]);
    // Read once, through the link (a dotted name is never read: `d` would
    // be there three times, and a domain twice is refused).
    until_a_is(&s, 1).await;
    // A file in a directory made below, later: read at the next look.
    std::fs::create_dir_all(dir.join("ops/more")).unwrap();
    let other =
        "domain: e\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 4}\n";
    std::fs::write(dir.join("ops/more/e.yaml"), other).unwrap();
    let mut c = s.client().await;
    let mut seen = None;
    for _ in 0..400 {
        let mut look = descriptor(&[("a", "x")]);
        look.hits_addend = Some(envoy_types::pb::google::protobuf::UInt64Value { value: 0 });
        seen = Some(brief(&call(&mut c, request("e", vec![look])).await));
        if seen.as_ref().is_some_and(|b| b.1[0].1 == Some((4, HOUR))) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(seen.unwrap().1[0].1, Some((4, HOUR)));
}
