#!/usr/bin/env python3
"""How fast `tasklock ui` shows a big fleet in a browser, and what it costs the server.

    python3 bench/ui.py [--bin target/release/tasklock] [--pg URL] [--loads 5]
        [--lockdir DIR] [--schema NAME] [--built]

--lockdir and --schema keep the fleet (a lock directory, a PostgreSQL schema) for a
later run with --built, which skips building it.

Builds a fleet of 10,000 checkouts held by 1,000 agents (`checkout` itself, four at a
time), starts `tasklock ui`, and opens its page in Debian's Chromium, headless, through
chromedriver (as tests/ui.rs does). Reports, on the lock directory and, with --pg (or
TASKLOCK_BENCH_PG_URL), on PostgreSQL:

- navigation to first rows: the page sets the Performance API mark
  `tasklock-first-rows` once its first rows are built and laid out; its startTime counts
  from the start of the navigation (the printed URL, its redirect included). Median and
  worst over --loads navigations, the first one apart (a cold browser).
- drawing alone: the page's render() of the document it holds, rows laid out, timed
  again in the page (median of five).
- the first payload: the bytes of the document the page's event stream sends first (the
  same as `GET /api/fleet`), beside the whole fleet (`top --once --json`) for scale.
- the server's peak resident size (VmHWM in /proc/PID/status) after the loads and
  --changes changes made by other processes while a page is open.
"""
import argparse
import concurrent.futures
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(args, env):
    p = subprocess.run(args, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if p.returncode not in (0, 2):
        sys.exit(f"{args}: exit {p.returncode}: {p.stderr}")
    return p


def build_fleet(binary, env, lockdir, agents, per):
    def agent(a):
        for j in range(per):
            run([binary, "--dir", lockdir, "checkout", f"k{a:04d}-{j}", "--agent",
                 f"agent-{a:04d}"], env)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(agent, range(agents)))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Browser:
    def __init__(self):
        if not shutil.which("chromedriver"):
            sys.exit("needs chromedriver (apt-get install chromium chromium-driver)")
        self.port = free_port()
        self.profile = tempfile.mkdtemp(prefix="tasklock-ui-bench-profile.")
        self.driver = subprocess.Popen(["chromedriver", f"--port={self.port}"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port)).close()
                break
            except OSError:
                if time.time() > deadline:
                    sys.exit("chromedriver never listened")
                time.sleep(0.05)
        caps = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--disable-background-networking", "--disable-component-update",
                         "--disable-sync", "--no-first-run", "--window-size=1400,1300",
                         f"--user-data-dir={self.profile}"],
            }}}}
        self.session = self.call("POST", "/session", caps)["sessionId"]

    def call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data,
                                     method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as r:
            v = json.load(r)["value"]
        if isinstance(v, dict) and "error" in v:
            sys.exit(f"chromedriver: {v}")
        return v

    def go(self, url):
        self.call("POST", f"/session/{self.session}/url", {"url": url})

    def js(self, script):
        return self.call("POST", f"/session/{self.session}/execute/sync",
                         {"script": script, "args": []})

    def close(self):
        try:
            self.call("DELETE", f"/session/{self.session}")
        except Exception:
            pass
        self.driver.kill()
        self.driver.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def first_payload(port, token):
    """The first document of a fresh event stream, in bytes."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(f"GET /events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Tasklock-Token: {token}\r\n\r\n"
              .encode())
    f = s.makefile("rb")
    deadline = time.time() + 120
    while time.time() < deadline:
        line = f.readline()
        if line.startswith(b"data: "):
            s.close()
            return len(line) - len(b"data: \n")
    sys.exit("the event stream sent nothing")


def bench_store(name, binary, env, lockdir, a):
    if not a.built:
        t = time.perf_counter()
        build_fleet(binary, env, lockdir, a.agents, a.per)
        print(f"{name}: built {a.agents * a.per} checkouts of {a.agents} agents in "
              f"{time.perf_counter() - t:.0f} s", flush=True)
    whole = len(run([binary, "--dir", lockdir, "top", "--once", "--json"], env).stdout)
    ui = subprocess.Popen([binary, "--dir", lockdir, "ui", "--no-open"], env=env,
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    try:
        url = ui.stdout.readline().decode().strip().removeprefix("tasklock ui: ")
        port = int(url.split(":")[2].split("/")[0])
        token = url.split("token=")[1]
        payload = first_payload(port, token)
        b = Browser()
        try:
            times = []
            for i in range(a.loads + 1):
                b.go(url)
                deadline = time.time() + 120
                while True:
                    v = b.js("const m = performance.getEntriesByName('tasklock-first-rows');"
                             "return m.length ? m[0].startTime : null")
                    if v is not None:
                        break
                    if time.time() > deadline:
                        sys.exit("the page never drew its rows")
                    time.sleep(0.02)
                rows = b.js("return document.querySelectorAll('#checkouts tbody tr').length")
                if rows == 0:
                    sys.exit("the page drew no rows")
                times.append(v)
            draw = b.js("""const full = JSON.stringify(doc); const ts = [];
                for (let i = 0; i < 5; i++) { doc = JSON.parse(full); const t = performance.now();
                  render(); void document.body.offsetHeight; ts.push(performance.now() - t); }
                ts.sort((x, y) => x - y); return ts[2];""")
            # Changes made by other processes while the page is open.
            for i in range(a.changes):
                run([binary, "--dir", lockdir, "checkout", f"change-{i}", "--agent",
                     "agent-0000"], env)
                time.sleep(1.1)
            summary = b.js("return document.getElementById('summary').textContent")
        finally:
            b.close()
        hwm = status_kib(ui.pid, "VmHWM") / 1024
        rss = status_kib(ui.pid, "VmRSS") / 1024
    finally:
        ui.kill()
        ui.wait()
    warm = sorted(times[1:])
    print(f"{name}: navigation to first rows: cold {times[0]:.0f} ms; warm median "
          f"{statistics.median(warm):.0f} ms, worst {warm[-1]:.0f} ms over {len(warm)} loads; "
          f"drawing alone {draw:.0f} ms")
    print(f"{name}: first payload {payload / 1024:.0f} KiB (the whole fleet as JSON: "
          f"{whole / 1024:.0f} KiB)")
    print(f"{name}: server peak RSS (VmHWM) {hwm:.1f} MiB, {rss:.1f} MiB at the end")
    print(f"{name}: the page said: {summary}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "tasklock"))
    ap.add_argument("--pg", default=os.environ.get("TASKLOCK_BENCH_PG_URL"))
    ap.add_argument("--no-dir", action="store_true", help="PostgreSQL only")
    ap.add_argument("--agents", type=int, default=1000)
    ap.add_argument("--per", type=int, default=10, help="checkouts per agent")
    ap.add_argument("--loads", type=int, default=5)
    ap.add_argument("--changes", type=int, default=5)
    ap.add_argument("--lockdir", help="the lock directory to use, and keep")
    ap.add_argument("--schema", help="the PostgreSQL schema to use, and keep")
    ap.add_argument("--built", action="store_true", help="the fleet is there already")
    a = ap.parse_args()
    binary = os.path.abspath(a.bin)
    stores = [] if a.no_dir else [("lock directory", None)]
    if a.pg:
        stores.append(("PostgreSQL", a.pg))
    for name, url in stores:
        tmp = tempfile.mkdtemp(prefix="tasklock-ui-bench.")
        lockdir = os.path.join(tmp, ".locks")
        if a.lockdir and not url:
            lockdir = os.path.abspath(a.lockdir)
        os.makedirs(lockdir, exist_ok=True)
        schema = a.schema or f"bench_ui_{os.getpid()}"
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("TASKLOCK_", "CLAUDE_CODE_", "CODEX_"))}
        if url:
            sep = "&" if "?" in url else "?"
            env["TASKLOCK_URL"] = f"{url}{sep}schema={schema}"
        try:
            bench_store(name, binary, env, lockdir, a)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            if url and not a.schema and shutil.which("psql"):
                subprocess.run(["psql", url, "-qc",
                                f"drop schema if exists {schema} cascade"],
                               capture_output=True)


if __name__ == "__main__":
    main()
