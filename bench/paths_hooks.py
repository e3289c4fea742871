#!/usr/bin/env python3
"""Hook latency with many path checkouts held: the edit hook, `tasklock hook
pre-tool-use` for an Edit, as Claude Code runs it (through `sh -c`, with the hook's JSON on
stdin), and the pre-commit guard, `tasklock guard-commit`, as git runs it (through
`sh -c`), in a git repository where other agents hold N path checkouts (default 1,000:
`pkg0/**` … `pkgN-1/**`) and the session holds `mine/**`. Timed, interleaved with
`sh -c true` as the floor:

- Edit, uncovered: `free/x.rs`, no checkout covers it (allowed, no output)
- Edit, covered by another agent: `pkg500/x.rs` (denied with the reason)
- Edit, own: `mine/x.rs` (allowed, an edit stamp appended)
- `git diff --cached`, what the guard asks git (its share of the guard's time)
- guard-commit, 5 staged files (own and unclaimed, stamped ones among them): passes
- guard-commit, the same plus `pkg500/x.rs`: refused (exit 2)

Usage: python3 bench/paths_hooks.py [--tasklock PATH] [--runs N] [--held N]
Builds the binary as install.sh does unless --tasklock is given. Medians and ratios to
the floor; compare within one run.
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
SESSION = "bench-session"


def timed(cmd, stdin, env, expect, code=0):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, input=stdin, env=env, capture_output=True)
    t1 = time.perf_counter()
    if p.returncode != code or p.stderr:
        sys.exit(f"paths_hooks: {cmd} failed: {p.stderr.decode()}")
    if expect is not None and expect(p.stdout) is False:
        sys.exit(f"paths_hooks: unexpected output of {cmd}: {p.stdout.decode()!r}")
    return (t1 - t0) * 1000


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasklock", help="binary to measure (default: build it as install.sh does)")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--held", type=int, default=1000)
    a = ap.parse_args()
    binary = os.path.abspath(a.tasklock) if a.tasklock else build()
    with tempfile.TemporaryDirectory(prefix="tasklock-paths-hooks-") as d:
        repo = os.path.join(d, "repo")
        os.makedirs(repo)
        subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
        lock = os.path.join(repo, ".locks")
        t0 = time.perf_counter()
        for i in range(a.held):
            subprocess.run([binary, "checkout", "--path", f"pkg{i}/**", "--dir", lock, "--agent", f"a{i % 7}",
                            "--timeout", "8h"], env=ENV, cwd=repo, stdout=subprocess.DEVNULL, check=True)
        subprocess.run([binary, "checkout", "--path", "mine/**", "--dir", lock, "--agent", SESSION,
                        "--timeout", "8h"], env=ENV, cwd=repo, stdout=subprocess.DEVNULL, check=True)
        setup = time.perf_counter() - t0
        env = dict(ENV)

        def payload(rel):
            return json.dumps({
                "session_id": SESSION, "cwd": repo, "hook_event_name": "PreToolUse",
                "tool_name": "Edit",
                "tool_input": {"file_path": os.path.join(repo, rel), "old_string": "a", "new_string": "b"},
            }).encode()

        def denied(out):
            return json.loads(out)["hookSpecificOutput"]["permissionDecision"] == "deny"

        # Two staged sets for the guard, each in an index file of its own.
        staged = ["free/x.rs", "free/y.rs", "mine/x.rs", "mine/y.rs", "mine/z.rs"]
        for rel in staged + [f"pkg{a.held // 2}/x.rs"]:
            os.makedirs(os.path.join(repo, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(repo, rel), "w") as f:
                f.write("x\n")
        index_ok = dict(env, GIT_INDEX_FILE=os.path.join(d, "index-ok"), TASKLOCK_AGENT=SESSION)
        index_held = dict(env, GIT_INDEX_FILE=os.path.join(d, "index-held"), TASKLOCK_AGENT=SESSION)
        subprocess.run(["git", "add", *staged], cwd=repo, env=index_ok, check=True)
        subprocess.run(["git", "add", *staged, f"pkg{a.held // 2}/x.rs"], cwd=repo, env=index_held, check=True)
        guard = ["sh", "-c", f"cd {repo} && {binary} guard-commit >/dev/null"]

        rows = [
            ("sh -c true (floor)", ["sh", "-c", "true"], b"", None),
            ("Edit, uncovered file", ["sh", "-c", f"{binary} hook pre-tool-use"], payload("free/x.rs"),
             lambda out: out == b""),
            (f"Edit, covered by another agent (denied)", ["sh", "-c", f"{binary} hook pre-tool-use"],
             payload(f"pkg{a.held // 2}/x.rs"), denied),
            ("Edit, own checkout (stamped)", ["sh", "-c", f"{binary} hook pre-tool-use"], payload("mine/x.rs"),
             lambda out: out == b""),
            ("git diff --cached (the guard's question to git)",
             ["sh", "-c", f"cd {repo} && git diff --cached --name-only -z --no-renames >/dev/null"],
             b"", None, 0, index_ok),
            ("guard-commit, 5 staged files (passes)", guard, b"", None, 0, index_ok),
            ("guard-commit, 6 staged, 1 held (refused)", guard, b"", None, 2, index_held),
        ]
        rows = [r if len(r) == 6 else (*r, 0, env) for r in rows]
        samples = {r[0]: [] for r in rows}
        for _ in range(3):
            for name, cmd, data, expect, code, renv in rows:
                timed(cmd, data, renv, expect, code)
        for _ in range(a.runs):
            for name, cmd, data, expect, code, renv in rows:
                samples[name].append(timed(cmd, data, renv, expect, code))
        stamps = os.path.join(repo, ".git", "tasklock", "stamps")
        stamped = sum(len(open(os.path.join(stamps, f)).readlines()) for f in os.listdir(stamps))
    floor = statistics.median(samples[rows[0][0]])
    print(f"edit hook and commit guard latency, {a.runs} runs each, interleaved; {a.held} path checkouts held by "
          f"other agents (set up in {setup:.1f} s); {stamped} stamps written (ms, wall time)\n")
    print("| command | median | p90 | max | median / floor |")
    print("|---|---:|---:|---:|---:|")
    for name, xs in samples.items():
        xs.sort()
        m = statistics.median(xs)
        print(f"| {name} | {m:.2f} | {xs[int(len(xs) * 0.9)]:.2f} | {xs[-1]:.2f} | {m / floor:.1f}x |")


if __name__ == "__main__":
    main()
