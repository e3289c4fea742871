#!/usr/bin/env python3
"""Handoff latency: from `release` returning to the blocked waiter's checkout returning.

Two waiters are compared in the same run, alternating handoff by handoff:
  wait  - `tasklock checkout KEY --wait 60s` (queued; woken by inotify, only the head may take it)
  poll  - a loop calling `tasklock checkout KEY` with backoff (5 ms doubling to 100 ms),
          what an agent does without queues

Usage: python3 bench/handoff.py [--tasklock PATH] [--rounds N]
Builds the binary as install.sh does unless --tasklock is given. Prints medians and p90.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {k: v for k, v in os.environ.items() if not k.startswith("TASKLOCK_")}
POLLER = r"""
import subprocess, sys, time
tl, d, key = sys.argv[1:4]
delay = 0.005
while subprocess.run([tl, "checkout", key, "--dir", d, "--agent", "poller"],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0:
    time.sleep(delay)
    delay = min(delay * 2, 0.1)
"""


def build():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench  # the house helpers: release_build
    env, extra, release = bench.release_build()
    subprocess.run(["cargo", "build", "--release", "--locked", "--quiet"] + extra,
                   cwd=REPO, env=env, check=True)
    return os.path.join(REPO, "target", release, "tasklock")


def tl(binary, d, *args, agent="holder"):
    return subprocess.run([binary, *args, "--dir", d, "--agent", agent], env=ENV,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode


def queued(binary, d, key):
    out = subprocess.run([binary, "status", key, "--dir", d, "--json"], env=ENV,
                         capture_output=True, text=True).stdout
    return '"waiter"' in out


def one(binary, d, key, kind):
    assert tl(binary, d, "checkout", key) == 0
    if kind == "wait":
        p = subprocess.Popen([binary, "checkout", key, "--wait", "60s", "--dir", d,
                              "--agent", "waiter"], env=ENV, stdout=subprocess.DEVNULL)
        deadline = time.time() + 10
        while not queued(binary, d, key):
            if time.time() > deadline:
                sys.exit("handoff: the waiter never queued")
            time.sleep(0.005)
    else:
        p = subprocess.Popen([sys.executable, "-c", POLLER, binary, d, key], env=ENV)
        time.sleep(0.3)  # let the backoff reach its ceiling, as for a long wait
    time.sleep(0.05)
    assert tl(binary, d, "release", key) == 0
    t0 = time.perf_counter()
    p.wait()
    t1 = time.perf_counter()
    if p.returncode != 0:
        sys.exit(f"handoff: the {kind} waiter exited {p.returncode}")
    agent = "waiter" if kind == "wait" else "poller"
    assert tl(binary, d, "release", key, agent=agent) == 0
    return (t1 - t0) * 1000


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasklock", help="binary to measure (default: build it)")
    ap.add_argument("--rounds", type=int, default=120)
    a = ap.parse_args()
    binary = a.tasklock or build()
    samples = {"wait": [], "poll": []}
    with tempfile.TemporaryDirectory(prefix="tasklock-handoff-") as d:
        for i in range(a.rounds):
            for kind in (("wait", "poll") if i % 2 == 0 else ("poll", "wait")):
                samples[kind].append(one(binary, d, f"k{i}-{kind}", kind))
    print(f"handoff latency over {a.rounds} handoffs each (ms, release returned -> waiter returned)\n")
    print("| waiter | median | p90 | max |\n|---|---|---|---|")
    for kind, xs in samples.items():
        xs.sort()
        label = "`checkout --wait` (inotify)" if kind == "wait" else "polling with backoff (5-100 ms)"
        print(f"| {label} | {statistics.median(xs):.1f} | {xs[int(len(xs) * 0.9)]:.1f} | {xs[-1]:.1f} |")
    med = statistics.median(samples["wait"])
    print(f"\ngoal: median <= 20 ms: {'met' if med <= 20 else 'missed'} ({med:.1f} ms); "
          f"{statistics.median(samples['poll']) / med:.1f}x faster than polling")


if __name__ == "__main__":
    main()
