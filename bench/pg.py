#!/usr/bin/env python3
"""Benchmark of the PostgreSQL store against the file store, in one run.

Run from anywhere:

    python3 bench/pg.py [--baseline-rev REV]

It builds `tasklock` as install.sh does, with and without `--features postgres`, and,
with --baseline-rev, that revision (bench/bench.py's build); starts a throwaway
PostgreSQL cluster on 127.0.0.1 (initdb into a temp dir, as the `postgres` user when run
as root; or use --url), and measures whole process invocations, as an agent sees them:

  1. one `checkout` and one `release` of a free key, per invocation: the file store and
     the PostgreSQL store with the feature built in, the file store of the default build
     (feature off) and, with --baseline-rev, of the binary built from that revision (what
     this change costs the file-store path), interleaved round by round in a shuffled
     order; plus the size of each binary;
  2. one `checkout --any` over a list of L keys whose first T are held by others (the
     keys ahead are read in bulk and judged; before claim-next each was also attempted
     and audited as a deny, so the cost grew with T): L = 1000 with T in (0, 100, 500),
     L = 10000 with T in (0, 100, 1000);
  3. a backlog drain: 16 agent processes take keys from an N-key backlog with
     `checkout --any` (each agent with the list in its own random order, as agents
     should) until none is free; claims per second, and a check that no key and no
     fencing token was handed out twice and that every key was taken. N is 1000 and
     --drain (10000), or --drain-sizes; a drain still going after --drain-limit seconds (300) stops there
     and says how far it got.
  4. changes of one key side by side (PostgreSQL): --agents agent processes each check
     out, renew and release a key of their own --rounds times at once; changes per second,
     for this build and, with --baseline-rev or --baseline, for that one, alternating two
     runs each (a build where every change takes the project's one lock shows here).
  5. a drain of the stored backlog: the N keys are added with `backlog add --file`, then
     --agents agent processes claim with `checkout --next` until nothing is ready; the
     same checks as 3. With --fresh-agents, the same backlog is drained again spawn per
     task, right after the one-agent drain: each claim by an agent id never seen before,
     which registers its process first (`beat`: `heartbeat --pid`, then `checkout
     --next`), with the claim (`pid`: `checkout --next --pid`), or not at all (`bare`).
     With --audit-events N, each schema's audit table holds N old events before its drain
     (a project that has run for a while), on PostgreSQL.
     With --baseline(-rev), the baseline drains the same backlog with
     `checkout --any` (benchmark 3) right before, in the same run. N: --next-sizes.
     Before and after the drains, the same harness spawns util-linux `flock -n FILE
     true` as fast as it can (the reference); each drain is also given as a ratio to it.
     With --fresh-fs (as root), each drain of the lock directory (here and in 3) runs on
     an ext4 file system made for it alone, so that no drain pays for the files an
     earlier one, or anything else on the machine, deleted (see docs/performance.md).
  6. the cost of one claim against the size of the stored backlog: N keys added, then
     --claim-runs claims by one agent, one at a time; the median claim, and the time
     `backlog add` took. N: --flat-sizes (1000, 10000, 100000).

Needs Linux, Python 3.9+ (standard library only), cargo and PostgreSQL's server binaries
(/usr/lib/postgresql/*/bin) unless --url is given. Figures: docs/performance.md.
"""

import argparse
import contextlib
import itertools
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (the house helpers: build, run, pct)

SEED = 20261123


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=200,
                   help="rounds of benchmark 1 (default 200)")
    p.add_argument("--warmup", type=int, default=10, help="unrecorded rounds first (default 10)")
    p.add_argument("--any-runs", type=int, default=5,
                   help="invocations per point of benchmark 2 (default 5)")
    p.add_argument("--drain", type=int, default=10_000,
                   help="keys in the large backlog of benchmark 3 (default 10000)")
    p.add_argument("--drain-sizes", help="comma-separated backlog sizes of benchmark 3 "
                   "(default: 1000 and --drain), e.g. 1000,3000,10000 to see how the cost "
                   "per claim grows with the backlog")
    p.add_argument("--agents", type=int, default=16, help="drain processes (default 16)")
    p.add_argument("--drain-limit", type=float, default=300,
                   help="stop a drain after this many seconds and report how far it got "
                   "(default 300)")
    p.add_argument("--stores", default="file,pg",
                   help="stores for benchmarks 2 and 3 (default file,pg)")
    p.add_argument("--skip", default="", help="comma-separated benchmarks to skip: 1,2,3,4,5,6")
    p.add_argument("--rounds", type=int, default=30,
                   help="benchmark 4: checkout+renew+release rounds per agent (default 30)")
    p.add_argument("--next-sizes", default="1000,10000",
                   help="backlog sizes of benchmark 5 (default 1000,10000)")
    p.add_argument("--fresh-agents", default="",
                   help="benchmark 5 also drains each backlog spawn per task, every claim by "
                   "a new agent id, right after the one-agent drain: comma-separated modes "
                   "beat (heartbeat --pid, then checkout --next), pid (checkout --next "
                   "--pid), bare (checkout --next, no process registered)")
    p.add_argument("--audit-events", type=int, default=0, metavar="N",
                   help="benchmark 5 on PostgreSQL: put N events in each schema's audit table "
                   "before its drain, as a project that has run for a while has (the default "
                   "bound, 40 MiB of events, holds about 400,000)")
    p.add_argument("--flat-sizes", default="1000,10000,100000",
                   help="backlog sizes of benchmark 6 (default 1000,10000,100000)")
    p.add_argument("--claim-runs", type=int, default=40,
                   help="claims measured per size in benchmark 6 (default 40)")
    p.add_argument("--tasklock", help="binary with the postgres feature to measure, skipping "
                   "the build")
    p.add_argument("--plain", help="the same without the feature (default: built, unless "
                   "--tasklock is given)")
    p.add_argument("--baseline-rev", help="also build this git revision (e.g. the commit "
                   "before the PostgreSQL store) and compare its file-store path")
    p.add_argument("--baseline", help="a prebuilt baseline binary instead of --baseline-rev")
    p.add_argument("--baseline-next", action="store_true",
                   help="benchmark 5: the baseline drains with checkout --next (and each "
                   "--fresh-agents mode) as this build does, each drain right before this "
                   "build's, instead of with checkout --any")
    p.add_argument("--also", action="append", default=[], metavar="NAME=BIN",
                   help="another binary whose file-store path benchmark 1 measures too "
                   "(e.g. a --no-default-features build); repeatable")
    p.add_argument("--url", help="an existing server (postgres://…); schemas bench_* are "
                   "created in it. Default: a throwaway cluster")
    p.add_argument("--session-url", help="with --url a pooler (PgBouncer in transaction "
                   "mode): the server itself, as TASKLOCK_SESSION_URL (docs/postgres.md)")
    p.add_argument("--fsync", choices=["on", "off"], default="on",
                   help="fsync of the throwaway cluster (default on, as a real server)")
    p.add_argument("--json-out", metavar="FILE", help="also write every figure to FILE")
    p.add_argument("--fresh-fs", choices=["off", "nojournal", "journal"], default="off",
                   help="benchmarks 3 and 5: each drain of the lock directory on a new "
                   "ext4 of its own (a loop device; needs root and mkfs.ext4), without "
                   "or with a journal. On ext4 without a journal, creating a file skips "
                   "the inodes freed in the last minute (six, while their blocks "
                   "are not yet written) one by one, so a drain right after a large "
                   "deletion is slow for reasons outside tasklock")
    return p.parse_args()


# --- building ---------------------------------------------------------------------------

def build(features):
    """Build the working tree as install.sh does (bench.release_build), with `features`,
    into target/bench-pg/<features or none>."""
    target = os.path.join(bench.REPO, "target", "bench-pg", features or "none")
    env, extra, release = bench.release_build()
    if features:
        extra += ["--features", features]
    print(f"bench: cargo build --release --locked {' '.join(extra)} (working tree)",
          file=sys.stderr, flush=True)
    rc = subprocess.run(["cargo", "build", "--release", "--locked", "--quiet",
                         "--target-dir", target] + extra, cwd=bench.REPO, env=env).returncode
    if rc != 0:
        sys.exit("bench: the build failed (see above)")
    return os.path.join(target, release, "tasklock")


# --- a throwaway server -------------------------------------------------------------------

def pg_bin():
    import glob
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                  key=lambda d: int(d.split("/")[-2].split(".")[0]))
    dirs = [d for d in dirs if os.path.exists(os.path.join(d, "initdb"))]
    if not dirs:
        sys.exit("bench: no PostgreSQL server binaries in /usr/lib/postgresql/*/bin; "
                 "apt-get install postgresql, or pass --url")
    return dirs[-1]


class Cluster:
    def __init__(self, fsync):
        self.bin = pg_bin()
        self.tmp = tempfile.mkdtemp(prefix="tasklock-bench-pg-")
        self.data = os.path.join(self.tmp, "data")
        self.prefix = []
        if os.geteuid() == 0:
            subprocess.run(["chown", "postgres", self.tmp], check=True)
            self.prefix = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups"]
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.sh([f"{self.bin}/initdb", "-D", self.data, "-A", "trust", "-U", "postgres",
                 "--no-sync"])
        opts = (f"-k {self.tmp} -p {self.port} -c listen_addresses=127.0.0.1 "
                f"-c fsync={self.fsync_word(fsync)} -c max_connections=200")
        self.sh([f"{self.bin}/pg_ctl", "-D", self.data, "-l", os.path.join(self.tmp, "log"),
                 "-w", "-o", opts, "start"])
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/postgres"
        self.version = subprocess.run([f"{self.bin}/postgres", "--version"],
                                      capture_output=True, text=True).stdout.strip()

    @staticmethod
    def fsync_word(v):
        return "on" if v == "on" else "off"

    def sh(self, argv):
        r = subprocess.run(self.prefix + argv, capture_output=True, text=True,
                           stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            sys.exit(f"bench: {' '.join(argv)} failed:\n{r.stdout}{r.stderr}")

    def stop(self):
        subprocess.run(self.prefix + [f"{self.bin}/pg_ctl", "-D", self.data, "-m", "fast",
                                      "stop"], capture_output=True)
        shutil.rmtree(self.tmp, ignore_errors=True)


# --- running ------------------------------------------------------------------------------

class Store:
    """Where a command keeps its checkouts: a lock directory, plus a schema when on
    PostgreSQL (a fresh one per Store)."""
    count = 0
    session_url = None
    schemas = []  # made in a server given with --url: dropped when the run ends

    def __init__(self, kind, tmp, url):
        Store.count += 1
        self.kind = kind
        self.dir = os.path.join(tmp, f"{kind}-{Store.count}", ".locks")
        os.makedirs(os.path.dirname(self.dir))
        self.env = dict(bench.ENV)
        if kind == "pg":
            schema = f"bench_{os.getpid()}_{Store.count}"
            self.env["TASKLOCK_URL"] = f"{url}?schema={schema}"
            Store.schemas.append(schema)
            if Store.session_url:
                self.env["TASKLOCK_SESSION_URL"] = Store.session_url

    def argv(self, tl, agent, *args):
        return [tl, *args, "--dir", self.dir, "--agent", agent]


def drop_schemas(url, schemas=None):
    """Drop the schemas this run made in a server it was given (`schemas`, by default
    this script's): left behind, every run's 10,000 keys and agents pile up there."""
    schemas = Store.schemas if schemas is None else schemas
    if not schemas:
        return
    if not shutil.which("psql"):
        print(f"bench: no psql to drop the schemas {', '.join(schemas)} with",
              file=sys.stderr)
        return
    sql = "".join(f"DROP SCHEMA IF EXISTS {s} CASCADE;" for s in schemas)
    r = subprocess.run(["psql", "-qAt", url, "-c", sql], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        print(f"bench: dropping the schemas failed: {r.stderr.strip()}", file=sys.stderr)


def run(argv, env):
    t0 = time.perf_counter_ns()
    pid = os.posix_spawn(argv[0], argv, env, file_actions=bench.FILE_ACTIONS)
    _, status = os.waitpid(pid, 0)
    return (time.perf_counter_ns() - t0) / 1e9, os.waitstatus_to_exitcode(status)


def must(argv, env, want=0):
    r = subprocess.run(argv, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if r.returncode != want:
        sys.exit(f"bench: `{' '.join(argv[:6])} …` exited {r.returncode}, expected {want}\n"
                 f"{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return r


def ms(x):
    return f"{x * 1000:.2f} ms"


def hold(tl, store, keys, jobs=4):
    """Hold each key (one plain checkout each, by agents holder-0..), a few at a time."""
    def take(i):
        must(store.argv(tl, f"holder-{i % 50}", "checkout", keys[i]), store.env)
    with ThreadPoolExecutor(jobs) as ex:
        list(ex.map(take, range(len(keys))))


# --- benchmark 4 --------------------------------------------------------------------------

def side_by_side(tl, tmp, url, agents, rounds):
    """Every agent changes only its own key, all at once: changes per second."""
    store = Store("pg", tmp, url)
    must(store.argv(tl, "setup", "list"), store.env)

    def agent(i):
        key = f"own-{i}"
        for _ in range(rounds):
            for args in (("checkout", key), ("renew", key), ("release", key)):
                _, code = run(store.argv(tl, f"agent-{i}", *args), store.env)
                if code != 0:
                    sys.exit(f"bench: {args[0]} {key} exited {code}")
    t0 = time.perf_counter()
    with ThreadPoolExecutor(agents) as ex:
        list(ex.map(agent, range(agents)))
    return agents * rounds * 3 / (time.perf_counter() - t0)


# --- benchmark 1 --------------------------------------------------------------------------

def bench_roundtrip(series, a, rng):
    """series: name -> (binary, Store). Each round: checkout then release of one key, for
    every series in a shuffled order."""
    times = {n: {"checkout": [], "release": []} for n in series}
    names = list(series)
    for r in range(a.warmup + a.runs):
        rng.shuffle(names)
        for n in names:
            tl, st = series[n]
            for op, want in (("checkout", 0), ("release", 0)):
                t, rc = run(st.argv(tl, "bench", op, "k"), st.env)
                if rc != want:
                    must(st.argv(tl, "bench", op, "k"), st.env, want)
                if r >= a.warmup:
                    times[n][op].append(t)
    return times


# --- benchmark 2 --------------------------------------------------------------------------

def bench_any(tl, kind, tmp, url, a):
    out = []
    for length, ahead in ((1000, 0), (1000, 100), (1000, 500),
                          (10_000, 0), (10_000, 100), (10_000, 1000)):
        if True:
            st = Store(kind, tmp, url)
            must(st.argv(tl, "setup", "list"), st.env)  # the schema, made before timing
            keys = [f"b{i:05d}" for i in range(length)]
            if ahead:
                hold(tl, st, keys[:ahead])
            xs = []
            for i in range(a.any_runs):
                argv = st.argv(tl, f"claimer-{i}", "checkout", "--any", *keys)
                t, rc = run(argv, st.env)
                if rc != 0:
                    must(argv, st.env)
                xs.append(t)
                # Give the key back, so every run finds the same T held ahead of it.
                must(st.argv(tl, f"claimer-{i}", "release", keys[ahead]), st.env)
            med = statistics.median(xs)
            out.append({"store": kind, "keys": length, "held_ahead": ahead, "median_s": med})
            print(f"  {kind:4} --any over {length:>5} keys, {ahead:>4} held ahead: "
                  f"{ms(med)}", flush=True)
    return out


FRESH_FS_SIZE = 4 << 30
FRESH_FS_IDS = itertools.count(1)


@contextlib.contextmanager
def fresh_fs(tmp, kind, mode):
    """Where a drain of `kind` keeps its store: `tmp`, or with --fresh-fs (the lock
    directory only) a new ext4 mounted from an image in `tmp`, removed afterwards."""
    if mode == "off" or kind != "file":
        yield tmp
        return
    n = next(FRESH_FS_IDS)
    image = os.path.join(tmp, f"fs-{n}.img")
    mnt = os.path.join(tmp, f"fs-{n}")
    os.makedirs(mnt)
    with open(image, "wb") as f:
        f.truncate(FRESH_FS_SIZE)
    opts = ["-O", "^has_journal"] if mode == "nojournal" else []
    for argv in (["mkfs.ext4", "-q", "-F", *opts, image], ["mount", "-o", "loop", image, mnt]):
        r = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            sys.exit(f"bench: --fresh-fs: {' '.join(argv)} failed: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", mnt], capture_output=True)
        os.unlink(image)


def drained(kind, n, agents, limit, agent, label):
    """Run `agent(i)` for every agent at once; each returns the (key, token) pairs it
    claimed. Checks that no key and no token was handed out twice and that every key was
    taken (unless stopped at --drain-limit); prints and returns the figures."""
    t0 = time.perf_counter()
    with ThreadPoolExecutor(agents) as ex:
        results = list(ex.map(agent, range(agents)))
    took = time.perf_counter() - t0
    claims = [c for r in results for c in r]
    keys_taken = [k for k, _ in claims]
    tokens = [t for _, t in claims]
    dup_keys = len(keys_taken) - len(set(keys_taken))
    dup_tokens = len(tokens) - len(set(tokens))
    left = n - len(set(keys_taken))
    per_agent = sorted(len(r) for r in results)
    res = {"store": kind, "keys": n, "agents": agents, "seconds": took,
           "claims": len(claims), "claims_per_s": len(claims) / took,
           "duplicate_keys": dup_keys, "duplicate_tokens": dup_tokens, "keys_left": left,
           "claims_per_agent_min_max": [per_agent[0], per_agent[-1]]}
    res["stopped_at_limit"] = left > 0 and took >= limit
    ok = dup_keys == 0 and dup_tokens == 0 and (left == 0 or res["stopped_at_limit"])
    print(f"  {kind:4} {label} of {n:>6} keys by {agents} agents: {took:.1f} s, "
          f"{res['claims_per_s']:.0f} claims/s, per agent {per_agent[0]}..{per_agent[-1]}, "
          f"duplicate keys {dup_keys}, duplicate tokens {dup_tokens}, keys left {left}"
          f"{' (stopped at --drain-limit)' if res['stopped_at_limit'] else ''}"
          f"{'' if ok else '  <-- WRONG'}", flush=True)
    if not ok:
        sys.exit("bench: the drain handed out a key or a token twice, or left keys")
    return res


# --- benchmark 3 --------------------------------------------------------------------------

def drain(tl, kind, tmp, url, n, agents, limit):
    st = Store(kind, tmp, url)
    keys = [f"job-{i:05d}" for i in range(n)]
    # Make the store (and schema) first, so the agents do not all create it at once.
    must(st.argv(tl, "setup", "list"), st.env)

    deadline = time.perf_counter() + limit

    def agent(i):
        rng = random.Random(SEED + i)
        mine = keys[:]
        rng.shuffle(mine)
        got = []
        while time.perf_counter() < deadline:
            argv = st.argv(tl, f"drainer-{i}", "checkout", "--json", "--any", *mine)
            r = subprocess.run(argv, env=st.env, capture_output=True, text=True,
                               stdin=subprocess.DEVNULL)
            if r.returncode == 2:
                return got
            if r.returncode != 0:
                raise RuntimeError(f"drainer-{i}: exit {r.returncode}: {r.stdout[-500:]}{r.stderr[-500:]}")
            c = json.loads(r.stdout)["checkout"]
            got.append((c["key"], c["token"]))
            # A key this agent took leaves its list (it would be "already yours").
            mine.remove(c["key"])
        return got

    return drained(kind, n, agents, limit, agent, "drain")


# --- benchmarks 5 and 6 ------------------------------------------------------------------

def add_backlog(tl, st, keys):
    """`backlog add --file` of `keys`; the seconds it took."""
    path = os.path.join(os.path.dirname(st.dir), f"backlog-{len(keys)}.txt")
    with open(path, "w") as f:
        f.write("\n".join(keys) + "\n")
    t0 = time.perf_counter()
    must(st.argv(tl, "setup", "backlog", "add", "--file", path), st.env)
    return time.perf_counter() - t0


FRESH_LABELS = {
    None: "--next drain",
    "beat": "--next drain, new agent per claim: heartbeat --pid, then checkout --next",
    "pid": "--next drain, new agent per claim: checkout --next --pid",
    "bare": "--next drain, new agent per claim, no process registered",
}


def fill_audit(st, events):
    """Put `events` old events in the audit table of `st`'s schema (made by a command
    before), with their running sizes where the schema keeps them (version 7)."""
    url, schema = st.env["TASKLOCK_URL"].split("?schema=")
    sql = f"""DO $b$ BEGIN
  CREATE TEMP TABLE old_events AS SELECT i, jsonb_build_object('ts', now(), 'event', 'acquire',
      'key', 'old-' || i, 'agent', 'old', 'token', i) AS e FROM generate_series(1, {events}) AS i;
  IF EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = '{schema}'
             AND table_name = 'audit' AND column_name = 'total') THEN
    INSERT INTO {schema}.audit (ts, event, key, agent, data, total)
      SELECT now(), 'acquire', e->>'key', 'old', e,
        sum(octet_length(e::text)) OVER (ORDER BY i) FROM old_events;
  ELSE
    INSERT INTO {schema}.audit (ts, event, key, agent, data)
      SELECT now(), 'acquire', e->>'key', 'old', e FROM old_events;
  END IF;
END $b$; ANALYZE {schema}.audit;"""
    r = subprocess.run(["psql", "-qAt", url, "-c", sql], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise RuntimeError(f"filling the audit table: {r.stderr.strip()}")


def drain_next(tl, kind, tmp, url, n, agents, limit, fresh=None, audit_events=0):
    """`fresh`: spawn per task, every claim by an agent id never seen before (the
    drainer's number and its claim's), so each claim is also that agent's first command:
    "beat" registers the agent's process first (`heartbeat --pid`, a process of its own,
    as before `checkout --pid`), "pid" registers it with the claim (`checkout --next
    --pid`), "bare" registers none. The process registered is this benchmark's own, which
    lives for the whole drain. `audit_events`: old events put in the audit table first
    (PostgreSQL)."""
    st = Store(kind, tmp, url)
    keys = [f"job-{i:06d}" for i in range(n)]
    must(st.argv(tl, "setup", "list"), st.env)
    add_backlog(tl, st, keys)
    if audit_events and kind == "pg":
        fill_audit(st, audit_events)
    deadline = time.perf_counter() + limit
    me = str(os.getpid())

    def agent(i):
        got = []
        while time.perf_counter() < deadline:
            who = f"drainer-{i}-{len(got)}" if fresh else f"drainer-{i}"
            if fresh == "beat":
                must(st.argv(tl, who, "heartbeat", "--pid", me), st.env)
            argv = st.argv(tl, who, "checkout", "--json", "--next")
            if fresh == "pid":
                argv += ["--pid", me]
            r = subprocess.run(argv, env=st.env, capture_output=True, text=True,
                               stdin=subprocess.DEVNULL)
            if r.returncode == 2:
                return got
            if r.returncode != 0:
                raise RuntimeError(f"drainer-{i}: exit {r.returncode}: {r.stdout[-500:]}{r.stderr[-500:]}")
            c = json.loads(r.stdout)["checkout"]
            if fresh in ("beat", "pid") and c["agent"]["pid"] != os.getpid():
                raise RuntimeError(f"{who}: its checkout does not name its process: {c}")
            got.append((c["key"], c["token"]))
        return got

    return drained(kind, n, agents, limit, agent, FRESH_LABELS[fresh])


def spawn_reference(tmp, agents, count):
    """The same harness as the drains (`agents` threads, each running one process at a
    time with its output captured) spawning util-linux `flock -n FILE true` (a file per
    thread: each takes its lock and runs `true`), `count` times in all: processes per
    second, the reference a claim per process is measured against in the same run."""
    per = count // agents

    def agent(i):
        lock = os.path.join(tmp, f"reference-{i}.lock")
        open(lock, "w").close()
        for _ in range(per):
            r = subprocess.run(["flock", "-n", lock, "true"], capture_output=True,
                               text=True, stdin=subprocess.DEVNULL)
            if r.returncode != 0:
                raise RuntimeError(f"flock: exit {r.returncode}: {r.stderr[-300:]}")

    t0 = time.perf_counter()
    with ThreadPoolExecutor(agents) as ex:
        list(ex.map(agent, range(agents)))
    rate = per * agents / (time.perf_counter() - t0)
    print(f"  reference: {agents} agents spawning `flock -n FILE true`: {rate:.0f}/s", flush=True)
    return rate


def flat(tl, kind, tmp, url, n, runs):
    st = Store(kind, tmp, url)
    must(st.argv(tl, "setup", "list"), st.env)
    added = add_backlog(tl, st, [f"job-{i:06d}" for i in range(n)])
    xs = []
    for i in range(runs):
        argv = st.argv(tl, "claimer", "checkout", "--next")
        t, rc = run(argv, st.env)
        if rc != 0:
            must(argv, st.env)
        xs.append(t)
    med = statistics.median(xs)
    print(f"  {kind:4} backlog of {n:>6} keys: one claim {ms(med)} (p90 {ms(bench.pct(xs, 90))}); "
          f"`backlog add` of all {added:.1f} s", flush=True)
    return {"store": kind, "keys": n, "claim_median_s": med, "claim_p90_s": bench.pct(xs, 90),
            "add_s": added}


# --- main ---------------------------------------------------------------------------------

def main():
    a = parse_args()
    if a.fresh_fs != "off" and (os.geteuid() != 0 or not shutil.which("mkfs.ext4")):
        sys.exit("bench: --fresh-fs mounts a file system of its own: run it as root, "
                 "with mkfs.ext4 (e2fsprogs) installed")
    Store.session_url = a.session_url
    rng = random.Random(SEED)
    skip = set(filter(None, a.skip.split(",")))
    tl = a.tasklock or build("postgres")
    # The file-store path as the default build has it (the feature off).
    plain = a.plain or (None if a.tasklock else build(""))
    baseline = a.baseline or (bench.build(a.baseline_rev) if a.baseline_rev else None)
    if baseline and os.path.realpath(baseline) == os.path.realpath(tl):
        sys.exit("bench: the baseline is the same file as the binary measured")
    if baseline:
        # Copied: bench.build of a revision and of the working tree may share a path.
        copy = os.path.join(tempfile.mkdtemp(prefix="tasklock-baseline-"), "tasklock")
        shutil.copy2(baseline, copy)
        baseline = copy
    cluster = None if a.url else Cluster(a.fsync)
    url = a.url or cluster.url
    tmp = tempfile.mkdtemp(prefix="tasklock-bench-")
    figures = {"binary_bytes": os.path.getsize(tl)}
    try:
        print(f"bench: tasklock --features postgres {tl} ({os.path.getsize(tl):,} bytes)")
        if baseline:
            print(f"bench: baseline {baseline} ({os.path.getsize(baseline):,} bytes, "
                  f"{a.baseline_rev or 'given'})")
            figures["baseline_bytes"] = os.path.getsize(baseline)
        print(f"bench: PostgreSQL {cluster.version if cluster else url}"
              f"{f', fsync={a.fsync}' if cluster else ''}; {os.cpu_count()} CPUs")
        if "1" not in skip:
            series = {"file": (tl, Store("file", tmp, url)), "pg": (tl, Store("pg", tmp, url))}
            if plain:
                series["file, default build"] = (plain, Store("file", tmp, url))
                print(f"bench: default build (no postgres feature) {plain} "
                      f"({os.path.getsize(plain):,} bytes)")
                figures["default_build_bytes"] = os.path.getsize(plain)
            if baseline:
                series["file, baseline"] = (baseline, Store("file", tmp, url))
            for spec in a.also:
                name, path = spec.split("=", 1)
                series[f"file, {name}"] = (os.path.abspath(path), Store("file", tmp, url))
                print(f"bench: {name} {path} ({os.path.getsize(path):,} bytes)")
                figures[f"{name}_bytes"] = os.path.getsize(path)
            print(f"1. checkout + release per invocation ({a.runs} rounds, medians, p90):")
            times = bench_roundtrip(series, a, rng)
            figures["roundtrip"] = {}
            for n, ops in times.items():
                c, r = ops["checkout"], ops["release"]
                figures["roundtrip"][n] = {
                    "checkout_median_s": statistics.median(c), "checkout_p90_s": bench.pct(c, 90),
                    "release_median_s": statistics.median(r), "release_p90_s": bench.pct(r, 90)}
                print(f"  {n:22} checkout {ms(statistics.median(c))} (p90 {ms(bench.pct(c, 90))})"
                      f", release {ms(statistics.median(r))} (p90 {ms(bench.pct(r, 90))})")
            if baseline:
                for name in ("file", "file, default build"):
                    if name not in times:
                        continue
                    for op in ("checkout", "release"):
                        new, old = times[name][op], times["file, baseline"][op]
                        lo, hi = bench.ratio_ci(new, old, rng)
                        ratio = statistics.median(new) / statistics.median(old)
                        figures[f"{name} {op} / baseline"] = [ratio, lo, hi]
                        print(f"  {name} {op} / baseline: {ratio:.3f} "
                              f"(95% CI {lo:.3f}..{hi:.3f})")
        kinds = [k for k in a.stores.split(",") if k]
        if "2" not in skip:
            print("2. checkout --any, one invocation (median):")
            figures["any"] = [x for k in kinds for x in bench_any(tl, k, tmp, url, a)]
        if "3" not in skip:
            sizes = ([int(x) for x in a.drain_sizes.split(",") if x] if a.drain_sizes
                     else [1000, a.drain])
            print(f"3. backlog drain, {a.agents} agents, checkout --any until empty:")
            figures["drain"] = []
            for n in sizes:
                for k in kinds:
                    with fresh_fs(tmp, k, a.fresh_fs) as where:
                        figures["drain"].append(drain(tl, k, where, url, n, a.agents,
                                                      a.drain_limit))
        if "4" not in skip:
            print(f"4. changes of one key side by side, {a.agents} agents x {a.rounds} "
                  "rounds of checkout, renew, release (PostgreSQL):")
            builds = [("this build", tl)] + ([("baseline", baseline)] if baseline else [])
            rates = {name: [] for name, _ in builds}
            for _ in range(2):
                for name, binary in builds:
                    rates[name].append(side_by_side(binary, tmp, url, a.agents, a.rounds))
            figures["side_by_side"] = rates
            for name, r in rates.items():
                print(f"  {name:12} {statistics.median(r):7.0f} changes/s "
                      f"(runs: {', '.join(f'{x:.0f}' for x in r)})")
            if baseline:
                ratio = statistics.median(rates["this build"]) / statistics.median(rates["baseline"])
                print(f"  this build / baseline: {ratio:.2f}x")
        if "5" not in skip:
            how = "--next" if a.baseline_next else "checkout --any, benchmark 3"
            print(f"5. stored backlog drain, {a.agents} agents, checkout --next until nothing "
                  f"is ready{f' (baseline: {how})' if baseline else ''}:")
            figures["drain_next"] = []
            before = spawn_reference(tmp, a.agents, 4000)
            for n in [int(x) for x in a.next_sizes.split(",") if x]:
                for k in kinds:
                    if baseline and not a.baseline_next:
                        with fresh_fs(tmp, k, a.fresh_fs) as where:
                            old = drain(baseline, k, where, url, n, a.agents, a.drain_limit)
                        old["binary"] = "baseline, --any"
                        figures["drain_next"].append(old)
                    for mode in [None] + list(filter(None, a.fresh_agents.split(","))):
                        if mode is not None and mode not in FRESH_LABELS:
                            sys.exit(f"bench: --fresh-agents {mode}: not beat, pid or bare")
                        label = FRESH_LABELS[mode] if mode else "--next"
                        builds = [("this build", tl)]
                        if baseline and a.baseline_next:
                            builds.insert(0, ("baseline", baseline))
                        for name, binary in builds:
                            with fresh_fs(tmp, k, a.fresh_fs) as where:
                                d = drain_next(binary, k, where, url, n, a.agents,
                                               a.drain_limit, fresh=mode,
                                               audit_events=a.audit_events)
                            d["binary"] = f"{name}, {label}"
                            figures["drain_next"].append(d)
            # Measured before and after, so load that came or went during the drains shows.
            after = spawn_reference(tmp, a.agents, 4000)
            ref = statistics.mean([before, after])
            figures["spawn_reference_per_s"] = [before, after]
            for d in figures["drain_next"]:
                d["per_reference"] = d["claims_per_s"] / ref
                print(f"  {d['store']:4} {d['binary']}: {d['claims_per_s']:.0f}/s, "
                      f"{d['per_reference']:.2f}x the reference", flush=True)
        if "6" not in skip:
            print(f"6. one checkout --next against the size of the backlog "
                  f"({a.claim_runs} claims, median):")
            figures["flat"] = [flat(tl, k, tmp, url, n, a.claim_runs)
                               for n in [int(x) for x in a.flat_sizes.split(",") if x]
                               for k in kinds]
    finally:
        if cluster:
            cluster.stop()
        else:
            drop_schemas(a.session_url or url)
        shutil.rmtree(tmp, ignore_errors=True)
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(figures, f, indent=2)


if __name__ == "__main__":
    main()
