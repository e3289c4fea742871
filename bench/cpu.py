#!/usr/bin/env python3
"""CPU time of one `checkout` and one `release`, build against build.

    python3 bench/cpu.py OLD NEW [MORE...] [--rounds 300] [--url postgres://...]

Each round runs `checkout k` then `release k` with every build, in a shuffled order, and
takes each process's CPU time (user + system, from `wait4`) and wall time. Prints the
medians per build and each build's CPU against the first one's. CPU time, unlike wall
time, does not count the time a process waits for the server or for a CPU, so it shows a
change in what a command itself costs on a busy machine. With `--url`, the commands run
against PostgreSQL (a fresh schema per build, as a newer build may migrate it where an
older one would refuse it; dropped at the end); `--session-url` as
TASKLOCK_SESSION_URL. Standard library only.
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


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("builds", nargs="+", help="tasklock binaries; the first is the reference")
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--url", help="PostgreSQL URL (the lock directory when not given)")
    p.add_argument("--session-url", help="TASKLOCK_SESSION_URL, with --url behind a pooler")
    a = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="tasklock-cpu-")
    envs, schemas = {}, []
    for i, b in enumerate(a.builds):
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C"}
        if a.url:
            schemas.append(f"cpu_{os.getpid()}_{i}")
            env["TASKLOCK_URL"] = f"{a.url}?schema={schemas[-1]}"
            if a.session_url:
                env["TASKLOCK_SESSION_URL"] = a.session_url
        envs[b] = (env, os.path.join(tmp, str(i), ".locks"))
    null = [(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)]

    def run(tl, cmd):
        env, d = envs[tl]
        argv = [tl, cmd, "k", "--dir", d, "--agent", "bench"]
        t = time.perf_counter()
        pid = os.posix_spawn(tl, argv, env, file_actions=null)
        _, status, ru = os.wait4(pid, 0)
        wall = time.perf_counter() - t
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"cpu: {' '.join(argv)} failed")
        return (ru.ru_utime + ru.ru_stime) * 1e3, wall * 1e3

    cpu = {b: [] for b in a.builds}
    wall = {b: [] for b in a.builds}
    try:
        for b in a.builds:
            for _ in range(a.warmup):
                run(b, "checkout"), run(b, "release")
        for _ in range(a.rounds):
            for b in random.sample(a.builds, len(a.builds)):
                c1, w1 = run(b, "checkout")
                c2, w2 = run(b, "release")
                cpu[b].append(c1 + c2)
                wall[b].append(w1 + w2)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if schemas and shutil.which("psql"):
            drop = "".join(f"DROP SCHEMA IF EXISTS {s} CASCADE;" for s in schemas)
            subprocess.run(["psql", "-qAt", a.session_url or a.url, "-c", drop],
                           capture_output=True, stdin=subprocess.DEVNULL)
    ref = statistics.median(cpu[a.builds[0]])
    store = "PostgreSQL" if a.url else "the lock directory"
    print(f"checkout + release on {store}, {a.rounds} rounds, medians:")
    for b in a.builds:
        c = statistics.median(cpu[b])
        print(f"  {b}: CPU {c:.3f} ms, wall {statistics.median(wall[b]):.3f} ms, "
              f"CPU {c / ref:.3f}x the first")


if __name__ == "__main__":
    main()
