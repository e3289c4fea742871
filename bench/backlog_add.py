#!/usr/bin/env python3
"""`backlog add` of many keys, and one claim against the backlog's size, two builds in one run.

Run from anywhere, with two prebuilt binaries (it builds nothing):

    python3 bench/backlog_add.py --tasklock NEW --baseline OLD [--url postgres://…]

  1. `backlog add --file` of --keys keys (200,000) into an empty backlog, for each build
     and store, --rounds times (3) in a shuffled order each round; the median seconds, its
     ratio to the baseline's, and to two references timed in the same rounds: `cp` of the
     key file and `sort` of it (what reading and writing the keys once costs);
  2. one `checkout --next` by one agent against a backlog of each of --claim-sizes keys
     (1,000 and 100,000): the median of --claim-runs claims (20), per build and store,
     the claims of every build, store and size taking turns.

The lock directory always; PostgreSQL with --url (a schema per measurement, dropped with
psql at the end), or with TASKLOCK_TEST_PG_URL set. Needs Linux and Python 3.9+ (standard
library only). Figures: docs/performance.md ("Listing, and the backlog's size").
"""

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pg  # noqa: E402  (drop_schemas, shared)

SEED = 20261207
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C"}
DEVNULL = os.open(os.devnull, os.O_RDWR)
FILE_ACTIONS = [(os.POSIX_SPAWN_DUP2, DEVNULL, fd) for fd in (0, 1, 2)]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasklock", required=True, help="the build to measure")
    p.add_argument("--baseline", required=True, help="the build to compare it with")
    p.add_argument("--keys", type=int, default=200_000, help="keys added (default 200000)")
    p.add_argument("--rounds", type=int, default=3, help="adds per build and store (default 3)")
    p.add_argument("--claim-sizes", default="1000,100000",
                   help="backlog sizes of the claim (default 1000,100000)")
    p.add_argument("--claim-runs", type=int, default=20, help="claims per size (default 20)")
    p.add_argument("--url", default=os.environ.get("TASKLOCK_TEST_PG_URL"),
                   help="a PostgreSQL server (default $TASKLOCK_TEST_PG_URL); none: the lock "
                        "directory alone")
    p.add_argument("--tmp", help="where the lock directories go (default: a temp dir)")
    return p.parse_args()


class Store:
    """A fresh lock directory, and on PostgreSQL a fresh schema."""
    count = 0
    schemas = []

    def __init__(self, kind, tmp, url):
        Store.count += 1
        self.dir = os.path.join(tmp, f"{kind}-{Store.count}", ".locks")
        os.makedirs(os.path.dirname(self.dir))
        self.env = dict(ENV)
        if kind == "pg":
            schema = f"bench_bl_{os.getpid()}_{Store.count}"
            self.env["TASKLOCK_URL"] = f"{url}?schema={schema}"
            Store.schemas.append(schema)

    def argv(self, tl, agent, *args):
        return [tl, *args, "--dir", self.dir, "--agent", agent]

    def remove(self):
        shutil.rmtree(os.path.dirname(self.dir), ignore_errors=True)


def run(argv, env):
    """Spawn argv with stdio on /dev/null; (wall seconds, exit code)."""
    t0 = time.perf_counter_ns()
    pid = os.posix_spawn(argv[0], argv, env, file_actions=FILE_ACTIONS)
    _, status = os.waitpid(pid, 0)
    return (time.perf_counter_ns() - t0) / 1e9, os.waitstatus_to_exitcode(status)


def must(argv, env):
    t, rc = run(argv, env)
    if rc != 0:
        r = subprocess.run(argv, env=env, capture_output=True, text=True,
                           stdin=subprocess.DEVNULL)
        sys.exit(f"bench: `{' '.join(argv[:6])} …` exited {rc}\n{r.stdout[-2000:]}"
                 f"{r.stderr[-2000:]}")
    return t


def write_keys(tmp, n):
    path = os.path.join(tmp, f"keys-{n}.txt")
    with open(path, "w") as f:
        f.write("".join(f"k{i}\n" for i in range(1, n + 1)))
    return path


def add(tl, kind, tmp, url, keys):
    st = Store(kind, tmp, url)
    must(st.argv(tl, "setup", "list"), st.env)
    t = must(st.argv(tl, "setup", "backlog", "add", "--file", keys), st.env)
    st.remove()
    return t


def bench_add(a, builds, kinds, tmp, rng):
    keys = write_keys(tmp, a.keys)
    out = os.path.join(tmp, "copy.txt")
    refs = {"cp": ["cp", keys, out], "sort": ["sort", keys, "-o", out]}
    refs = {k: [shutil.which(v[0]), *v[1:]] for k, v in refs.items()}
    times = {}
    for r in range(a.rounds):
        jobs = [(name, kind) for name in builds for kind in kinds] + [(ref, None) for ref in refs]
        rng.shuffle(jobs)
        for name, kind in jobs:
            if kind is None:
                t = must(refs[name], ENV)
            else:
                t = add(builds[name], kind, tmp, a.url, keys)
            times.setdefault((name, kind), []).append(t)
        print(f"  round {r + 1}/{a.rounds} done", flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"\n1. `backlog add --file` of {a.keys:,} keys (median of {a.rounds})")
    for ref in refs:
        print(f"  reference {ref:5}          {med[(ref, None)]:8.3f} s")
    for kind in kinds:
        new, old = med[("tasklock", kind)], med[("baseline", kind)]
        print(f"  {kind:4} baseline          {old:8.3f} s")
        print(f"  {kind:4} tasklock          {new:8.3f} s   {new / old:.3f}x the baseline, "
              f"{new / med[('sort', None)]:.0f}x sort, {new / med[('cp', None)]:.0f}x cp")


def bench_claim(a, builds, kinds, tmp, rng):
    """Every (store, build, size) gets its backlog first; then the claims take turns, one
    of each per round in a shuffled order, so that a busy moment hits them all."""
    sizes = [int(s) for s in a.claim_sizes.split(",") if s]
    series = {}
    for kind in kinds:
        for name, tl in builds.items():
            for n in sizes:
                st = Store(kind, tmp, a.url)
                must(st.argv(tl, "setup", "list"), st.env)
                must(st.argv(tl, "setup", "backlog", "add", "--file", write_keys(tmp, n)),
                     st.env)
                series[(kind, name, n)] = (tl, st, [])
    for _ in range(a.claim_runs):
        order = list(series)
        rng.shuffle(order)
        for k in order:
            tl, st, xs = series[k]
            xs.append(must(st.argv(tl, "claimer", "checkout", "--next"), st.env))
    print(f"\n2. one `checkout --next` against the backlog's size (median of {a.claim_runs}, "
          "interleaved)")
    for kind in kinds:
        for name in builds:
            row = [statistics.median(series[(kind, name, n)][2]) for n in sizes]
            cells = ", ".join(f"{n:,} keys {t * 1000:.2f} ms" for n, t in zip(sizes, row))
            print(f"  {kind:4} {name:9} {cells}   ({row[-1] / row[0]:.2f}x)")
    for _, st, _ in series.values():
        st.remove()


def main():
    a = parse_args()
    builds = {"tasklock": os.path.abspath(a.tasklock), "baseline": os.path.abspath(a.baseline)}
    kinds = ["file"] + (["pg"] if a.url else [])
    for tl in builds.values():
        out = subprocess.run([tl, "--version"], capture_output=True, text=True, env=ENV)
        print(f"{tl}: {out.stdout.strip()}")
    rng = random.Random(SEED)
    tmp = tempfile.mkdtemp(prefix="tasklock-bl-", dir=a.tmp)
    try:
        bench_add(a, builds, kinds, tmp, rng)
        bench_claim(a, builds, kinds, tmp, rng)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if a.url:
            pg.drop_schemas(a.url, Store.schemas)


if __name__ == "__main__":
    main()
