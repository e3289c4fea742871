#!/usr/bin/env python3
"""Benchmark of the tasklock binary against its performance goals.

Run from anywhere, with no arguments:

    python3 bench/bench.py

It builds `target/release/tasklock` (`cargo build --release --locked`), then measures
whole process invocations (spawn to exit, as an agent or script sees them) in a fresh
temporary lock directory:

  1. one `checkout` and one `release` against one `flock -n FILE true` (util-linux),
     goal: each <= 0.8x flock;
  2. `checkout` (and `release`) of a free key with 10,000 other keys held against the
     same with none held, goal: checkout <= 1.1x (O(1) in the number of locks);
  3. `list` with 10,000 checkouts held, goal: median <= 100 ms, <= 0.5x `cat` of the
     same records (one cat process given every record file), and peak RSS <= 12 MiB.
     `list --json` is measured too, for information, and, when this tasklock has
     `heartbeat --pid`, `list` of keys whose holder has a registered process (each
     holder's liveness is then checked). With `--baseline OLD`, OLD's `list` of the same
     directory is measured in the same rounds.

`--only-list` runs benchmark 3 alone (its 10,000 keys are still held first).
`--fresh-fs nojournal|journal` (as root) runs it all on an ext4 made for the run, so that
files an earlier run deleted do not slow down every file this one creates. `--drop-caches`
(as root) empties the page cache first, so tasklock's binary is read back from disk as
flock's and the C library's are, not cached as the build or a copy wrote it.

Commands that are compared are interleaved round by round, in a shuffled order, so that
drift on a noisy machine hits both sides alike. Each checkout takes a free key and each
release releases a held one (they alternate on one key), and every exit code is checked.
Peak memory is GNU time's %M (peak RSS) over a few extra runs of each command. Ratios
are ratios of medians, with a 95% bootstrap interval over the paired rounds.

Needs Linux, Python 3.9+ (standard library only), cargo, util-linux flock and, for peak
memory, GNU time. See docs/performance.md for what the figures mean.
"""

import argparse
import io
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pg  # noqa: E402  (fresh_fs, shared)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AGENT = "bench"
SEED = 20261123


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=300,
                   help="invocations of each command in benchmarks 1 and 2 (default 300)")
    p.add_argument("--held", type=int, default=10_000,
                   help="keys held for benchmarks 2 and 3 (default 10000)")
    p.add_argument("--list-runs", type=int, default=60,
                   help="invocations of list and of list --json (default 60)")
    p.add_argument("--mem-runs", type=int, default=10,
                   help="extra runs of each command under GNU time for peak RSS (default 10)")
    p.add_argument("--warmup", type=int, default=20,
                   help="unrecorded invocations of each command first (default 20)")
    p.add_argument("--rev", help="build this git revision (exported to a temp dir) instead of "
                   "the working tree, e.g. HEAD or a tag")
    p.add_argument("--tasklock", help="binary to measure, skipping the build")
    p.add_argument("--baseline", help="another tasklock binary whose `list` is measured beside "
                   "this one's in benchmark 3 (e.g. the previous build)")
    p.add_argument("--only-list", action="store_true", help="run benchmark 3 alone")
    p.add_argument("--flock", default=shutil.which("flock") or "/usr/bin/flock",
                   help="util-linux flock binary (default: from PATH)")
    p.add_argument("--tmpdir", help="where to create the lock directories (default: system temp "
                   "dir); the file system matters, use one like your repository's")
    p.add_argument("--fresh-fs", choices=["off", "nojournal", "journal"], default="off",
                   help="measure on an ext4 made for the run (a loop device; needs root and "
                   "mkfs.ext4), without or with a journal: files deleted on the disk before "
                   "(by an earlier run) make every file created slower on ext4 without a "
                   "journal (docs/performance.md, \"The file system under a drain\")")
    p.add_argument("--drop-caches", action="store_true",
                   help="empty the page cache first (root), so that every binary, tasklock's "
                   "as well as flock, true and the C library, is read back from disk by the "
                   "exec that first runs it, as after a reboot: a binary just built or "
                   "copied sits in the cache as it was written, which starts a tasklock "
                   "command in about 15%% less time (docs/performance.md)")
    p.add_argument("--cpu", type=int, metavar="N",
                   help="pin the benchmark and every process it starts to CPU N (default: no "
                   "pinning, as agents run it); flock then pays no cross-CPU wake-up for its child")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    p.add_argument("--json-out", metavar="FILE", help="also write every sample to FILE as JSON")
    p.add_argument("--check", action="store_true", help="exit 1 when a goal is missed")
    return p.parse_args()


# --- running one process ------------------------------------------------------------------

DEVNULL = os.open(os.devnull, os.O_RDWR)
# A minimal, fixed environment: no TASKLOCK_* or CLAUDE_* variable leaks in.
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C"}
FILE_ACTIONS = [(os.POSIX_SPAWN_DUP2, DEVNULL, fd) for fd in (0, 1, 2)]


def run(argv):
    """Spawn argv with stdio on /dev/null; return (wall seconds, exit code)."""
    t0 = time.perf_counter_ns()
    pid = os.posix_spawn(argv[0], argv, ENV, file_actions=FILE_ACTIONS)
    _, status = os.waitpid(pid, 0)
    t1 = time.perf_counter_ns()
    return (t1 - t0) / 1e9, os.waitstatus_to_exitcode(status)


def gnu_time():
    """GNU time, if installed. Peak RSS is measured through it rather than from our own
    wait4(): posix_spawn shares this Python process's memory until exec, and the kernel
    counts that in the child's ru_maxrss; GNU time is a small process that forks."""
    for t in ("/usr/bin/time", shutil.which("gtime")):
        if t and subprocess.run([t, "-f", "%M", "true"], capture_output=True).returncode == 0:
            return t
    return None


TIME = None
MEM_OUT = None


class Series:
    def __init__(self, name, argv, expect=0):
        self.name, self.argv, self.expect = name, argv, expect
        self.times, self.rss = [], []

    def fail(self, rc):
        out = subprocess.run(self.argv, capture_output=True, text=True, env=ENV)
        sys.exit(f"bench: `{' '.join(self.argv)}` exited {rc}, expected {self.expect}\n"
                 f"{out.stdout}{out.stderr}")

    def once(self, record=True):
        t, rc = run(self.argv)
        if rc != self.expect:
            self.fail(rc)
        if record:
            self.times.append(t)

    def mem_once(self):
        """One run under GNU time, recording the peak RSS in KiB (time's %M)."""
        if not TIME:
            return
        rc = subprocess.run([TIME, "-f", "%M", "-o", MEM_OUT, *self.argv], env=ENV,
                            stdin=DEVNULL, stdout=DEVNULL, stderr=DEVNULL).returncode
        if rc != self.expect:
            self.fail(rc)
        with open(MEM_OUT) as f:
            self.rss.append(int(f.read().split()[-1]))

    def peak_mib(self):
        return max(self.rss) / 1024 if self.rss else None


def pct(xs, q):
    """Nearest-rank percentile."""
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(-(-q * len(s) // 100)) - 1))
    return s[k]


def ratio_ci(a, b, rng, resamples=2000):
    """95% bootstrap interval of median(a)/median(b), resampling paired rounds."""
    n = len(a)
    rs = []
    for _ in range(resamples):
        idx = [rng.randrange(n) for _ in range(n)]
        rs.append(statistics.median(a[i] for i in idx) / statistics.median(b[i] for i in idx))
    rs.sort()
    return rs[int(0.025 * resamples)], rs[int(0.975 * resamples) - 1]


# --- setup --------------------------------------------------------------------------------

def release_build():
    """How install.sh and scripts/dist.sh build on this host: on glibc Linux a static non-PIE
    executable (`--target <host>` keeps the flags off build scripts and proc macros).
    Returns (environment, cargo arguments, the directory under the target directory that
    the binary lands in)."""
    host = subprocess.run(["rustc", "-vV"], capture_output=True, text=True).stdout
    host = next((l.split(": ", 1)[1] for l in host.splitlines() if l.startswith("host: ")), "")
    env, extra, release = dict(os.environ), [], "release"
    if host.endswith("-linux-gnu"):
        var = "CARGO_TARGET_" + host.upper().replace("-", "_").replace(".", "_") + "_RUSTFLAGS"
        env[var] = "-C target-feature=+crt-static -C relocation-model=static"
        extra, release = ["--target", host], os.path.join(host, "release")
    return env, extra, release


def build(rev):
    """Build the working tree, or a git revision exported with `git archive`."""
    src, target = REPO, os.path.join(REPO, "target")
    tmp = None
    if rev:
        tmp = tempfile.mkdtemp(prefix="tasklock-bench-src-")
        tar = subprocess.run(["git", "archive", "--format=tar", rev], cwd=REPO,
                             capture_output=True)
        if tar.returncode != 0:
            sys.exit(f"bench: git archive {rev} failed: {tar.stderr.decode().strip()}")
        with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as t:
            try:
                t.extractall(tmp, filter="data")
            except TypeError:  # Python without extraction filters
                t.extractall(tmp)
        src, target = tmp, os.path.join(REPO, "target", "bench-rev")
    print(f"bench: cargo build --release --locked ({rev or 'working tree'})", file=sys.stderr,
          flush=True)
    # Built as install.sh builds it (release_build).
    env, extra, release = release_build()
    rc = subprocess.run(["cargo", "build", "--release", "--locked", "--quiet",
                         "--target-dir", target] + extra, cwd=src, env=env).returncode
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    if rc != 0:
        sys.exit("bench: the build failed (see above); fix it, or pass --rev HEAD to measure "
                 "the last commit")
    return os.path.join(target, release, "tasklock")


def fill(tl, lock_dir, n, agent=AGENT):
    """Hold n keys (key-1 .. key-n) through the binary itself, nproc processes at a time."""
    t0 = time.perf_counter()
    jobs = max(1, min(4, os.cpu_count() or 1))
    running = {}
    for i in range(1, n + 1):
        while len(running) >= jobs:
            pid, status = os.waitpid(-1, 0)
            key = running.pop(pid)
            if os.waitstatus_to_exitcode(status) != 0:
                sys.exit(f"bench: setup checkout of {key} failed")
        argv = [tl, "checkout", f"key-{i}", "--dir", lock_dir, "--agent", agent]
        running[os.posix_spawn(tl, argv, ENV, file_actions=FILE_ACTIONS)] = f"key-{i}"
    while running:
        pid, status = os.waitpid(-1, 0)
        key = running.pop(pid)
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"bench: setup checkout of {key} failed")
    held = len(os.listdir(os.path.join(lock_dir, "keys")))
    if held != n:
        sys.exit(f"bench: expected {n} records after setup, found {held}")
    return time.perf_counter() - t0


def filesystem(path, sh):
    """File system type and options of path; notes an ext4 without a journal, where the
    kernel skips inodes freed in the last minutes when creating files, so a checkout
    (which creates one) slows down after many checkout/release cycles in a short time."""
    out = sh("findmnt", "-n", "-o", "SOURCE,FSTYPE,OPTIONS", "--target", path).split()
    if len(out) < 3:
        return sh("stat", "-f", "-c", "%T", path)
    source, fstype, options = out[:3]
    text = f"{fstype} ({options})"
    if fstype == "ext4" and os.path.isdir("/proc/fs/jbd2"):
        dev = os.path.basename(source)
        if not any(j.startswith(dev + "-") for j in os.listdir("/proc/fs/jbd2")):
            text += ", no journal: checkout slows down after many cycles within minutes"
    return text


def machine(tl, prebuilt, flock, tmp, rev):
    def sh(*cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO).stdout.strip()
        except OSError:
            return ""
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    except OSError:
        pass
    commit = sh("git", "rev-parse", "--short", rev or "HEAD")
    if commit and not rev and sh("git", "status", "--porcelain", "--untracked-files=no"):
        commit += " plus uncommitted changes"
    return {
        "nproc": os.cpu_count(),
        "load average at start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "cpu": cpu,
        "kernel": platform.release(),
        "filesystem": filesystem(tmp, sh),
        "tasklock": (f"{tl} (given with --tasklock)" if prebuilt else
                     f"{os.path.relpath(tl, REPO)} built from {commit or 'an unknown commit'}"),
        "flock": sh(flock, "--version"),
        "python": platform.python_version(),
        "pinned to CPU": ",".join(map(str, sorted(os.sched_getaffinity(0))))
        if len(os.sched_getaffinity(0)) < (os.cpu_count() or 1) else "",
    }


# --- benchmarks ---------------------------------------------------------------------------

def tl_argv(tl, d, *args, agent=AGENT):
    return [tl, *args, "--dir", d, "--agent", agent]


def bench_vs_flock(tl, flock, tmp, a, rng):
    d = os.path.join(tmp, "pair")
    target = os.path.join(tmp, "flock-target")
    open(target, "w").close()
    fl = Series("flock -n FILE true", [flock, "-n", target, "true"])
    co = Series("checkout (free key)", tl_argv(tl, d, "checkout", "task-1"))
    re_ = Series("release (held key)", tl_argv(tl, d, "release", "task-1"))
    floor = Series("spawn of /bin/true (harness floor)", ["/bin/true"])
    for _ in range(a.warmup):
        fl.once(False), co.once(False), re_.once(False), floor.once(False)
    for _ in range(a.runs):
        # checkout must precede release; flock and the floor go anywhere around them.
        order = [co, re_]
        for extra in (fl, floor):
            order.insert(rng.randrange(len(order) + 1), extra)
        for s in order:
            s.once()
    for _ in range(a.mem_runs):
        for s in (fl, co, re_, floor):
            s.mem_once()
    return d, fl, co, re_, floor


def bench_scale(tl, tmp, a, rng):
    empty = os.path.join(tmp, "none-held")
    full = os.path.join(tmp, "held")
    print(f"bench: holding {a.held} keys ...", file=sys.stderr, flush=True)
    setup = fill(tl, full, a.held)
    print(f"bench: done in {setup:.1f} s", file=sys.stderr, flush=True)
    c0 = Series("checkout, 0 other keys held", tl_argv(tl, empty, "checkout", "task-1"))
    cn = Series(f"checkout, {a.held:,} other keys held", tl_argv(tl, full, "checkout", "task-1"))
    r0 = Series("release, 0 other keys held", tl_argv(tl, empty, "release", "task-1"))
    rn = Series(f"release, {a.held:,} other keys held", tl_argv(tl, full, "release", "task-1"))
    for _ in range(a.warmup):
        c0.once(False), cn.once(False), r0.once(False), rn.once(False)
    for _ in range(a.runs):
        pairs = [(c0, cn), (r0, rn)]
        for p in pairs:
            for s in rng.sample(p, 2):
                s.once()
    for _ in range(a.mem_runs):
        for s in (c0, cn, r0, rn):
            s.mem_once()
    return full, setup, c0, cn, r0, rn


def held_by_live_agent(tl, tmp, a):
    """A lock directory whose keys are held by an agent with a registered, running process
    (as `heartbeat --pid`, the agent hooks and `run` set up), so that `list` judges each
    holder's liveness. None when this tasklock has no `heartbeat --pid`."""
    probe = subprocess.run([tl, "heartbeat", "--help"], capture_output=True, text=True, env=ENV)
    if probe.returncode != 0 or "--pid" not in probe.stdout:
        return None
    d = os.path.join(tmp, "held-live")
    # This benchmark's own process stands in for the agent's long-lived process.
    subprocess.run(tl_argv(tl, d, "heartbeat", "--pid", str(os.getpid()), agent="bench-live"),
                   stdin=DEVNULL, stdout=DEVNULL, env=ENV, check=True)
    print(f"bench: holding {a.held} keys as an agent with a registered process ...",
          file=sys.stderr, flush=True)
    fill(tl, d, a.held, agent="bench-live")
    with open(os.path.join(d, "keys", "key-1")) as f:
        if json.load(f).get("agent", {}).get("pid") != os.getpid():
            return None
    return d


def bench_list(tl, tmp, full, a, rng):
    live = held_by_live_agent(tl, tmp, a)
    # Sanity: the listings really hold every key.
    json_bytes = 0
    for d in filter(None, (full, live)):
        out = subprocess.run(tl_argv(tl, d, "list", "--json"), capture_output=True, env=ENV,
                             check=True).stdout
        n = len(json.loads(out)["checkouts"])
        if n != a.held:
            sys.exit(f"bench: list in {d} shows {n} checkouts, expected {a.held}")
        json_bytes = json_bytes or len(out)
    md = Series(f"list, {a.held:,} held", tl_argv(tl, full, "list"))
    js = Series(f"list --json, {a.held:,} held", tl_argv(tl, full, "list", "--json"))
    keys = os.path.join(full, "keys")
    cat = Series(f"cat of the {a.held:,} records",
                 [shutil.which("cat") or "/bin/cat"]
                 + sorted(os.path.join(keys, k) for k in os.listdir(keys)))
    series = [md, js, cat]
    base = None
    if a.baseline:
        base = Series(f"list, {a.held:,} held (baseline)",
                      tl_argv(os.path.abspath(a.baseline), full, "list"))
        series.append(base)
    lv = None
    if live:
        lv = Series(f"list, {a.held:,} held by an agent with a registered process",
                    tl_argv(tl, live, "list"))
        series.append(lv)
    for _ in range(min(a.warmup, 5)):
        for s in series:
            s.once(False)
    for _ in range(a.list_runs):
        for s in rng.sample(series, len(series)):
            s.once()
    for _ in range(a.mem_runs):
        for s in series:
            s.mem_once()
    return md, js, lv, json_bytes, cat, base


# --- report -------------------------------------------------------------------------------

def ms(x):
    return f"{x * 1e3:.2f} ms" if x < 0.1 else f"{x * 1e3:.1f} ms"


def main():
    global TIME, MEM_OUT
    a = parse_args()
    rng = random.Random(SEED)
    if a.cpu is not None:
        os.sched_setaffinity(0, {a.cpu})
    tl = os.path.abspath(a.tasklock) if a.tasklock else build(a.rev)
    if not os.access(a.flock, os.X_OK):
        sys.exit(f"bench: flock not found at {a.flock} (util-linux); pass --flock PATH")
    TIME = gnu_time()
    if not TIME:
        print("bench: GNU time not found, peak memory is not measured "
              "(Debian/Ubuntu: apt-get install -y time)", file=sys.stderr)
    if a.fresh_fs != "off" and (os.geteuid() != 0 or not shutil.which("mkfs.ext4")):
        sys.exit("bench: --fresh-fs mounts a file system of its own: run it as root, "
                 "with mkfs.ext4 (e2fsprogs) installed")
    if a.drop_caches:
        if os.geteuid() != 0:
            sys.exit("bench: --drop-caches writes /proc/sys/vm/drop_caches: run it as root")
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    base = tempfile.mkdtemp(prefix="tasklock-bench-", dir=a.tmpdir)
    fs = pg.fresh_fs(base, "file", a.fresh_fs)
    tmp = fs.__enter__()
    MEM_OUT = os.path.join(tmp, "time.out")
    t_start = time.perf_counter()
    try:
        info = machine(tl, bool(a.tasklock), a.flock, tmp, a.rev)
        info["file system"] = ("as it is" if a.fresh_fs == "off"
                               else f"a new ext4 ({a.fresh_fs})")
        info["page cache"] = ("emptied before the run: every binary read back by exec"
                              if a.drop_caches else
                              "as found (a binary just built or copied starts faster)")
        if a.only_list:
            full = os.path.join(tmp, "held")
            setup = fill(tl, full, a.held)
            early = []
        else:
            print("bench: 1/3 checkout and release vs flock", file=sys.stderr, flush=True)
            _, fl, co, re_, floor = bench_vs_flock(tl, a.flock, tmp, a, rng)
            print("bench: 2/3 checkout with many keys held", file=sys.stderr, flush=True)
            full, setup, c0, cn, r0, rn = bench_scale(tl, tmp, a, rng)
            early = [fl, co, re_, floor, c0, cn, r0, rn]
        print("bench: 3/3 list", file=sys.stderr, flush=True)
        md, js, lv, json_bytes, cat, base = bench_list(tl, tmp, full, a, rng)
    finally:
        if a.keep and a.fresh_fs == "off":
            print(f"bench: kept {tmp}", file=sys.stderr)
        else:
            fs.__exit__(None, None, None)
            shutil.rmtree(base, ignore_errors=True)
    elapsed = time.perf_counter() - t_start
    info["load average at end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    if os.getloadavg()[0] > 0.5 * (os.cpu_count() or 1):
        print("bench: warning: the machine was busy with other work (load average above half "
              "the CPUs); expect noisy figures", file=sys.stderr)
    series = early + [md, js, cat] + [s for s in (base, lv) if s]

    def mib(x):
        return "n/a" if x is None else f"{x:.1f} MiB"

    lines = ["## tasklock benchmark", ""]
    lines += [f"- {k}: {v}" for k, v in info.items() if v]
    lines += [f"- runs: {a.runs} timed per command in benchmarks 1-2, {a.list_runs} per list "
              f"command, {a.mem_runs if TIME else 0} more per command under GNU time for peak "
              f"RSS; holding {a.held:,} keys took {setup:.1f} s; whole run {elapsed:.0f} s", ""]

    lines += ["| command | timed runs | median | p90 | peak RSS |", "|---|---:|---:|---:|---:|"]
    for s in series:
        lines.append(f"| {s.name} | {len(s.times)} | {ms(statistics.median(s.times))} | "
                     f"{ms(pct(s.times, 90))} | {mib(s.peak_mib())} |")
    lines.append("")

    goals = []

    def ratio_goal(what, x, y, limit):
        r = statistics.median(x.times) / statistics.median(y.times)
        lo, hi = ratio_ci(x.times, y.times, rng)
        p90r = pct(x.times, 90) / pct(y.times, 90)
        met = r <= limit if limit else None
        goals.append((what, f"{r:.3f}x (95% CI {lo:.3f}-{hi:.3f}; p90 ratio {p90r:.3f}x)",
                      f"<= {limit}x" if limit else "no goal", met))

    if early:
        ratio_goal("checkout / flock", co, fl, 0.8)
        ratio_goal("release / flock", re_, fl, 0.8)
        ratio_goal(f"checkout, {a.held:,} held / none held", cn, c0, 1.1)
        ratio_goal(f"release, {a.held:,} held / none held", rn, r0, None)
    m = statistics.median(md.times)
    goals.append((f"list median, {a.held:,} held", ms(m), "<= 100 ms", m <= 0.1))
    ratio_goal(f"list / cat of the records, {a.held:,} held", md, cat, 0.5)
    if base:
        ratio_goal(f"list / the baseline's list, {a.held:,} held", md, base, None)
        goals.append(("the baseline's list peak RSS", mib(base.peak_mib()), "no goal", None))
    peak = md.peak_mib()
    goals.append((f"list peak RSS, {a.held:,} held", mib(peak), "<= 12 MiB",
                  None if peak is None else peak <= 12))
    if lv:
        m = statistics.median(lv.times)
        goals.append((f"list median, {a.held:,} held by an agent with a registered process",
                      ms(m), "<= 100 ms", m <= 0.1))
        peak = lv.peak_mib()
        goals.append((f"list peak RSS, {a.held:,} held by an agent with a registered process",
                      mib(peak), "<= 12 MiB", None if peak is None else peak <= 12))
    mj = statistics.median(js.times)
    size = (f"{json_bytes / 1e6:.1f} MB" if json_bytes >= 1e6 else f"{json_bytes / 1e3:.0f} kB")
    goals.append((f"list --json median ({size} of output)", ms(mj),
                  "no goal", None))
    goals.append(("list --json peak RSS", mib(js.peak_mib()), "no goal", None))

    lines += ["| goal | measured | target | met |", "|---|---|---|---|"]
    for what, got, target, met in goals:
        verdict = "n/a" if met is None else ("yes" if met else "**no**")
        if met is None and target != "no goal":
            verdict = "not measured"
        lines.append(f"| {what} | {got} | {target} | {verdict} |")
    print("\n".join(lines))

    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"machine": info, "setup_seconds": setup,
                       "series": {s.name: {"argv": s.argv, "seconds": s.times,
                                           "maxrss_kib": s.rss} for s in series}},
                      f, indent=1)
    missed = [g for g in goals if g[3] is False]
    return 1 if a.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
