#!/usr/bin/env python3
"""Push wake: how soon an idle Claude Code session hears that a key it queued for is
free, and what pushing costs the agent that releases it (docs/wake.md).

    python3 bench/wake.py [--tasklock PATH] [--claude PATH] [--rounds N] [--json-out FILE]
                          [--store postgres://…] [--monitor]

Setup: a throwaway git project where `tasklock init` has wired the Claude Code hooks,
and one interactive Claude Code session in it, run under tmux (a tmux server of its own)
against a loopback model stub served by this script. The session's PATH has the measured
tasklock first, since the hooks call `tasklock` by name. One typed prompt makes its hooks
register the session as an agent (its id is the session id) with its messaging socket;
the stub answers every request with a plain `end_turn` text, so each turn is one request.

Per round, in a shuffled order within the round:
  push   agent `holder` checks out `kI`; the session's agent queues for it from outside
         (`checkout kI --queue --agent SESSION`); with the session idle, `holder` runs
         `release kI`. Timed: the release's wall time, and from its start to the stub
         seeing the session's next request that carries tasklock's notification for `kI`.
  plain  the same with `nI` and a waiter that has no session (`--agent plain-waiter`),
         so nothing is pushed: the release's wall time only.
The waiter then leaves the queue (`leave`), so no reservation lapses during the run.
Last, the claude process is stopped (SIGSTOP: its socket still accepts, nobody reads) for
a few `release` runs, then continued; the pushes it was sent should then reach the model.

With --monitor the session has the Claude Code plugin (plugins/claude, `--plugin-dir`)
instead of `tasklock init`'s hooks: its monitor runs `tasklock inbox --follow` beside the
messaging socket. Per round, in a shuffled order:
  near   as `push` above: the socket and the monitor race; which one told the session is
         read off the request (a monitor's line comes as a "Monitor event").
  far    the same, but `holder` runs `release` under another host name (`unshare --uts`,
         a UTS namespace of its own: another machine sharing the store, as tasklock sees
         it), so the push is refused ("another host") and only the monitor can tell.
No stopped-session rounds in this mode. Needs `unshare` and the right to use it (root).

--store URL runs everything (the session's hooks and monitor, and every command here) on
the PostgreSQL store at URL, in a schema of its own (`?schema=bench_wake_…`, dropped at
the end with psql when psql is there).

The session counts as idle when its sessions file (~/.claude/sessions/PID.json) says
`idle` after the stub's last answer, no request is in flight, and that holds for 0.5 s.
Times are from this process's monotonic clock; the stub's time of a request is when its
headers were read. Medians and p90 (nearest rank); the ratio is of medians.

Defaults: `--tasklock` is target/release/tasklock (under CARGO_TARGET_DIR if set), built
with `cargo build --release --locked` when missing; `--claude` is the CLI the end-to-end
tests install (target/e2e/node/node_modules/.bin/claude; see docs/e2e.md). Needs Linux,
tmux, git and Python 3.9+ (standard library only). Everything it starts (tmux server,
claude and its children, the stub) and its temporary directory are removed at the end,
also on Ctrl-C or an error. See docs/performance.md.
"""

import argparse
import glob
import http.server
import json
import os
import platform
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PUSHED = "[tasklock] A notification from tasklock"
API_KEY = "sk-ant-e2e-dummy-key"
TMUX_SESSION = "claude"
TIMEOUT = 60.0
PROMPT = "Say hello; this session waits for tasklock keys."
SEED = 20261126


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasklock", metavar="PATH",
                   help="binary to measure (default: target/release/tasklock, built if missing)")
    p.add_argument("--claude", metavar="PATH",
                   help="Claude Code CLI (default: target/e2e/node/node_modules/.bin/claude)")
    p.add_argument("--rounds", type=int, default=20,
                   help="push rounds, and as many plain ones (default 20)")
    p.add_argument("--stopped-rounds", type=int, default=5,
                   help="releases while the session is stopped (default 5)")
    p.add_argument("--json-out", metavar="FILE", help="also write every sample to FILE as JSON")
    p.add_argument("--store", metavar="URL",
                   help="a PostgreSQL URL: run on that store (a schema of its own)")
    p.add_argument("--monitor", action="store_true",
                   help="the plugin's monitor beside the socket: near and far rounds")
    p.add_argument("--keep", action="store_true",
                   help="keep the temporary directory (HOME, project, logs) for a look")
    return p.parse_args()


def pct(xs, q):
    """Nearest-rank percentile."""
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(-(-q * len(s) // 100)) - 1))
    return s[k]


def ms(x):
    return f"{x * 1000:.1f} ms"


class Failed(Exception):
    pass


# --- the model stub -----------------------------------------------------------------------

class Stub:
    """Anthropic Messages API on 127.0.0.1: answers every /v1/messages request with a
    plain `end_turn` text (as SSE when asked to stream), and keeps each request's body and
    arrival time."""

    def __init__(self, log_path):
        self.cond = threading.Condition()
        self.requests = []  # (arrival, body text, main conversation?)
        self.in_flight = 0
        self.last_main = None  # wall time (s) of the last answer to the main conversation
        self.log = open(log_path, "a")
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def send(self, status, ctype, body):
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(body)))
                self.send_header("request-id", "req_bench")
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def do_HEAD(self):
                self.send(200, "text/plain", b"")

            def do_GET(self):
                self.send(404, "application/json",
                          b'{"type":"error","error":{"type":"not_found_error","message":"stub"}}')

            def do_POST(self):
                stub.post(self)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def post(self, h):
        arrived = time.perf_counter()
        raw = h.rfile.read(int(h.headers.get("content-length", 0)))
        path = h.path.split("?")[0]
        if path == "/v1/messages/count_tokens":
            return h.send(200, "application/json", b'{"input_tokens":100}')
        if path != "/v1/messages":
            return h.send(404, "application/json",
                          b'{"type":"error","error":{"type":"not_found_error","message":"stub"}}')
        text = raw.decode("utf-8", "replace")
        try:
            req = json.loads(text)
        except ValueError:
            return h.send(400, "application/json",
                          b'{"type":"error","error":{"type":"invalid_request_error","message":"stub: not JSON"}}')
        main = any(t.get("name") == "Bash" for t in req.get("tools") or [])
        with self.cond:
            self.requests.append((arrived, text, main))
            self.in_flight += 1
            n = len(self.requests)
            self.cond.notify_all()
        self.log.write(json.dumps({"n": n, "t": arrived, "main": main,
                                   "pushed": PUSHED in text, "bytes": len(raw)}) + "\n")
        self.log.flush()
        msg = {"id": f"msg_bench{n}", "type": "message", "role": "assistant",
               "model": req.get("model", "stub"),
               "content": [{"type": "text", "text": "ok"}],
               "stop_reason": "end_turn", "stop_sequence": None,
               "usage": {"input_tokens": 100, "output_tokens": 1}}
        with self.cond:
            self.in_flight -= 1
            if main:
                self.last_main = time.time()
            self.cond.notify_all()
        if req.get("stream"):
            h.send(200, "text/event-stream", sse(msg).encode())
        else:
            h.send(200, "application/json", json.dumps(msg).encode())

    def count(self):
        with self.cond:
            return len(self.requests)

    def wait_for(self, start, needles, timeout):
        """Arrival of the first request from index `start` on whose body holds every
        needle, or None after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self.cond:
            i = start
            while True:
                while i < len(self.requests):
                    arrived, body, _ = self.requests[i]
                    if all(n in body for n in needles):
                        return arrived
                    i += 1
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        self.log.close()


def sse(msg):
    start = dict(msg, content=[], stop_reason=None)
    events = [{"type": "message_start", "message": start}]
    for i, block in enumerate(msg["content"]):
        events += [{"type": "content_block_start", "index": i,
                    "content_block": {"type": "text", "text": ""}},
                   {"type": "content_block_delta", "index": i,
                    "delta": {"type": "text_delta", "text": block["text"]}},
                   {"type": "content_block_stop", "index": i}]
    events += [{"type": "message_delta",
                "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": 1}},
               {"type": "message_stop"}]
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)


# --- the Claude Code session --------------------------------------------------------------

class Session:
    """Interactive `claude` in a detached tmux session on a tmux server of its own."""

    def __init__(self, claude, tasklock, home, project, stub, version, extra_env=None,
                 extra_args=()):
        self.home, self.project, self.stub = home, project, stub
        self.id = str(uuid.uuid4())
        self.tmux_socket = os.path.join(home, "tmux.sock")
        self.pid = None
        self.pane_pid = None
        self.stopped = False
        os.makedirs(os.path.join(home, "tmp"), exist_ok=True)
        answer_first_run_dialogs(home, project, version)
        env = {
            "PATH": os.path.dirname(os.path.abspath(tasklock)) + ":/usr/local/bin:/usr/bin:/bin",
            "HOME": home,
            "TMPDIR": os.path.join(home, "tmp"),
            "CLAUDE_CODE_TMPDIR": os.path.join(home, "tmp"),
            "LANG": "C.UTF-8",
            "TERM": "xterm-256color",
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL": "1",
            "ANTHROPIC_BASE_URL": stub.url,
            "ANTHROPIC_API_KEY": API_KEY,
            **(extra_env or {}),
        }
        argv = [claude, "--session-id", self.id, "--permission-mode", "default", *extra_args]
        # Not `exec`: tmux continues a pane's process that stops (SIGCONT to its group), so
        # claude runs under this shell, where a SIGSTOP holds.
        line = "env -i " + " ".join(q(f"{k}={v}") for k, v in env.items()) + " " + \
            " ".join(q(a) for a in argv)
        launcher = os.path.join(home, "claude-in-tmux.sh")
        with open(launcher, "w") as f:
            f.write(f"#!/bin/sh\n{line}\n")
        os.chmod(launcher, 0o755)
        conf = os.path.join(home, "tmux.conf")
        with open(conf, "w") as f:
            f.write("set -g remain-on-exit on\nset -g history-limit 10000\n")
        self.tmux("-f", conf, "new-session", "-d", "-s", TMUX_SESSION, "-x", "200", "-y", "50",
                  "-c", project, launcher)
        self.pane_pid = int(self.tmux("display-message", "-p", "-t", TMUX_SESSION,
                                      "#{pane_pid}").strip())

    def tmux(self, *args, check=True):
        env = {k: v for k, v in os.environ.items() if k != "TMUX"}
        r = subprocess.run(["tmux", "-S", self.tmux_socket, *args], env=env,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if check and r.returncode != 0:
            raise Failed(f"tmux {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    def screen(self):
        try:
            return self.tmux("capture-pane", "-p", "-J", "-t", TMUX_SESSION).rstrip()
        except Failed as e:
            return f"(no screen: {e})"

    def sessions_file(self):
        for path in glob.glob(os.path.join(self.home, ".claude", "sessions", "*.json")):
            try:
                with open(path) as f:
                    entry = json.load(f)
            except (OSError, ValueError):
                continue
            if entry.get("sessionId") == self.id:
                return entry
        return None

    def fail(self, what):
        entry = self.sessions_file()
        raise Failed(f"{what}\n--- screen\n{self.screen()}\n--- sessions file\n{entry}\n"
                     f"--- stub: {self.stub.count()} requests")

    def start(self):
        """Wait for the session to list itself, type the prompt, wait for idle."""
        deadline = time.monotonic() + TIMEOUT
        while (entry := self.sessions_file()) is None or not entry.get("messagingSocketPath"):
            if time.monotonic() > deadline:
                self.fail("the session did not list itself with a messaging socket")
            time.sleep(0.05)
        self.pid = int(entry["pid"])
        ready = time.monotonic() + 20
        while "\u276f" not in self.screen() and time.monotonic() < ready:
            time.sleep(0.1)
        first = self.stub.count()
        self.tmux("send-keys", "-t", TMUX_SESSION, "-l", PROMPT)
        time.sleep(0.3)
        self.tmux("send-keys", "-t", TMUX_SESSION, "Enter")
        deadline = time.monotonic() + TIMEOUT
        while self.stub.wait_for(first, [PROMPT], 10) is None:
            if time.monotonic() > deadline:
                self.fail("the typed prompt did not reach the stub")
            # Enter again only while the text still waits in the input box.
            inputs = [l for l in self.screen().splitlines() if l.lstrip().startswith("\u276f")]
            if inputs and PROMPT in inputs[-1]:
                self.tmux("send-keys", "-t", TMUX_SESSION, "Enter")
        self.wait_idle()

    def is_idle(self):
        entry = self.sessions_file()
        with self.stub.cond:
            in_flight, last = self.stub.in_flight, self.stub.last_main
        return (entry is not None and last is not None and in_flight == 0
                and entry.get("status") in ("idle", "shell")  # shell: a monitor runs
                and (entry.get("statusUpdatedAt") or 0) >= int(last * 1000))

    def wait_idle(self, timeout=TIMEOUT):
        deadline = time.monotonic() + timeout
        since = None
        while True:
            n = self.stub.count()
            if self.is_idle():
                if since is None or since[1] != n:
                    since = (time.monotonic(), n)
                elif time.monotonic() - since[0] >= 0.5:
                    return
            else:
                since = None
            if time.monotonic() > deadline:
                self.fail(f"the session was not idle within {timeout:.0f} s")
            time.sleep(0.05)

    def stop(self):
        os.kill(self.pid, signal.SIGSTOP)
        self.stopped = True
        deadline = time.monotonic() + 5
        while proc_state(self.pid) != "T":
            if time.monotonic() > deadline:
                self.fail(f"claude (pid {self.pid}) did not stop: state {proc_state(self.pid)}")
            time.sleep(0.01)

    def cont(self):
        os.kill(self.pid, signal.SIGCONT)
        self.stopped = False

    def kill(self):
        """Kill claude, every descendant and their process groups (Claude Code runs each
        command in a group of its own), then the tmux server."""
        if self.pane_pid:
            doomed = descendants(self.pane_pid) + [(self.pane_pid, pgid_of(self.pane_pid))]
            own = os.getpgrp()
            for pid, pgid in doomed:
                for target in (pid, -pgid if pgid and pgid != own else None):
                    if target:
                        try:
                            os.kill(target, signal.SIGKILL)
                        except OSError:
                            pass
            # Gone (or zombies) before the temporary directory is removed.
            deadline = time.monotonic() + 5
            while any(proc_state(p) not in (None, "Z") for p, _ in doomed) \
                    and time.monotonic() < deadline:
                time.sleep(0.02)
        self.tmux("kill-server", check=False)


def answer_first_run_dialogs(home, project, version):
    """Onboarding done, the API key from the environment approved, the project trusted."""
    doc = {
        "hasCompletedOnboarding": True,
        "lastOnboardingVersion": version,
        "theme": "dark",
        "customApiKeyResponses": {"approved": [API_KEY[-20:]], "rejected": []},
        "projects": {os.path.realpath(project): {"hasTrustDialogAccepted": True,
                                                 "hasCompletedProjectOnboarding": True}},
    }
    with open(os.path.join(home, ".claude.json"), "w") as f:
        json.dump(doc, f)


def q(s):
    return "'" + s.replace("'", "'\\''") + "'"


def procs():
    """(pid, parent, process group) of every process."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        rest = stat[stat.rfind(")") + 2:].split()
        out.append((int(name), int(rest[1]), int(rest[2])))
    return out


def proc_state(pid):
    """The state letter in /proc/PID/stat (T: stopped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:].split()[0]


def pgid_of(pid):
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def descendants(root):
    table = procs()
    found, parents = [], [root]
    while parents:
        parent = parents.pop()
        for pid, ppid, pgrp in table:
            if ppid == parent and all(p != pid for p, _ in found):
                found.append((pid, pgrp))
                parents.append(pid)
    return found


# --- tasklock -----------------------------------------------------------------------------

def build():
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target")
    binary = os.path.join(target, "release", "tasklock")
    if not os.path.exists(binary):
        print(f"building {binary} (cargo build --release --locked)", file=sys.stderr)
        subprocess.run(["cargo", "build", "--release", "--locked", "--quiet"], cwd=REPO, check=True)
    return binary


ENV = {k: v for k, v in os.environ.items()
       if not k.startswith(("TASKLOCK_", "CLAUDE_CODE_", "CODEX_"))}

# Run a command as on another host: a UTS namespace of its own, another host name.
OTHER_HOST = ["unshare", "--uts", "sh", "-c", 'hostname bench-other-host && exec "$0" "$@"']


class Tasklock:
    def __init__(self, binary, locks, env=None):
        self.binary, self.locks = binary, locks
        self.env = env or ENV

    def run(self, agent, *args, ok=(0,), prefix=()):
        """`tasklock --dir LOCKS ARGS --agent AGENT` (no `--agent` when AGENT is None); its
        wall time in seconds, and its output."""
        who = ["--agent", agent] if agent else []
        t = time.perf_counter()
        r = subprocess.run([*prefix, self.binary, "--dir", self.locks, *args, *who], env=self.env,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True)
        took = time.perf_counter() - t
        if r.returncode not in ok:
            raise Failed(f"tasklock {' '.join(args)} --agent {agent} exited {r.returncode}:\n"
                         f"{r.stdout}{r.stderr}")
        return took, r.stdout

    def pushes(self):
        """The `push` events of the audit log: key -> detail."""
        _, out = self.run(None, "audit", "--json", "--limit", "0")  # --agent would filter
        events = (json.loads(l) for l in out.splitlines() if l.strip())
        return {e["key"]: e.get("detail", "") for e in events if e.get("event") == "push"}


# --- the benchmark ------------------------------------------------------------------------

def main():
    a = parse_args()
    for tool in ("tmux", "git"):
        if shutil.which(tool) is None:
            sys.exit(f"wake: `{tool}` is not installed")
    binary = os.path.abspath(a.tasklock or build())
    claude = a.claude or os.path.join(REPO, "target", "e2e", "node", "node_modules", ".bin", "claude")
    if not os.path.exists(claude):
        sys.exit(f"wake: no Claude Code CLI at {claude}: pass --claude PATH, or run the "
                 "end-to-end tests once to install it (docs/e2e.md)")
    claude = os.path.abspath(claude)
    version = subprocess.run([claude, "--version"], capture_output=True, text=True,
                             env=ENV).stdout.split()[0]
    tl_version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()

    # Ctrl-C and SIGTERM end the run through the cleanup below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(130))
    tmp = tempfile.mkdtemp(prefix="tasklock-wake-")
    stub = session = None
    try:
        home, project = os.path.join(tmp, "home"), os.path.join(tmp, "project")
        os.makedirs(home)
        os.makedirs(project)
        subprocess.run(["git", "init", "-q"], cwd=project, env=ENV, check=True)
        store_env = {}
        if a.store:
            sep = "&" if "?" in a.store else "?"
            schema = f"bench_wake_{uuid.uuid4().hex[:12]}"
            store_env = {"TASKLOCK_URL": f"{a.store}{sep}schema={schema}"}
        env = {**ENV, **store_env}
        extra_args = []
        if a.monitor:
            # The plugin's hooks and monitor; a lock directory for the file store.
            os.makedirs(os.path.join(project, ".locks"))
            extra_args = ["--plugin-dir", os.path.join(REPO, "plugins", "claude")]
        else:
            r = subprocess.run([binary, "init"], cwd=project, env=env, capture_output=True,
                               text=True)
            if r.returncode != 0:
                raise Failed(f"tasklock init exited {r.returncode}:\n{r.stdout}{r.stderr}")
        tl = Tasklock(binary, os.path.join(project, ".locks"), env)
        stub = Stub(os.path.join(tmp, "stub.log.jsonl"))
        started = time.perf_counter()
        session = Session(claude, binary, home, project, stub, version, store_env, extra_args)
        session.start()
        print(f"wake: session {session.id} (claude pid {session.pid}) idle "
              f"{time.perf_counter() - started:.1f} s after start", file=sys.stderr)
        result = (measure_monitor if a.monitor else measure)(a, tl, stub, session)
    except KeyboardInterrupt:
        print("wake: interrupted", file=sys.stderr)
        return 130
    except Failed as e:
        print(f"wake: {e}", file=sys.stderr)
        return 1
    finally:
        if session is not None:
            if session.stopped:
                try:
                    session.cont()
                except OSError:
                    pass
            session.kill()
        if stub is not None:
            stub.close()
        if a.store and shutil.which("psql"):
            subprocess.run(["psql", a.store, "-qc", f"DROP SCHEMA IF EXISTS {schema} CASCADE"],
                           env=ENV, capture_output=True)
        if a.keep:
            print(f"wake: kept {tmp}", file=sys.stderr)
        else:
            for _ in range(3):  # a hook killed just now may have been writing there
                shutil.rmtree(tmp, ignore_errors=True)
                if not os.path.exists(tmp):
                    break
                time.sleep(0.2)

    (report_monitor if a.monitor else report)(a, result, binary, tl_version, version)
    return 0


def measure_monitor(a, tl, stub, session):
    rng = random.Random(SEED)
    sid = session.id
    s = {"near": [], "far": [], "release_near": [], "release_far": []}
    told_by = {"near": {"socket": 0, "monitor": 0}, "far": {"socket": 0, "monitor": 0}}

    def round_(route, i):
        key = f"{route}{i}"
        tl.run("holder", "checkout", key)
        tl.run(sid, "checkout", key, "--queue", ok=(2,))
        session.wait_idle()
        first = stub.count()
        prefix = OTHER_HOST if route == "far" else ()
        t0 = time.perf_counter()
        took, _ = tl.run("holder", "release", key, prefix=prefix)
        seen = stub.wait_for(first, [PUSHED, f'key: \\"{key}\\"'], TIMEOUT)
        if seen is None:
            session.fail(f"no request to the model carried the message for {key}")
        with stub.cond:
            body = next(b for t, b, _ in stub.requests[first:] if t == seen)
        # A monitor's line comes inside `<event>…</event>` of a task notification.
        keyed = f'key: \\"{key}\\"'
        at = body.rfind(PUSHED, 0, body.find(keyed))
        by = "monitor" if body[max(0, at - 7):at] == "<event>" else "socket"
        told_by[route][by] += 1
        s[route].append(seen - t0)
        s[f"release_{route}"].append(took)
        session.wait_idle()
        # Told once: the conversation so far holds the message for this key once.
        with stub.cond:
            last = stub.requests[-1][1]
        if last.count(keyed) != 1:
            ctx = [last[max(0, m.start() - 300):m.start() + 50] for m in re.finditer(re.escape(keyed), last)]
            raise Failed(f"{key}: told {last.count(keyed)} times:\n" + "\n----\n".join(ctx))
        tl.run(sid, "leave", key)

    round_("near", "warm")
    round_("far", "warm")
    for k in s:
        s[k].clear()
    told_by = {"near": {"socket": 0, "monitor": 0}, "far": {"socket": 0, "monitor": 0}}
    for i in range(a.rounds):
        order = ["near", "far"]
        rng.shuffle(order)
        for route in order:
            round_(route, i)
        print(f"wake: round {i + 1}/{a.rounds}: near {ms(s['near'][-1])}, "
              f"far {ms(s['far'][-1])}", file=sys.stderr)
    if told_by["far"]["socket"]:
        raise Failed(f"a release on another host was pushed into the socket: {told_by}")
    return {"samples": s, "told_by": told_by}


def report_monitor(a, result, binary, tl_version, claude_version):
    s, told = result["samples"], result["told_by"]
    load = os.getloadavg()

    def row(what, xs):
        return f"| {what} | {len(xs)} | {ms(statistics.median(xs))} | {ms(pct(xs, 90))} | {ms(max(xs))} |"

    lines = [
        f"{tl_version}, Claude Code {claude_version}, {os.cpu_count()} CPUs, "
        f"Linux {platform.release()}, Python {platform.python_version()}, "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, "
        f"store: {'PostgreSQL' if a.store else 'lock directory'}",
        "",
        "| measure | n | median | p90 | max |",
        "|---|---:|---:|---:|---:|",
        row("near: `release` started -> idle session's next model request", s["near"]),
        row("far (another host): `release` started -> next model request", s["far"]),
        row("`release`, near", s["release_near"]),
        row("`release`, far (push refused: another host)", s["release_far"]),
        "",
        f"near: told by the socket {told['near']['socket']}, by the monitor "
        f"{told['near']['monitor']} times; far: by the monitor {told['far']['monitor']} times. "
        "Every request carried the notification once.",
    ]
    print("\n".join(lines))
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"tasklock": binary, "tasklock_version": tl_version,
                       "claude_version": claude_version, "cpus": os.cpu_count(),
                       "loadavg": load, "rounds": a.rounds, "store": bool(a.store),
                       "seconds": s, "told_by": told}, f, indent=1)


def measure(a, tl, stub, session):
    rng = random.Random(SEED)
    sid = session.id
    s = {"wake": [], "release_push": [], "release_plain": [], "release_stopped": [],
         "after_release": []}

    def push_round(i):
        key = f"k{i}"
        tl.run("holder", "checkout", key)
        tl.run(sid, "checkout", key, "--queue", ok=(2,))
        session.wait_idle()
        first = stub.count()
        t0 = time.perf_counter()
        took, _ = tl.run("holder", "release", key)
        seen = stub.wait_for(first, [PUSHED, f'key: \\"{key}\\"'], TIMEOUT)
        if seen is None:
            session.fail(f"no request to the model carried the push for {key}")
        s["release_push"].append(took)
        s["wake"].append(seen - t0)
        s["after_release"].append(seen - t0 - took)
        session.wait_idle()
        tl.run(sid, "leave", key)

    def plain_round(i):
        key = f"n{i}"
        tl.run("holder", "checkout", key)
        tl.run("plain-waiter", "checkout", key, "--queue", ok=(2,))
        session.wait_idle()
        took, _ = tl.run("holder", "release", key)
        s["release_plain"].append(took)
        tl.run("plain-waiter", "leave", key)

    # One warm-up round of each, not counted.
    push_round("warm")
    plain_round("warm")
    for k in s:
        s[k].clear()
    for i in range(a.rounds):
        order = [push_round, plain_round]
        rng.shuffle(order)
        for f in order:
            f(i)
        print(f"wake: round {i + 1}/{a.rounds}: wake {ms(s['wake'][-1])}, release "
              f"{ms(s['release_push'][-1])} (plain {ms(s['release_plain'][-1])})", file=sys.stderr)

    # A stopped session: its socket accepts (the kernel's backlog), nobody reads.
    stopped_keys = [f"s{i}" for i in range(a.stopped_rounds)]
    for key in stopped_keys:
        tl.run("holder", "checkout", key)
        tl.run(sid, "checkout", key, "--queue", ok=(2,))
    first = stub.count()
    session.stop()
    for key in stopped_keys:
        took, _ = tl.run("holder", "release", key)
        s["release_stopped"].append(took)
    time.sleep(1)
    if stub.count() != first:
        session.fail("the stopped session asked the model")
    t_cont = time.perf_counter()
    session.cont()
    # Claude Code may take several queued messages into one turn: look for each key.
    late = []
    for key in stopped_keys:
        seen = stub.wait_for(first, [PUSHED, f'key: \\"{key}\\"'], TIMEOUT)
        late.append(None if seen is None else seen - t_cont)
    session.wait_idle()
    for key in stopped_keys:
        tl.run(sid, "leave", key)

    pushes = tl.pushes()
    outcome = {k: pushes.get(k, "(no push event)") for k in
               [f"k{i}" for i in range(a.rounds)] + stopped_keys}
    undelivered = {k: v for k, v in outcome.items() if "delivered to the session" not in v
                   or "not delivered" in v}
    if undelivered:
        raise Failed(f"pushes not delivered: {undelivered}")
    plain_pushed = [k for k in pushes if k.startswith("n")]
    if plain_pushed:
        raise Failed(f"a waiter with no session was pushed to: {plain_pushed}")
    return {"samples": s, "stopped_seen_after_cont": late, "push_outcome": outcome}


def report(a, result, binary, tl_version, claude_version):
    s = result["samples"]
    late = result["stopped_seen_after_cont"]
    load = os.getloadavg()

    def row(what, xs):
        return f"| {what} | {len(xs)} | {ms(statistics.median(xs))} | {ms(pct(xs, 90))} | {ms(max(xs))} |"

    ratio = statistics.median(s["release_push"]) / statistics.median(s["release_plain"])
    reached = [x for x in late if x is not None]
    lines = [
        f"{tl_version}, Claude Code {claude_version}, {os.cpu_count()} CPUs, "
        f"Linux {platform.release()}, Python {platform.python_version()}, "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
        "",
        "| measure | n | median | p90 | max |",
        "|---|---:|---:|---:|---:|",
        row("wake: `release` started -> idle session's next model request", s["wake"]),
        row("of which after `release` returned", s["after_release"]),
        row("`release`, the waiter's session takes the push", s["release_push"]),
        row("`release`, the waiter has no session (nothing pushed)", s["release_plain"]),
        row("`release`, the waiter's session stopped (SIGSTOP)", s["release_stopped"]),
        "",
        f"release with a push / without: {ratio:.2f}x (medians, "
        f"{statistics.median(s['release_push']) * 1000 - statistics.median(s['release_plain']) * 1000:+.1f} ms)."
        f" Stopped session: {len(reached)} of {len(late)} pushes reached the model after SIGCONT"
        + (f" ({len(set(reached))} request{'s' if len(set(reached)) > 1 else ''}), "
           f"within {max(reached) * 1000:.0f} ms." if reached else "."),
    ]
    print("\n".join(lines))
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"tasklock": binary, "tasklock_version": tl_version,
                       "claude_version": claude_version, "cpus": os.cpu_count(),
                       "loadavg": load, "rounds": a.rounds,
                       "seconds": s, "stopped_seen_after_cont": late,
                       "push_outcome": result["push_outcome"]}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
