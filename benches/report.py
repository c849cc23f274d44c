#!/usr/bin/env python3
"""Markdown tables from criterion results of benches/throughput.rs.

    cargo bench -p paceline-benches --bench throughput -- --save-baseline run1   # (repeat: run2, run3)
    python3 benches/report.py run1 run2 run3

With several baselines, each cell is the median over the runs of each run's
median time, and the spread (min-max over runs) follows in brackets; the
ratios are taken within each run first, then their median, so that a run
slowed down as a whole by the machine's load does not skew them. With no
argument it reads criterion's latest results ("new"). Results are read where
criterion writes them: $CRITERION_HOME, else $CARGO_TARGET_DIR/criterion, else
the workspace's target/criterion.
"""

import json
import os
import statistics
import sys

ROOT = (
    os.environ.get("CRITERION_HOME")
    or os.path.join(
        os.environ.get("CARGO_TARGET_DIR")
        or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target"),
        "criterion",
    )
)


def load(baseline):
    out = {}
    if not os.path.isdir(ROOT):
        sys.exit(f"no criterion results under {ROOT}: run the bench first")
    # Each result directory holds `<baseline>/estimates.json` and, beside it,
    # `benchmark.json` with the bench's full id ("keyed/hot_key/paceline/1t");
    # directory names flatten the slashes of nested ids.
    for dirpath, _, files in os.walk(ROOT):
        if os.path.basename(dirpath) != baseline or "estimates.json" not in files:
            continue
        with open(os.path.join(dirpath, "estimates.json")) as f:
            median = json.load(f)["median"]["point_estimate"]
        try:
            with open(os.path.join(dirpath, "benchmark.json")) as f:
                key = json.load(f)["full_id"]
        except (OSError, KeyError, ValueError):
            key = os.path.relpath(os.path.dirname(dirpath), ROOT)
        out[key] = median
    return out


def cell(values, digits=1):
    """Median over runs, with the min-max spread when there are several."""
    values = [v for v in values if v is not None]
    if not values:
        return "–"
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:.{digits}f}"
    return f"{med:.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def main():
    baselines = sys.argv[1:] or ["new"]
    runs = [load(b) for b in baselines]

    def ns(key):
        return [r.get(key) for r in runs]

    def ratio(key, base):
        return [r[key] / r[base] if key in r and base in r else None for r in runs]

    n = len(runs)
    print(f"Median time per call, ns; {n} run{'s' if n > 1 else ''}"
          + (" (median, min–max over runs)" if n > 1 else "")
          + ". One thread: its CPU time; several: wall time per call over all threads.\n")

    print("| floor | ns |")
    print("|---|---:|")
    for name, key in [
        ("quanta `Clock::raw()`", "floor/quanta_raw"),
        ("quanta `Clock::now()`", "floor/quanta_now"),
        ("`std::time::Instant::now()`", "floor/std_instant_now"),
        ("load + `compare_exchange`", "floor/load_cas"),
        ("clock read + CAS loop (the floor)", "floor/clock_cas"),
    ]:
        print(f"| {name} | {cell(ns(key))} |")
    print()

    floor = "floor/clock_cas"
    atomic = "admit/paceline_atomic_try_take"
    print("| one thread, admitted | ns | × floor | × paceline `AtomicLimiter::try_take` |")
    print("|---|---:|---:|---:|")
    for name, key in [
        ("paceline `AtomicLimiter::try_take`", "admit/paceline_atomic_try_take"),
        ("paceline `AtomicLimiter::take`", "admit/paceline_atomic_take"),
        ("paceline `MutexLimiter::try_take`", "admit/paceline_mutex_try_take"),
        ("paceline `MutexLimiter::take`", "admit/paceline_mutex_take"),
        ("paceline `WarmUpLimiter::try_take` (two words, a lock)", "admit/paceline_warm_up_try_take"),
        ("paceline `Unlimited::try_take`", "admit/paceline_unlimited_try_take"),
        ("paceline `Unlimited::take`", "admit/paceline_unlimited_take"),
        ("governor `check()`", "admit/governor_check"),
        ("ratelimit `try_wait()`", "admit/ratelimit_try_wait"),
        ("leaky-bucket `try_acquire(1)`", "admit/leaky_bucket_try_acquire"),
    ]:
        print(f"| {name} | {cell(ns(key))} | {cell(ratio(key, floor), 2)} | {cell(ratio(key, atomic), 2)} |")
    print()

    print("| wall ns per call, one limiter | 1 thread | 2 threads | 8 threads (2 vCPU) | 2 thr. × paceline atomic | 8 thr. × paceline atomic |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, one, many in [
        ("floor: clock read + CAS loop", "floor/clock_cas", "floor_clock_cas"),
        ("paceline `AtomicLimiter::try_take`", "admit/paceline_atomic_try_take", "paceline_atomic_try_take"),
        ("paceline `AtomicLimiter::take`", "admit/paceline_atomic_take", "paceline_atomic_take"),
        ("paceline `MutexLimiter::try_take`", "admit/paceline_mutex_try_take", "paceline_mutex_try_take"),
        ("paceline `WarmUpLimiter::try_take`", "admit/paceline_warm_up_try_take", "paceline_warm_up_try_take"),
        ("governor `check()`", "admit/governor_check", "governor_check"),
        ("ratelimit `try_wait()`", "admit/ratelimit_try_wait", "ratelimit_try_wait"),
        ("leaky-bucket `try_acquire(1)`", "admit/leaky_bucket_try_acquire", "leaky_bucket_try_acquire"),
    ]:
        c2, c8 = f"contended2/{many}", f"contended8/{many}"
        print(f"| {name} | {cell(ns(one))} | {cell(ns(c2))} | {cell(ns(c8))} "
              f"| {cell(ratio(c2, 'contended2/paceline_atomic_try_take'), 2)} "
              f"| {cell(ratio(c8, 'contended8/paceline_atomic_try_take'), 2)} |")
    print()

    deny = "deny/paceline_atomic_try_take"
    print("| denied (limiter exhausted) | ns | × paceline `AtomicLimiter::try_take` |")
    print("|---|---:|---:|")
    for name, key in [
        ("paceline `AtomicLimiter::try_take`", "deny/paceline_atomic_try_take"),
        ("paceline `MutexLimiter::try_take`", "deny/paceline_mutex_try_take"),
        ("governor `check()`", "deny/governor_check"),
        ("ratelimit `try_wait()`", "deny/ratelimit_try_wait"),
        ("leaky-bucket `try_acquire(1)`", "deny/leaky_bucket_try_acquire"),
    ]:
        print(f"| {name} | {cell(ns(key))} | {cell(ratio(key, deny), 2)} |")


if __name__ == "__main__":
    main()
