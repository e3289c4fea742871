#!/usr/bin/env python3
"""A fleet of simulated agents against one store: sustained load, latency and errors.

Run from anywhere:

    python3 bench/fleet.py [--agents 100,300,1000] [--duration 60] [--store both]

N agents share one PostgreSQL (TASKLOCK_URL, a fresh schema per run) or one lock directory
on this host (--dir), and each does, on its own clock-driven timetable, what an agent in a
Claude Code session does; every step is a real `tasklock` process (posix_spawn, waitpid):

  - a heartbeat every --heartbeat-interval (60 s, tasklock's default; the session watcher's
    beat), as `tasklock heartbeat`;
  - a hook beat every --beat-every (5 s, a tool call), as `tasklock hook post-tool-use` with
    the JSON a Claude Code hook gets on stdin ({"session_id": AGENT, "cwd": REPO, ...}), or
    `tasklock heartbeat` with --beat-cmd heartbeat;
  - a task every --task-every (120 s): a claim, `checkout --next` from the backlog of
    --backlog keys kept in the store (`backlog add` at set-up; a release gives the key back),
    or with --claim any `checkout --any` over the list (its own shuffled order each time);
    then,
    --path-delay later and with probability --path-prob, a path checkout
    `checkout paths-AGENT --path 'src/areaK/**'` (K one of --areas areas, drawn per task;
    cwd is a git repository made for the run); and, --hold-fraction of the way through the
    task's period, one `release` of what the task got. These three run one after the other
    for an agent (a session runs its commands in turn); beats and heartbeats run beside them.

Every interval is drawn with +-(--jitter) (heartbeats, regular in a watcher, with a tenth of
it), and the phases are random, so the fleet starts in its steady state: agents that are
half-way through a task at the start had claimed it before the clock started (untimed set-up,
with one registering heartbeat per agent).

The schedule is open loop: it is fixed in advance by the clock, whatever the store answers.
At most --concurrency invocations run at once (a harness limit: a few CPUs cannot run 1,000
processes at once); an operation that is due waits its turn, and its latency runs from the
moment it was due, not from when it started, so queueing shows in the percentiles rather
than in a lower offered rate (no coordinated omission). An agent's task step that is due
while its previous step still runs starts after it, timed from when it was due.

For each store and N it reports the offered rate (operations due in the window, per second),
the achieved rate (operations finished in the window, per second), whether the fleet kept up
(achieved >= 97% of offered), latency p50, p99 and max per operation kind and overall, the
expected refusals (exit 2 of a claim or path checkout: held by someone else, or no free key)
and the errors: any other exit code, a signal, a hook that wrote to stderr (hooks always exit
0), or an operation still not run --settle seconds after the window. The first few errors
are printed with their output. Claims and path checkouts are checked for duplicate fencing
tokens. On PostgreSQL, with psql on PATH, pg_stat_activity is sampled every --pg-sample
seconds: tasklock connections, active, waiting for a lock (the project's advisory lock).

Needs Linux, Python 3.9+ (standard library only), git, cargo (unless --tasklock) and, for
PostgreSQL, a server (--pg-url, default TASKLOCK_TEST_PG_URL; else a throwaway cluster is
started as bench/pg.py starts one). Figures: docs/performance.md, "A fleet on one PostgreSQL".
"""

import argparse
import collections
import heapq
import json
import os
import platform
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (the house helpers: REPO, pct)

SEED = 20261126
INF = float("inf")
KINDS = ("heartbeat", "beat", "claim", "path checkout", "release")
# Exit 2 is an answer, not a failure, for these: held by someone else / no key free.
EXPECTED_2 = {"claim", "path checkout"}


def parse_args():
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="See the top of bench/fleet.py and docs/performance.md for what is measured.")
    p.add_argument("--agents", default="100,300,1000",
                   help="fleet sizes on PostgreSQL, comma-separated (default 100,300,1000)")
    p.add_argument("--file-agents", default="100",
                   help="fleet sizes on the file store (default 100)")
    p.add_argument("--store", choices=["pg", "file", "both"], default="both",
                   help="which stores to run (default both)")
    p.add_argument("--duration", type=float, default=60,
                   help="seconds of schedule per run, the measured window (default 60)")
    p.add_argument("--heartbeat-interval", type=float, default=60,
                   help="seconds between an agent's heartbeats (default 60, tasklock's "
                   "heartbeat_interval; another value is written to config.yaml)")
    p.add_argument("--beat-every", type=float, default=5,
                   help="mean seconds between an agent's hook beats, i.e. tool calls "
                   "(default 5; 0 for none)")
    p.add_argument("--beat-cmd", choices=["hook", "heartbeat"], default="hook",
                   help="what a hook beat runs: `hook post-tool-use` with the hook's JSON on "
                   "stdin (default), or `heartbeat`")
    p.add_argument("--task-every", type=float, default=120,
                   help="mean seconds between an agent's claims (default 120; 0 for none)")
    p.add_argument("--hold-fraction", type=float, default=0.5,
                   help="how far through its period a task is released (default 0.5)")
    p.add_argument("--path-prob", type=float, default=1.0,
                   help="share of tasks that also take a path checkout (default 1.0)")
    p.add_argument("--path-delay", type=float, default=3,
                   help="seconds from the claim to the path checkout (default 3)")
    p.add_argument("--areas", type=int,
                   help="areas src/areaK/** the path checkouts draw from (default 4 x N, "
                   "so some collide: exit 2)")
    p.add_argument("--backlog", type=int, default=2000,
                   help="keys in the shared backlog that claims take from (default 2000)")
    p.add_argument("--claim", choices=["next", "any"], default="next",
                   help="how a task is claimed: `checkout --next` from the stored backlog "
                   "(default) or `checkout --any` over the list")
    p.add_argument("--jitter", type=float, default=0.5,
                   help="each interval is drawn from mean x (1 +- jitter) (default 0.5)")
    p.add_argument("--concurrency", type=int, default=32,
                   help="invocations running at once, at most (default 32)")
    p.add_argument("--settle", type=float, default=120,
                   help="after the window, wait this long for operations still due; those "
                   "not run by then count as errors (default 120)")
    p.add_argument("--pg-url", default=os.environ.get("TASKLOCK_TEST_PG_URL") or None,
                   help="PostgreSQL server; each run gets a fresh schema fleet_* in it "
                   "(default TASKLOCK_TEST_PG_URL; else a throwaway cluster)")
    p.add_argument("--session-url", default=None,
                   help="with --pg-url a pooler (PgBouncer in transaction mode): the server "
                   "itself, as TASKLOCK_SESSION_URL, the setup docs/postgres.md describes")
    p.add_argument("--pg-sample", type=float, default=0.25,
                   help="sample pg_stat_activity every this many seconds through psql "
                   "(default 0.25; 0 for never)")
    p.add_argument("--keep", action="store_true",
                   help="keep the schemas and temporary directories")
    p.add_argument("--tasklock", help="binary to measure (with the postgres feature), "
                   "skipping the build")
    p.add_argument("--tmpdir", help="where the repositories and lock directories go "
                   "(default: the system's temporary directory)")
    p.add_argument("--errors-shown", type=int, default=5,
                   help="errors printed with their output, per run (default 5)")
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--json-out", metavar="FILE", help="also write every figure and every "
                   "operation's timing to FILE")
    a = p.parse_args()
    a.agents = [int(x) for x in a.agents.split(",") if x.strip()]
    a.file_agents = [int(x) for x in a.file_agents.split(",") if x.strip()]
    if not 0 < a.hold_fraction < 1:
        p.error("--hold-fraction must be between 0 and 1")
    if not 0 <= a.jitter < 1:
        p.error("--jitter must be in [0, 1)")
    if a.concurrency < 1:
        p.error("--concurrency must be at least 1")
    if a.task_every > 0 and a.path_delay >= a.hold_fraction * a.task_every * (1 - a.jitter):
        p.error("--path-delay must be shorter than the shortest hold, "
                "--hold-fraction x --task-every x (1 - --jitter)")
    return a


# --- building -----------------------------------------------------------------------------

def build():
    """Build the working tree as install.sh and scripts/dist.sh do (bench.release_build),
    with the PostgreSQL store, into $CARGO_TARGET_DIR (or target)/bench-fleet."""
    base = os.environ.get("CARGO_TARGET_DIR") or os.path.join(bench.REPO, "target")
    target = os.path.join(base, "bench-fleet")
    env, extra, release = bench.release_build()
    extra += ["--features", "postgres"]
    print(f"fleet: cargo build --release --locked {' '.join(extra)} (working tree)",
          file=sys.stderr, flush=True)
    rc = subprocess.run(["cargo", "build", "--release", "--locked", "--quiet",
                         "--target-dir", target] + extra, cwd=bench.REPO, env=env).returncode
    if rc != 0:
        sys.exit("fleet: the build failed (see above)")
    return os.path.join(target, release, "tasklock")


# --- one invocation -----------------------------------------------------------------------

CLOCK = time.monotonic
_local = threading.local()
LIVE = set()    # pids of the tasklock processes running now (for the sampler)


def spawn(argv, env, stdin_path, tmp):
    """Run argv to its end with stdin from stdin_path (or /dev/null) and stdout, stderr in
    files of this thread. Returns (start, end, exit code, stdout path, stderr path)."""
    if not hasattr(_local, "out"):
        n = threading.get_ident()
        _local.out = os.path.join(tmp, f"out-{n}")
        _local.err = os.path.join(tmp, f"err-{n}")
    w = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    actions = [(os.POSIX_SPAWN_OPEN, 0, stdin_path or os.devnull, os.O_RDONLY, 0),
               (os.POSIX_SPAWN_OPEN, 1, _local.out, w, 0o600),
               (os.POSIX_SPAWN_OPEN, 2, _local.err, w, 0o600)]
    start = CLOCK()
    pid = os.posix_spawn(argv[0], argv, env, file_actions=actions)
    LIVE.add(pid)
    _, status = os.waitpid(pid, 0)
    end = CLOCK()
    LIVE.discard(pid)
    return start, end, os.waitstatus_to_exitcode(status), _local.out, _local.err


def slurp(path, limit=4000):
    try:
        with open(path, "rb") as f:
            return f.read()[-limit:].decode(errors="replace")
    except OSError:
        return ""


def must(argv, env):
    r = subprocess.run(argv, env=env, capture_output=True, text=True,
                       stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        sys.exit(f"fleet: set-up `{' '.join(argv[1:6])} …` exited {r.returncode}\n"
                 f"{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return r


# --- the store ----------------------------------------------------------------------------

def psql_ok():
    return shutil.which("psql") is not None


def psql(url, sql):
    """Run sql through psql against the server of url (its ?schema= dropped)."""
    base = url.split("?", 1)[0]
    return subprocess.run(["psql", "-XAtq", "-v", "ON_ERROR_STOP=1", base, "-c", sql],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)


def proc_stat(pid):
    """(parent pid, CPU seconds of its reaped children) of a process, from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    return int(rest[1]), (int(rest[13]) + int(rest[14])) / tick


def cpu_snapshot(postmaster):
    """CPU counters: the machine's busy and total jiffies, this harness, the tasklock
    processes it has reaped, and the PostgreSQL backends the postmaster has reaped."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    pm = proc_stat(postmaster) if postmaster else None
    return {"busy": sum(v) - v[3] - v[4], "total": sum(v),
            "harness": me.ru_utime + me.ru_stime, "children": kids.ru_utime + kids.ru_stime,
            "backends": pm[1] if pm else None}


def cpu_use(a, b, ops):
    """What the machine's CPUs did between snapshots a and b, over `ops` invocations."""
    total = b["total"] - a["total"]
    out = {"machine_busy": (b["busy"] - a["busy"]) / total if total else None,
           "tasklock_ms_per_op": 1000 * (b["children"] - a["children"]) / ops if ops else None,
           "harness_ms_per_op": 1000 * (b["harness"] - a["harness"]) / ops if ops else None,
           "backends_ms_per_op": None}
    if a["backends"] is not None and b["backends"] is not None and ops:
        out["backends_ms_per_op"] = 1000 * (b["backends"] - a["backends"]) / ops
    # The rest of the busy time: other processes (a build beside the benchmark, the
    # server's own background work, the kernel's threads), as a share of all CPU time.
    tick = os.sysconf("SC_CLK_TCK")
    ours = (b["children"] - a["children"]) + (b["harness"] - a["harness"])
    if out["backends_ms_per_op"] is not None:
        ours += b["backends"] - a["backends"]
    out["other_busy"] = ((b["busy"] - a["busy"]) / tick - ours) / (total / tick) if total else None
    return out


class Run:
    """One fleet of N agents on one store, in a fresh repository (and schema)."""

    def __init__(self, tl, kind, n, a, base_tmp, url, run_no):
        self.tl, self.kind, self.n, self.a = tl, kind, n, a
        self.tmp = tempfile.mkdtemp(prefix=f"fleet-{kind}-{n}-", dir=base_tmp)
        self.repo = os.path.join(self.tmp, "repo")
        self.dir = os.path.join(self.repo, ".locks")
        self.io = os.path.join(self.tmp, "io")
        os.makedirs(self.io)
        subprocess.run(["git", "init", "-q", self.repo], check=True)
        self.env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C",
                    "HOME": self.tmp}
        self.schema = None
        self.url = None
        if kind == "pg":
            self.schema = f"fleet_{os.getpid()}_{run_no}"
            sep = "&" if "?" in url else "?"
            self.url = f"{url}{sep}schema={self.schema}"
            self.env["TASKLOCK_URL"] = self.url
            if a.session_url:
                self.env["TASKLOCK_SESSION_URL"] = a.session_url
        self.agents = [f"fleet-{i:04d}" for i in range(n)]
        self.backlog = [f"task-{i:05d}" for i in range(a.backlog)]
        self.areas = a.areas or 4 * n

    def argv(self, agent, *args):
        return [self.tl, *args, "--dir", self.dir, "--agent", agent]

    def hook_argv(self):
        # As Claude Code runs it: the identity comes from the JSON on stdin.
        return [self.tl, "--dir", self.dir, "hook", "post-tool-use"]

    def payload(self, agent):
        path = os.path.join(self.io, f"hook-{agent}.json")
        if not os.path.exists(path):
            with open(path, "w") as f:
                json.dump({"session_id": agent, "cwd": self.repo,
                           "transcript_path": os.path.join(self.tmp, f"{agent}.jsonl"),
                           "hook_event_name": "PostToolUse", "tool_name": "Bash",
                           "tool_input": {"command": "cargo test", "description": "tests"},
                           "tool_response": {"stdout": "ok", "stderr": "",
                                             "interrupted": False}}, f)
        return path

    def cleanup(self):
        if self.a.keep:
            print(f"fleet: kept {self.tmp}" + (f" and schema {self.schema}" if self.schema
                                                else ""))
            return
        if self.schema and psql_ok():
            psql(self.url, f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
        shutil.rmtree(self.tmp, ignore_errors=True)


# --- the schedule -------------------------------------------------------------------------

class Op:
    __slots__ = ("kind", "agent", "due", "start", "end", "rc", "error", "skipped", "task")

    def __init__(self, kind, agent, due, task=None):
        self.kind, self.agent, self.due, self.task = kind, agent, due, task
        self.start = self.end = self.rc = self.error = None
        self.skipped = False


class Agent:
    def __init__(self, idx, name, rng):
        self.idx, self.name, self.rng = idx, name, rng
        self.held = set()          # keys this agent holds (from its claims, path checkouts)
        self.lane_busy = False     # a task step of this agent is queued or running
        self.lane = collections.deque()


def draw(rng, mean, jitter):
    return mean * rng.uniform(1 - jitter, 1 + jitter)


def schedule(run, rng):
    """Every operation due in [0, duration), and the task steps that must be done before
    the clock starts (agents half-way through a task: their claim, path checkout)."""
    a, d = run.a, run.a.duration
    ops, pre = [], []
    agents = [Agent(i, name, random.Random(rng.random())) for i, name in enumerate(run.agents)]
    for ag in agents:
        r = ag.rng
        hb = a.heartbeat_interval
        t = r.uniform(0, hb)
        while t < d:
            ops.append(Op("heartbeat", ag, t))
            t += draw(r, hb, a.jitter / 10)
        if a.beat_every > 0:
            t = r.uniform(0, a.beat_every)
            while t < d:
                ops.append(Op("beat", ag, t))
                t += draw(r, a.beat_every, a.jitter)
        if a.task_every > 0:
            period = draw(r, a.task_every, a.jitter)
            s = -r.uniform(0, period)    # the first task began before the clock started
            while s < d:
                task = {"area": r.randrange(run.areas), "path": r.random() < a.path_prob}
                steps = [("claim", s)]
                if task["path"]:
                    steps.append(("path checkout", s + a.path_delay))
                release = s + a.hold_fraction * period
                steps.append(("release", release))
                for kind, t in steps:
                    if t < 0 and release >= 0:
                        pre.append(Op(kind, ag, t, task))
                    elif 0 <= t < d:
                        ops.append(Op(kind, ag, t, task))
                s += period
                period = draw(r, a.task_every, a.jitter)
    ops.sort(key=lambda o: o.due)
    pre.sort(key=lambda o: o.due)
    return agents, ops, pre


# --- running ------------------------------------------------------------------------------

class Fleet:
    def __init__(self, run, agents, ops):
        self.run, self.agents, self.ops = run, agents, ops
        self.lock = threading.Lock()
        self.ex = None
        self.t0 = None
        self.stop = False
        self.pending = 0
        self.done = threading.Condition(self.lock)
        self.tokens = []

    def argv_for(self, op):
        run, ag = self.run, op.agent
        if op.kind == "heartbeat":
            return run.argv(ag.name, "heartbeat"), None
        if op.kind == "beat":
            if run.a.beat_cmd == "heartbeat":
                return run.argv(ag.name, "heartbeat"), None
            return run.hook_argv(), run.payload(ag.name)
        if op.kind == "claim" and run.a.claim == "next":
            return run.argv(ag.name, "checkout", "--json", "--next",
                            "--reason", "fleet benchmark"), None
        if op.kind == "claim":
            keys = run.backlog[:]
            ag.rng.shuffle(keys)
            return run.argv(ag.name, "checkout", "--json", "--any", *keys,
                            "--reason", "fleet benchmark"), None
        if op.kind == "path checkout":
            area = f"src/area{op.task['area']}/**"
            return run.argv(ag.name, "checkout", "--json", f"paths-{ag.name}", "--path", area,
                            "--reason", "fleet benchmark"), None
        if op.kind == "release":
            keys = sorted(ag.held)
            if not keys:
                return None, None
            return run.argv(ag.name, "release", *keys), None
        raise ValueError(op.kind)

    def execute(self, op, base=None):
        """Run one operation now; record its times relative to the clock's start."""
        base = self.t0 if base is None else base
        argv, stdin = self.argv_for(op)
        if argv is None:
            op.skipped = True
            return
        if self.stop:
            op.error = "not run: still waiting when --settle ran out"
            return
        start, end, rc, out, err = spawn(argv, self.run.env, stdin, self.run.io)
        op.start, op.end, op.rc = start - base, end - base, rc
        ok = rc == 0 or (rc == 2 and op.kind in EXPECTED_2)
        errtext = None
        if op.kind == "beat" and self.run.a.beat_cmd == "hook":
            errtext = slurp(err)
            if errtext.strip():
                ok = False
        if not ok:
            op.error = (f"exit {rc}" if rc >= 0 else f"signal {-rc}") + \
                f": {' '.join(argv[1:4])} …\n" + (errtext if errtext is not None else slurp(err))
            return
        if rc == 0 and op.kind in ("claim", "path checkout"):
            text = slurp(out, 1 << 20)
            try:
                c = json.loads(text)["checkout"]
                op.agent.held.add(c["key"])
                if c.get("token") is not None:
                    with self.lock:
                        self.tokens.append((c["token"], c["key"], op.agent.name))
            except (ValueError, KeyError, TypeError) as e:
                op.error = f"unreadable output of {op.kind} ({e}): {text[:300]}"
        if rc == 0 and op.kind == "release":
            op.agent.held.clear()

    # Task steps of one agent run in turn; the rest run as soon as a slot is free.
    def submit(self, op):
        with self.lock:
            self.pending += 1
            if op.kind in ("claim", "path checkout", "release"):
                if op.agent.lane_busy:
                    op.agent.lane.append(op)
                    return
                op.agent.lane_busy = True
        self.ex.submit(self.work, op)

    def work(self, op):
        try:
            self.execute(op)
        except Exception as e:  # noqa: BLE001  (reported as an error of the harness)
            op.error = f"harness: {e!r}"
        nxt = None
        with self.lock:
            if op.kind in ("claim", "path checkout", "release"):
                if op.agent.lane:
                    nxt = op.agent.lane.popleft()
                else:
                    op.agent.lane_busy = False
            self.pending -= 1
            if self.pending == 0:
                self.done.notify_all()
        if nxt is not None:
            try:
                self.ex.submit(self.work, nxt)
            except RuntimeError:    # stopped: the executor takes no more work
                self.work(nxt)      # (which, stopped, runs nothing and says so)

    def go(self, concurrency, settle):
        self.ex = ThreadPoolExecutor(concurrency)
        self.t0 = CLOCK() + 0.5
        try:
            for op in self.ops:
                while True:
                    wait = self.t0 + op.due - CLOCK()
                    if wait <= 0:
                        break
                    time.sleep(min(wait, 0.05))
                self.submit(op)
            window_end = self.t0 + self.run.a.duration
            with self.lock:
                while self.pending and CLOCK() < window_end + settle:
                    self.done.wait(0.2)
                if self.pending:
                    self.stop = True
        except BaseException:
            self.stop = True    # interrupted: start nothing more, let the running ones end
            raise
        finally:
            self.ex.shutdown(wait=True)


def setup(run, pre, agents, concurrency):
    """Untimed: make the store, register every agent (one heartbeat each), and take what
    the agents half-way through a task hold at the start."""
    if run.a.heartbeat_interval != 60:
        # Read from the lock directory's config.yaml on both stores.
        os.makedirs(run.dir, exist_ok=True)
        secs = max(1, round(run.a.heartbeat_interval))
        with open(os.path.join(run.dir, "config.yaml"), "w") as f:
            f.write(f"heartbeat_interval: {secs}s\n")
    # The schema (PostgreSQL) or the lock directory, before the agents come.
    must(run.argv("setup", "heartbeat"), run.env)
    if run.a.claim == "next":
        listing = os.path.join(run.tmp, "backlog.txt")
        with open(listing, "w") as f:
            f.write("\n".join(run.backlog) + "\n")
        must(run.argv("setup", "backlog", "add", "--file", listing), run.env)
    jobs = max(1, min(8, concurrency))
    with ThreadPoolExecutor(jobs) as ex:
        list(ex.map(lambda ag: must(run.argv(ag.name, "heartbeat"), run.env), agents))
    fleet = Fleet(run, agents, [])
    by_agent = collections.defaultdict(list)
    for op in pre:
        by_agent[op.agent.idx].append(op)

    def steps(ops):
        for op in ops:
            fleet.execute(op, base=0)
            if op.error:
                sys.exit(f"fleet: set-up {op.kind} of {op.agent.name} failed: {op.error}")
    with ThreadPoolExecutor(jobs) as ex:
        list(ex.map(steps, by_agent.values()))
    return fleet.tokens


class Sampler:
    """pg_stat_activity through one psql process running `\\watch`. Sessions named
    `tasklock/<pid>` count when the pid is one of this fleet's processes; behind a pooler
    with --session-url every command's sessions are named `tasklock` and all count (run it
    on a server no other tasklock uses at the time). Other sessions are counted apart."""
    SQL = ("SELECT extract(epoch from clock_timestamp()) || '|' || coalesce(string_agg("
           "coalesce(nullif(substr(application_name, 10), ''), 'store') || ':' || "
           "coalesce(state, '') || ':' || "
           "coalesce(wait_event_type, '') || ':' || coalesce(wait_event, ''), ','), '') "
           "FROM pg_stat_activity WHERE application_name = 'tasklock' "
           "OR application_name LIKE 'tasklock/%'")

    def __init__(self, url, every):
        self.rows = []
        self.p = subprocess.Popen(["psql", "-XAtq", url.split("?", 1)[0]],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True)
        # Its own backend's parent is the postmaster (when the server runs on this host),
        # whose reaped children are the backends of every command.
        self.p.stdin.write("SELECT pg_backend_pid();\n")
        self.p.stdin.flush()
        first = proc_stat(int(self.p.stdout.readline().strip() or 0) or -1)
        self.postmaster = first[0] if first else None
        self.p.stdin.write(f"{self.SQL} \\watch {every}\n")
        self.p.stdin.flush()
        self.on = False
        self.t = threading.Thread(target=self.read, daemon=True)
        self.t.start()

    def read(self):
        for line in self.p.stdout:
            if not self.on or "|" not in line:
                continue
            sessions = line.strip().split("|", 1)[1]
            mine = other = active = waiting = advisory = idle_tx = 0
            for s in filter(None, sessions.split(",")):
                pid, state, wtype, wevent = (s.split(":") + ["", "", ""])[:4]
                if pid != "store" and (not pid.isdigit() or int(pid) not in LIVE):
                    other += 1
                    continue
                mine += 1
                active += state == "active"
                waiting += wtype == "Lock"
                advisory += wtype == "Lock" and wevent == "advisory"
                idle_tx += state.startswith("idle in transaction")
            self.rows.append((mine, active, waiting, advisory, idle_tx, other))

    def close(self):
        self.p.terminate()
        self.p.wait()

    def summary(self):
        rows = self.rows
        if not rows:
            return None
        col = lambda i: [r[i] for r in rows]  # noqa: E731
        mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
        return {"samples": len(rows),
                "connections_mean": mean(col(0)), "connections_max": max(col(0)),
                "active_mean": mean(col(1)),
                "lock_waiting_mean": mean(col(2)), "lock_waiting_max": max(col(2)),
                "advisory_waiting_mean": mean(col(3)),
                "samples_with_a_lock_waiter": sum(1 for x in col(2) if x) / len(rows),
                "idle_in_transaction_mean": mean(col(4)),
                "other_tasklock_sessions_mean": mean(col(5))}


# --- figures ------------------------------------------------------------------------------

def pct(xs, q):
    return bench.pct(xs, q) if xs else None


def figures(run, fleet, pre_tokens, sampler):
    a, d = run.a, run.a.duration
    ops = [o for o in fleet.ops if not o.skipped]
    for o in ops:
        if o.end is None and not o.error:
            o.error = "not run (lost by the harness)"
    done = [o for o in ops if o.end is not None]
    errors = [o for o in ops if o.error]
    # An operation never run (--settle ran out) counts as infinitely late.
    lat = lambda os_: [o.end - o.due if o.end is not None else INF for o in os_]  # noqa: E731
    res = {"store": run.kind, "agents": run.n, "duration_s": d,
           "offered": len(ops), "offered_per_s": len(ops) / d,
           "finished_in_window": sum(1 for o in done if o.end < d),
           "skipped_releases": sum(1 for o in fleet.ops if o.skipped)}
    res["achieved_per_s"] = res["finished_in_window"] / d
    res["kept_up"] = res["achieved_per_s"] >= 0.97 * res["offered_per_s"]
    res["not_started_at_window_end"] = sum(1 for o in ops if o.start is None or o.start >= d)
    res["last_end_after_window_s"] = max(0.0, max([o.end for o in done], default=d) - d)
    res["errors"] = len(errors)
    res["expected_refusals"] = sum(1 for o in done if o.rc == 2 and o.kind in EXPECTED_2)
    all_lat = lat(ops)
    res["latency"] = {"p50_s": pct(all_lat, 50), "p99_s": pct(all_lat, 99),
                      "max_s": max(all_lat, default=None)}
    waits = [o.start - o.due for o in done]
    service = [o.end - o.start for o in done]
    res["queue_delay"] = {"p50_s": pct(waits, 50), "p99_s": pct(waits, 99),
                          "max_s": max(waits, default=None)}
    res["service"] = {"p50_s": pct(service, 50), "p99_s": pct(service, 99),
                      "max_s": max(service, default=None)}
    res["kinds"] = {}
    for k in KINDS:
        ks = [o for o in ops if o.kind == k]
        if not ks:
            continue
        kl = lat(ks)
        res["kinds"][k] = {
            "count": len(ks), "p50_s": pct(kl, 50), "p99_s": pct(kl, 99),
            "max_s": max(kl, default=None),
            "service_p50_s": pct([o.end - o.start for o in ks if o.end is not None], 50),
            "exit_2": sum(1 for o in ks if o.rc == 2 and k in EXPECTED_2),
            "errors": sum(1 for o in ks if o.error)}
    tokens = pre_tokens + fleet.tokens
    res["duplicate_tokens"] = len(tokens) - len({t for t, _, _ in tokens})
    if res["duplicate_tokens"]:
        res["errors"] += res["duplicate_tokens"]
    res["first_errors"] = [f"[{o.kind} of {o.agent.name}, due {o.due:.2f} s] {o.error}"
                           for o in sorted(errors, key=lambda o: o.due)[:a.errors_shown]]
    res["pg_activity"] = sampler.summary() if sampler else None
    res["ops"] = [[o.kind, o.agent.idx, round(o.due, 4),
                   None if o.start is None else round(o.start, 4),
                   None if o.end is None else round(o.end, 4), o.rc, bool(o.error)]
                  for o in ops]
    return res


def ms(x):
    if x == INF:
        return "not run"
    return "-" if x is None else (f"{x * 1000:.0f} ms" if x >= 0.1 else f"{x * 1000:.1f} ms")


def store_name(k):
    return "PostgreSQL" if k == "pg" else "files"


def one_run(tl, kind, n, a, base_tmp, url, run_no):
    run = Run(tl, kind, n, a, base_tmp, url, run_no)
    # The same timetable for a given N on every store.
    rng = random.Random(f"{a.seed}-{n}")
    sampler = None
    try:
        agents, ops, pre = schedule(run, rng)
        print(f"fleet: {store_name(kind)}, {n} agents: set-up ({n} registering heartbeats, "
              f"{len(pre)} task steps begun before the clock)…", flush=True)
        t = CLOCK()
        pre_tokens = setup(run, pre, agents, a.concurrency)
        print(f"fleet:   set-up took {CLOCK() - t:.1f} s; running {len(ops)} operations "
              f"over {a.duration:g} s ({len(ops) / a.duration:.1f}/s offered), at most "
              f"{a.concurrency} at once…", flush=True)
        if kind == "pg" and a.pg_sample > 0 and psql_ok():
            sampler = Sampler(run.url, a.pg_sample)
        fleet = Fleet(run, agents, ops)
        if sampler:
            sampler.on = True
        load0 = os.getloadavg()[0]
        postmaster = sampler.postmaster if sampler else None
        cpu0 = cpu_snapshot(postmaster)
        fleet.go(a.concurrency, a.settle)
        cpu1 = cpu_snapshot(postmaster)
        if sampler:
            sampler.on = False
        res = figures(run, fleet, pre_tokens, sampler)
        res["load_average_1m"] = [load0, os.getloadavg()[0]]
        res["cpu"] = cpu_use(cpu0, cpu1, sum(1 for o in fleet.ops if o.end is not None))
        print_run(res)
        return res
    finally:
        if sampler:
            sampler.close()
        run.cleanup()


def print_run(r):
    lat = r["latency"]
    print(f"fleet:   {store_name(r['store'])}, {r['agents']} agents: offered "
          f"{r['offered_per_s']:.1f}/s, achieved {r['achieved_per_s']:.1f}/s "
          f"({'kept up' if r['kept_up'] else 'DID NOT KEEP UP'}), p50 {ms(lat['p50_s'])}, "
          f"p99 {ms(lat['p99_s'])}, max {ms(lat['max_s'])}, errors {r['errors']}, "
          f"last operation ended {r['last_end_after_window_s']:.1f} s after the window",
          flush=True)
    for line in r["first_errors"]:
        print("fleet:   error " + line.rstrip().replace("\n", "\n          "), flush=True)


def report(results, a, tl, pg_version):
    print()
    print(f"Fleet benchmark: {a.duration:g} s per run; per agent a heartbeat every "
          f"{a.heartbeat_interval:g} s, a hook beat (`{'hook post-tool-use' if a.beat_cmd == 'hook' else 'heartbeat'}`) "
          f"every {a.beat_every:g} s, a task (claim with --{a.claim} over {a.backlog} keys, "
          f"path checkout p={a.path_prob:g}, release) every {a.task_every:g} s; jitter "
          f"+-{a.jitter:g}; at most {a.concurrency} invocations at once. "
          f"{os.cpu_count()} CPUs, {platform.release()}; {pg_version or 'no PostgreSQL'}.")
    print()
    print("| store | agents | offered ops/s | achieved ops/s | kept up | p50 | p99 | max "
          "| errors | exit 2 (expected) |")
    print("|---|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    for r in results:
        lat = r["latency"]
        print(f"| {store_name(r['store'])} | {r['agents']:,} | {r['offered_per_s']:.1f} | "
              f"{r['achieved_per_s']:.1f} | {'yes' if r['kept_up'] else '**no**'} | "
              f"{ms(lat['p50_s'])} | {ms(lat['p99_s'])} | {ms(lat['max_s'])} | "
              f"{r['errors']} | {r['expected_refusals']} |")
    print()
    print("Latency from the moment each operation was due, by kind (service: from spawn):")
    print()
    print("| store | agents | operation | count | p50 | p99 | max | service p50 | exit 2 "
          "| errors |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        for k, f in r["kinds"].items():
            print(f"| {store_name(r['store'])} | {r['agents']:,} | {k} | {f['count']} | "
                  f"{ms(f['p50_s'])} | {ms(f['p99_s'])} | {ms(f['max_s'])} | "
                  f"{ms(f['service_p50_s'])} | {f['exit_2'] if k in EXPECTED_2 else '-'} | "
                  f"{f['errors']} |")
    print()
    print("Where the latency goes: waiting for a slot (queue) and running (service):")
    print()
    print("| store | agents | queue p50 | queue p99 | service p50 | service p99 "
          "| not started at the window's end | load (1 min) before / after |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for r in results:
        q, s = r["queue_delay"], r["service"]
        la = r["load_average_1m"]
        print(f"| {store_name(r['store'])} | {r['agents']:,} | {ms(q['p50_s'])} | "
              f"{ms(q['p99_s'])} | {ms(s['p50_s'])} | {ms(s['p99_s'])} | "
              f"{r['not_started_at_window_end']} | {la[0]:.1f} / {la[1]:.1f} |")
    print()
    print("CPU, from the start of the window until the last operation ended (per operation "
          "run; PostgreSQL's backends only for a server on this host):")
    print()
    print("| store | agents | machine busy | of it, not this benchmark | tasklock processes "
          "| PostgreSQL backends | this harness |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        c = r["cpu"]
        f = lambda x: "-" if x is None else f"{x:.2f} ms"  # noqa: E731
        busy = "-" if c["machine_busy"] is None else f"{100 * c['machine_busy']:.0f} %"
        other = "-" if c.get("other_busy") is None else f"{100 * c['other_busy']:.0f} %"
        print(f"| {store_name(r['store'])} | {r['agents']:,} | {busy} | {other} | "
              f"{f(c['tasklock_ms_per_op'])} | {f(c['backends_ms_per_op'])} | "
              f"{f(c['harness_ms_per_op'])} |")
    pgs = [r for r in results if r.get("pg_activity")]
    if pgs:
        print()
        print("pg_stat_activity, sampled (this fleet's sessions; others apart):")
        print()
        print("| agents | samples | connections mean / max | active mean | waiting for a lock "
              "mean / max (advisory) | samples with a waiter | idle in transaction mean "
              "| other tasklock sessions mean |")
        print("|---:|---:|---|---:|---|---:|---:|---:|")
        for r in pgs:
            p = r["pg_activity"]
            print(f"| {r['agents']:,} | {p['samples']} | {p['connections_mean']:.1f} / "
                  f"{p['connections_max']} | {p['active_mean']:.1f} | "
                  f"{p['lock_waiting_mean']:.1f} / {p['lock_waiting_max']} "
                  f"({p['advisory_waiting_mean']:.1f}) | "
                  f"{100 * p['samples_with_a_lock_waiter']:.0f} % | "
                  f"{p['idle_in_transaction_mean']:.1f} | "
                  f"{p['other_tasklock_sessions_mean']:.1f} |")
    big = [r for r in results if r["store"] == "pg" and r["agents"] >= 1000]
    if big:
        print()
        print("Goal: a 1,000-agent fleet on one PostgreSQL, sustained with 0 errors and p99 "
              "under 250 ms:")
        for r in big:
            p99 = r["latency"]["p99_s"]
            met = r["kept_up"] and r["errors"] == 0 and p99 is not None and p99 < 0.25
            print(f"  {r['agents']:,} agents: {'kept up' if r['kept_up'] else 'did not keep up'}"
                  f", {r['errors']} errors, p99 {ms(p99)}: {'met' if met else 'NOT met'}")


def main():
    a = parse_args()
    # Stopped with SIGTERM (or SIGINT): end cleanly, dropping the schema and files.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    tl = os.path.abspath(a.tasklock) if a.tasklock else build()
    runs = []
    if a.store in ("pg", "both"):
        runs += [("pg", n) for n in a.agents]
    if a.store in ("file", "both"):
        runs += [("file", n) for n in a.file_agents]
    cluster = None
    url = a.pg_url
    pg_version = None
    base_tmp = tempfile.mkdtemp(prefix="tasklock-fleet-", dir=a.tmpdir)
    results = []
    try:
        if any(k == "pg" for k, _ in runs):
            if not url:
                import pg as pgbench  # bench/pg.py's throwaway cluster
                cluster = pgbench.Cluster("on")
                url = cluster.url
            if psql_ok():
                r = psql(url, "SELECT version() || ', fsync=' || current_setting('fsync') "
                         "|| ', max_connections=' || current_setting('max_connections')")
                pg_version = r.stdout.strip().replace("\n", " ") or None
            else:
                print("fleet: no psql on PATH: pg_stat_activity is not sampled and the "
                      "schemas fleet_* are left behind", file=sys.stderr)
        ver = subprocess.run([tl, "--version"], capture_output=True, text=True).stdout.strip()
        print(f"fleet: {ver} ({tl}, {os.path.getsize(tl):,} bytes); {os.cpu_count()} CPUs; "
              f"{pg_version or 'no PostgreSQL'}", flush=True)
        for i, (kind, n) in enumerate(runs):
            results.append(one_run(tl, kind, n, a, base_tmp, url, i))
    finally:
        if cluster:
            cluster.stop()
        if not a.keep:
            shutil.rmtree(base_tmp, ignore_errors=True)
    report(results, a, tl, pg_version)
    if a.json_out:
        def finite(x):  # strict JSON: an operation never run is "not run", not Infinity
            if isinstance(x, dict):
                return {k: finite(v) for k, v in x.items()}
            if isinstance(x, list):
                return [finite(v) for v in x]
            return "not run" if x == INF else x
        with open(a.json_out, "w") as f:
            json.dump(finite({"args": {k: v for k, v in vars(a).items()}, "tasklock": tl,
                       "postgres": pg_version, "cpus": os.cpu_count(),
                       "ops_columns": ["kind", "agent", "due_s", "start_s", "end_s",
                                       "exit", "error"],
                       "runs": results}), f, allow_nan=False)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit("fleet: interrupted (schemas and temporary files removed unless --keep)")
