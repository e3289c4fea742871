#!/usr/bin/env python3
"""Hook latency: how long each `tasklock hook EVENT` takes, as Claude Code runs it
(through `sh -c`, with the hook's JSON on stdin). The goal is well under 50 ms.

Usage: python3 bench/hooks.py [--tasklock PATH] [--runs N] [--held N]
Builds the binary as install.sh does unless --tasklock is given. The project holds N
checkouts by other agents (default 100), so the heartbeat's scan has work to do.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from handoff import build  # noqa: E402

ENV = {k: v for k, v in os.environ.items() if not k.startswith(("TASKLOCK_", "CLAUDE_"))}


def timed(cmd, stdin, env):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, input=stdin, env=env, capture_output=True)
    t1 = time.perf_counter()
    if p.returncode != 0 or p.stderr:
        sys.exit(f"hooks: {cmd} failed: {p.stderr.decode()}")
    return (t1 - t0) * 1000


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasklock")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--held", type=int, default=100)
    a = ap.parse_args()
    binary = a.tasklock or build()
    with tempfile.TemporaryDirectory(prefix="tasklock-hooks-") as d:
        lock = os.path.join(d, ".locks")
        for i in range(a.held):
            subprocess.run([binary, "checkout", f"other-{i}", "--dir", lock, "--agent", f"a{i % 7}"],
                           env=ENV, stdout=subprocess.DEVNULL, check=True)
        env = dict(ENV, TASKLOCK_DIR=lock, CLAUDE_ENV_FILE=os.path.join(d, "env"))
        payload = json.dumps({"session_id": "bench-session", "cwd": d}).encode()
        samples = {"sh -c true (floor)": [], "session-start": [], "post-tool-use": [],
                   "user-prompt-submit": [], "session-end": []}
        for _ in range(a.runs):
            for name in samples:
                if name.startswith("sh -c"):
                    samples[name].append(timed(["sh", "-c", "true"], b"", env))
                else:
                    samples[name].append(timed(["sh", "-c", f"{binary} hook {name}"], payload, env))
    print(f"hook latency, {a.runs} runs each, {a.held} checkouts held by others (ms, wall time)\n")
    print("| command | median | p90 | max |\n|---|---:|---:|---:|")
    for name, xs in samples.items():
        xs.sort()
        print(f"| {name} | {statistics.median(xs):.2f} | {xs[int(len(xs) * 0.9)]:.2f} | {xs[-1]:.2f} |")
    worst = max(statistics.median(xs) for n, xs in samples.items() if not n.startswith("sh"))
    print(f"\ngoal: well under 50 ms: slowest hook median {worst:.2f} ms")


if __name__ == "__main__":
    main()
