#!/usr/bin/env python3
"""How fast `tasklock top` shows a change, and what a big fleet costs it.

    python3 bench/top.py [--bin target/release/tasklock] [--n 100] [--pg URL]

1. Change to screen: `tasklock top` runs in a tmux session; another process checks out
   key i; the time from that command's exit to the key being on the screen (tmux
   capture-pane, polled every 2 ms; the poll's own cost is measured and reported) is one
   sample. Median and p99 over --n samples, on the lock directory and, with --pg (or
   TASKLOCK_BENCH_PG_URL), on PostgreSQL.
2. A big fleet: 10,000 checkouts held by 1,000 agents; one frame drawn
   (`top --once`) and one JSON snapshot (`top --once --json`): wall time and peak RSS
   (from wait4), beside `tasklock list --json` over the same store as the reference.
"""
import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(args, env, check=True):
    p = subprocess.run(args, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if check and p.returncode not in (0, 2):
        sys.exit(f"{args}: exit {p.returncode}: {p.stderr}")
    return p


def timed(args, env):
    """Wall seconds and peak RSS (MiB) of one run."""
    t = time.perf_counter()
    p = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{args}: {p.stderr.read().decode()}")
    return wall, usage.ru_maxrss / 1024


def latency(binary, env, lockdir, n):
    sock = os.path.join(lockdir, "..", "tmux.sock")
    tmux = ["tmux", "-S", sock]
    cmd = f"'{binary}' top --dir '{lockdir}' --read-only"
    subprocess.run(tmux + ["-f", "/dev/null", "new-session", "-d", "-s", "b", "-x", "160",
                           "-y", "50", "sh", "-c", cmd], env=env, check=True)
    try:
        def screen():
            return subprocess.run(tmux + ["capture-pane", "-p", "-t", "b"],
                                  capture_output=True, text=True).stdout

        deadline = time.time() + 10
        while "Checkouts (" not in screen():
            if time.time() > deadline:
                sys.exit("the view never drew")
            time.sleep(0.01)
        t = time.perf_counter()
        for _ in range(20):
            screen()
        poll_cost = (time.perf_counter() - t) / 20
        samples = []
        for i in range(n):
            key = f"bench-{i:04d}"
            run([binary, "--dir", lockdir, "checkout", key, "--agent", f"a{i % 7}"], env)
            t = time.perf_counter()
            while key not in screen():
                if time.perf_counter() - t > 10:
                    sys.exit(f"{key} never appeared")
                time.sleep(0.002)
            samples.append(time.perf_counter() - t)
            # Keep the list short enough that new keys are on screen.
            run([binary, "--dir", lockdir, "release", key, "--agent", f"a{i % 7}"], env)
        samples.sort()
        return statistics.median(samples), samples[int(len(samples) * 0.99) - 1], poll_cost
    finally:
        subprocess.run(tmux + ["kill-server"], stderr=subprocess.DEVNULL)


def big_fleet(binary, env, lockdir):
    # 1,000 agents with 10 keys each, through `checkout` itself.
    for a in range(1000):
        for j in range(10):
            run([binary, "--dir", lockdir, "checkout", f"k{a:04d}-{j}", "--agent", f"agent-{a:04d}"],
                env)
    out = {}
    for name, args in [
        ("list --json (reference)", ["list", "--json"]),
        ("top --once --json", ["top", "--once", "--json"]),
        ("top --once (a frame)", ["top", "--once", "--size", "200x60"]),
    ]:
        runs = [timed([binary, "--dir", lockdir, *args], env) for _ in range(3)]
        out[name] = (statistics.median(r[0] for r in runs), max(r[1] for r in runs))
    # The frame alone (apart from reading the store), as tasklock top --once times it.
    draws = []
    for _ in range(5):
        p = subprocess.run([binary, "--dir", lockdir, "top", "--once", "--size", "200x60"],
                           env=dict(env, TASKLOCK_BENCH_DRAW="1"), capture_output=True, text=True)
        draws.append(float(p.stderr.split("drawn in ")[1].split(" ms")[0]))
    out["a frame's drawing alone"] = (statistics.median(draws) / 1000, float("nan"))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "tasklock"))
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--pg", default=os.environ.get("TASKLOCK_BENCH_PG_URL"))
    ap.add_argument("--no-big", action="store_true")
    a = ap.parse_args()
    if not shutil.which("tmux"):
        sys.exit("needs tmux")
    binary = os.path.abspath(a.bin)
    stores = [("lock directory", None)]
    if a.pg:
        stores.append(("PostgreSQL", a.pg))
    for name, url in stores:
        tmp = tempfile.mkdtemp(prefix="tasklock-top-bench.")
        lockdir = os.path.join(tmp, ".locks")
        os.makedirs(lockdir)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("TASKLOCK_", "CLAUDE_CODE_", "CODEX_"))}
        if url:
            sep = "&" if "?" in url else "?"
            env["TASKLOCK_URL"] = f"{url}{sep}schema=bench_top_{os.getpid()}"
        med, p99, poll = latency(binary, env, lockdir, a.n)
        print(f"{name}: change to screen median {med * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms "
              f"over {a.n} changes (one screen poll costs {poll * 1000:.1f} ms)")
        if not a.no_big:
            for what, (wall, rss) in big_fleet(binary, env, lockdir).items():
                print(f"{name}: 10,000 checkouts, 1,000 agents: {what}: {wall * 1000:.0f} ms, "
                      f"{rss:.0f} MiB peak RSS")
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
