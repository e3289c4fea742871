#!/usr/bin/env python3
"""Where a PostgreSQL claim's CPU goes: the client, the pooler and the server.

    python3 bench/pg_cpu.py --url URL [--session-url SERVER] [--claims N] [--rounds R] \\
        BIN [OTHER_BIN...]

Each binary in turn (R rounds, alternating) claims N keys of a fresh backlog one after
another, each claim by a new agent (`checkout --next --pid`, as a fleet that spawns an
agent per task does); prints the wall time and the CPU per claim of the `tasklock`
processes (this script's children), of the server's processes (`postgres`) and of
PgBouncer's (`pgbouncer`), from /proc: everything else the machine runs meanwhile counts
in neither. The server and the pooler must run on this machine. Figures:
docs/performance.md ("The PostgreSQL store").
"""

import argparse
import os
import resource
import subprocess
import tempfile
import time


def processes_cpu(prefix):
    """CPU seconds of the processes whose name starts with `prefix`."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                s = f.read()
        except OSError:
            continue
        if s[s.index("(") + 1:s.rindex(")")].startswith(prefix):
            fields = s[s.rindex(")") + 2:].split()
            total += int(fields[11]) + int(fields[12])
    return total / tick


def measure(tl, url, session, n):
    schema = f"bench_cpu_{os.getpid()}_{time.monotonic_ns()}"
    env = dict(os.environ, TASKLOCK_URL=f"{url}?schema={schema}")
    env.pop("TASKLOCK_AGENT", None)
    if session:
        env["TASKLOCK_SESSION_URL"] = session
    d = tempfile.mkdtemp()

    def run(*args):
        subprocess.run([tl, *args, "--dir", d], env=env, capture_output=True, text=True,
                       check=True, stdin=subprocess.DEVNULL)

    run("list", "--agent", "setup")
    with tempfile.NamedTemporaryFile("w", delete=False) as f:
        f.write("\n".join(f"job-{i:06d}" for i in range(n)))
    run("backlog", "add", "--file", f.name, "--agent", "setup")
    me = str(os.getpid())
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    pg0, pb0 = processes_cpu("postgres"), processes_cpu("pgbouncer")
    t0 = time.perf_counter()
    for i in range(n):
        run("checkout", "--next", "--json", "--pid", me, "--agent", f"agent-{i}")
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    pg1, pb1 = processes_cpu("postgres"), processes_cpu("pgbouncer")
    client = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
    subprocess.run(["psql", "-qAt", session or url, "-c", f"DROP SCHEMA {schema} CASCADE"],
                   capture_output=True, stdin=subprocess.DEVNULL)
    os.unlink(f.name)
    ms = lambda s: s / n * 1000  # noqa: E731
    print(f"{tl}: wall {ms(wall):.2f} ms a claim; CPU ms a claim: tasklock "
          f"{ms(client):.2f}, postgres {ms(pg1 - pg0):.2f}, pgbouncer {ms(pb1 - pb0):.2f}",
          flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("bins", nargs="+", help="tasklock binaries with the postgres feature")
    p.add_argument("--url", required=True, help="the store's URL (a pooler's, or the server)")
    p.add_argument("--session-url", help="the server itself, when --url is a pooler")
    p.add_argument("--claims", type=int, default=300, help="claims a round (default 300)")
    p.add_argument("--rounds", type=int, default=2, help="rounds of each binary (default 2)")
    a = p.parse_args()
    for _ in range(a.rounds):
        for tl in a.bins:
            measure(tl, a.url, a.session_url, a.claims)


if __name__ == "__main__":
    main()
