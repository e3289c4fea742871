#!/usr/bin/env python3
"""Tool calls of one `tasklock mcp` server on PostgreSQL: what keeping its connection saves.

Run from anywhere:

    python3 bench/mcp_pg.py --url postgres://USER@HOST:PORT/DB [--calls 200] [--rounds 4]
        [--tasklock BIN] [--baseline OLD]

Each build (`--tasklock`, and `--baseline` when given: a build that connects for every
call; each a `tasklock` with its `tasklock-mcp` beside it) serves MCP over stdin/stdout to this script, as a client such as Claude Code would,
in a schema of its own. After `initialize`, the script makes `--calls` tool calls, a
`checkout` of a key and its `release` in turn, each timed from the request written to its
answer read. The reference, in the same rounds: the same calls as commands, one
`tasklock` process each (`tasklock checkout k`, `tasklock release k`), each connecting.
They take turns, `--rounds` times, so that the machine's load falls on all alike; the
report is the median and p90 of each one's calls and the ratio of the medians to the
reference's, per round and overall.

Needs `psql` only to drop the schemas afterwards.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def serve(binary, url, schema, workdir):
    env = dict(os.environ)
    env.pop("TASKLOCK_SESSION_URL", None)
    sep = "&" if "?" in url else "?"
    env["TASKLOCK_URL"] = f"{url}{sep}schema={schema}"
    return subprocess.Popen(
        [binary, "--dir", os.path.join(workdir, ".locks"), "--agent", "bench-mcp", "mcp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        text=True,
        bufsize=1,
    )


class Client:
    def __init__(self, proc):
        self.proc = proc
        self.id = 0

    def request(self, method, params):
        self.id += 1
        self.proc.stdin.write(
            json.dumps({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params})
            + "\n"
        )
        self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise SystemExit("the server ended")
            msg = json.loads(line)
            if msg.get("id") == self.id:
                return msg


def run(binary, url, schema, calls, workdir):
    proc = serve(binary, url, schema, workdir)
    c = Client(proc)
    c.request(
        "initialize",
        {"protocolVersion": "2025-06-18", "capabilities": {},
         "clientInfo": {"name": "bench", "version": "1"}},
    )
    times = []
    for i in range(calls):
        tool, args = ("checkout", {"key": "k"}) if i % 2 == 0 else ("release", {"keys": ["k"]})
        t0 = time.perf_counter()
        r = c.request("tools/call", {"name": tool, "arguments": args})
        times.append((time.perf_counter() - t0) * 1000)
        if r.get("result", {}).get("isError"):
            raise SystemExit(f"{binary}: {tool} failed: {r}")
    proc.stdin.close()
    proc.wait(timeout=30)
    return times


def run_cli(binary, url, schema, calls, workdir):
    env = dict(os.environ)
    env.pop("TASKLOCK_SESSION_URL", None)
    sep = "&" if "?" in url else "?"
    env["TASKLOCK_URL"] = f"{url}{sep}schema={schema}"
    base = [binary, "--dir", os.path.join(workdir, ".locks"), "--agent", "bench-cli"]
    times = []
    for i in range(calls):
        args = ["checkout", "k"] if i % 2 == 0 else ["release", "k"]
        t0 = time.perf_counter()
        r = subprocess.run(base + args, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False)
        times.append((time.perf_counter() - t0) * 1000)
        if r.returncode != 0:
            raise SystemExit(f"{binary} {' '.join(args)}: exit {r.returncode}")
    return times


def fmt(ts):
    q = statistics.quantiles(ts, n=10)
    return f"median {statistics.median(ts):.2f} ms, p90 {q[8]:.2f} ms"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True, help="the store (server or pooler), no schema")
    ap.add_argument("--tasklock", default="target/release/tasklock")
    ap.add_argument("--baseline", help="another build's MCP server, in the same rounds")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=4)
    a = ap.parse_args()
    builds = [("commands", a.tasklock, run_cli), ("mcp", a.tasklock, run)]
    if a.baseline:
        builds.append(("mcp, baseline", a.baseline, run))
    all_times = {name: [] for name, _, _ in builds}
    schemas = []
    with tempfile.TemporaryDirectory() as workdir:
        os.makedirs(os.path.join(workdir, ".locks"))
        for rnd in range(a.rounds):
            medians = {}
            for name, binary, how in builds:
                schema = f"bench_mcp_{os.getpid()}_{len(schemas)}"
                schemas.append(schema)
                ts = how(binary, a.url, schema, a.calls, workdir)
                all_times[name] += ts
                medians[name] = statistics.median(ts)
                ratio = medians[name] / medians["commands"]
                print(f"round {rnd + 1}: {name}: {fmt(ts)}, {ratio:.2f}x the commands")
    for name, _, _ in builds:
        ts = all_times[name]
        ratio = statistics.median(ts) / statistics.median(all_times["commands"])
        print(f"all: {name}: {fmt(ts)} ({len(ts)} calls), {ratio:.2f}x the commands")
    drop = "; ".join(f"DROP SCHEMA IF EXISTS {s} CASCADE" for s in schemas)
    subprocess.run(["psql", a.url, "-qc", drop], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)


if __name__ == "__main__":
    sys.exit(main())
