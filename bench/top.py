#!/usr/bin/env python3
"""How fast `tasklock top` shows a change, starts, and what a big fleet costs it.

    python3 bench/top.py [--bin target/release/tasklock] [--baseline OLD] [--n 100] [--pg URL]

1. Change to screen: `tasklock top` runs in a tmux session; another process checks out
   key i; the time from that command's exit to the key being on the screen (tmux
   capture-pane, polled every 2 ms; the poll's own cost is measured and reported) is one
   sample. Median and p99 over --n samples, on the lock directory and, with --pg (or
   TASKLOCK_BENCH_PG_URL), on PostgreSQL. With --baseline, both builds run a view each,
   on stores of their own, and the changes alternate between them.
2. Start-up: from starting `tasklock top` in tmux to its first frame on the screen, over
   --starts launches (alternating with --baseline's), 100 checkouts held.
3. A big fleet: 10,000 checkouts held by 1,000 agents; one frame drawn
   (`top --once`) and one JSON snapshot (`top --once --json`): wall time and peak RSS
   (from wait4), beside `tasklock list --json` over the same store as the reference;
   medians of --rounds runs, the builds taking turns. Then the live view left open on
   it for --idle seconds: the CPU it uses while nothing changes.
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


class View:
    """`tasklock top` of one build over its own store, in a tmux server of its own."""

    def __init__(self, binary, env, lockdir):
        self.binary, self.env, self.lockdir = binary, env, lockdir
        self.tmux = ["tmux", "-S", os.path.join(lockdir, "..", "tmux.sock")]

    def start(self):
        """Start the view; the seconds until its first frame is on the screen."""
        cmd = f"exec '{self.binary}' top --dir '{self.lockdir}' --read-only"
        t = time.perf_counter()
        subprocess.run(self.tmux + ["-f", "/dev/null", "new-session", "-d", "-s", "b", "-x",
                                    "160", "-y", "50", "sh", "-c", cmd], env=self.env, check=True)
        while "Checkouts (" not in self.screen():
            if time.perf_counter() - t > 10:
                sys.exit("the view never drew")
            time.sleep(0.002)
        return time.perf_counter() - t

    def cpu(self):
        """CPU seconds the view has used (it is the pane's process: `exec`)."""
        pid = subprocess.run(self.tmux + ["list-panes", "-t", "b", "-F", "#{pane_pid}"],
                             capture_output=True, text=True).stdout.split()[0]
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        subprocess.run(self.tmux + ["kill-server"], stderr=subprocess.DEVNULL)

    def screen(self):
        return subprocess.run(self.tmux + ["capture-pane", "-p", "-t", "b"],
                              capture_output=True, text=True).stdout

    def change(self, i):
        """Check key i out; the seconds from the command's exit to the key on the screen."""
        key = f"bench-{i:04d}"
        agent = ["--agent", f"a{i % 7}"]
        run([self.binary, "--dir", self.lockdir, "checkout", key, *agent], self.env)
        t = time.perf_counter()
        while key not in self.screen():
            if time.perf_counter() - t > 10:
                sys.exit(f"{key} never appeared")
            time.sleep(0.002)
        took = time.perf_counter() - t
        # Keep the list short enough that new keys are on screen.
        run([self.binary, "--dir", self.lockdir, "release", key, *agent], self.env)
        return took


def latency(views, n):
    """Per view: median and p99 of n changes, the changes alternating between views."""
    for v in views:
        v.start()
    try:
        t = time.perf_counter()
        for _ in range(20):
            views[0].screen()
        poll_cost = (time.perf_counter() - t) / 20
        samples = [[] for _ in views]
        for i in range(n):
            for s, v in zip(samples, views):
                s.append(v.change(i))
        return [(statistics.median(s), sorted(s)[int(len(s) * 0.99) - 1], poll_cost)
                for s in samples]
    finally:
        for v in views:
            v.stop()


def start_up(views, starts):
    """Per view: the median seconds to its first frame, 100 checkouts held."""
    for v in views:
        for i in range(100):
            run([v.binary, "--dir", v.lockdir, "checkout", f"held-{i:03d}", "--agent",
                 f"a{i % 7}"], v.env)
    samples = [[] for _ in views]
    for _ in range(starts):
        for s, v in zip(samples, views):
            try:
                s.append(v.start())
            finally:
                v.stop()
    for v in views:
        for i in range(100):
            run([v.binary, "--dir", v.lockdir, "release", f"held-{i:03d}", "--agent",
                 f"a{i % 7}"], v.env)
    return [statistics.median(s) for s in samples]


def big_fleet(views, rounds, idle_secs):
    """Per view: wall time and peak RSS of a frame, a JSON snapshot and `list --json` over
    10,000 checkouts by 1,000 agents (set up through `checkout` itself), the views taking
    turns run by run; and a frame's drawing alone, as `top --once` times it."""
    for v in views:
        for a in range(1000):
            for j in range(10):
                run([v.binary, "--dir", v.lockdir, "checkout", f"k{a:04d}-{j}", "--agent",
                     f"agent-{a:04d}"], v.env)
    cases = [
        ("list --json (reference)", ["list", "--json"]),
        ("top --once --json", ["top", "--once", "--json"]),
        ("top --once (a frame)", ["top", "--once", "--size", "200x60"]),
    ]
    runs = [{name: [] for name, _ in cases} for _ in views]
    draws = [[] for _ in views]
    for _ in range(rounds):
        for r, d, v in zip(runs, draws, views):
            for name, args in cases:
                r[name].append(timed([v.binary, "--dir", v.lockdir, *args], v.env))
            p = subprocess.run([v.binary, "--dir", v.lockdir, "top", "--once", "--size",
                                "200x60"], env=dict(v.env, TASKLOCK_BENCH_DRAW="1"),
                               capture_output=True, text=True)
            d.append(float(p.stderr.split("drawn in ")[1].split(" ms")[0]) / 1000)
    # Open and idle: what a view costs while nothing changes (it still looks every second,
    # for leases and holders' processes).
    idle = []
    for v in views:
        v.start()
    try:
        time.sleep(3)
        before = [v.cpu() for v in views]
        time.sleep(idle_secs)
        idle = [(v.cpu() - b) / idle_secs for v, b in zip(views, before)]
    finally:
        for v in views:
            v.stop()
    out = []
    for r, d, i in zip(runs, draws, idle):
        o = {name: (statistics.median(x[0] for x in xs), max(x[1] for x in xs))
             for name, xs in r.items()}
        o["a frame's drawing alone"] = (statistics.median(d), float("nan"))
        o[f"the live view left idle {idle_secs} s, CPU each second"] = (i, float("nan"))
        out.append(o)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "tasklock"))
    ap.add_argument("--baseline", help="another build, measured in the same run")
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--starts", type=int, default=30)
    ap.add_argument("--pg", default=os.environ.get("TASKLOCK_BENCH_PG_URL"))
    ap.add_argument("--no-big", action="store_true")
    ap.add_argument("--rounds", type=int, default=5, help="runs of each big-fleet command")
    ap.add_argument("--idle", type=int, default=10, help="seconds the big fleet's live views "
                    "are left idle, their CPU measured")
    a = ap.parse_args()
    if not shutil.which("tmux"):
        sys.exit("needs tmux")
    binaries = [os.path.abspath(a.bin)] + ([os.path.abspath(a.baseline)] if a.baseline else [])
    stores = [("lock directory", None)]
    if a.pg:
        stores.append(("PostgreSQL", a.pg))
    for name, url in stores:
        views, tmps = [], []
        for n, binary in enumerate(binaries):
            tmp = tempfile.mkdtemp(prefix="tasklock-top-bench.")
            lockdir = os.path.join(tmp, ".locks")
            os.makedirs(lockdir)
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith(("TASKLOCK_", "CLAUDE_CODE_", "CODEX_"))}
            if url:
                sep = "&" if "?" in url else "?"
                env["TASKLOCK_URL"] = f"{url}{sep}schema=bench_top_{os.getpid()}_{n}"
            views.append(View(binary, env, lockdir))
            tmps.append(tmp)
        for v, (med, p99, poll) in zip(views, latency(views, a.n) if a.n else []):
            print(f"{name}: {v.binary}: change to screen median {med * 1000:.1f} ms, "
                  f"p99 {p99 * 1000:.1f} ms over {a.n} changes "
                  f"(one screen poll costs {poll * 1000:.1f} ms)")
        for v, med in zip(views, start_up(views, a.starts) if a.starts else []):
            print(f"{name}: {v.binary}: start to first frame median {med * 1000:.1f} ms over "
                  f"{a.starts} starts, 100 checkouts held")
        if not a.no_big:
            for v, fleet in zip(views, big_fleet(views, a.rounds, a.idle)):
                for what, (wall, rss) in fleet.items():
                    rss = "" if rss != rss else f", {rss:.0f} MiB peak RSS"
                    print(f"{name}: {v.binary}: 10,000 checkouts, 1,000 agents: {what}: "
                          f"{wall * 1000:.0f} ms{rss}")
        for tmp in tmps:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
