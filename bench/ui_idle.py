#!/usr/bin/env python3
"""Does `tasklock ui` keep answering while many idle connections sit on it?

    python3 bench/ui_idle.py [--bin target/release/tasklock] [--idle 1500] [--requests 20]

Starts `tasklock ui` under `ulimit -n 1024` (the usual limit) in a throwaway project with
one checkout, opens IDLE connections that each send a byte now and then and never finish
a request, then times REQUESTS requests with the page's token to /api/fleet. Prints the
status codes, the median and slowest answer, and the server's CPU time over the run
(from /proc/PID/stat). The same requests are timed before the idle connections as the
reference of the same run.
"""
import argparse, os, re, resource, socket, statistics, subprocess, sys, tempfile, time
import urllib.request


def ticks(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])


def timed(port, token, n):
    codes, ms = set(), []
    for _ in range(n):
        t = time.perf_counter()
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/fleet", headers={"X-Tasklock-Token": token})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                r.read()
                codes.add(r.status)
        except Exception as e:  # a refusal or a reset is the finding, not a crash
            codes.add(type(e).__name__)
        ms.append((time.perf_counter() - t) * 1000)
    return codes, statistics.median(ms), max(ms)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default="target/release/tasklock")
    ap.add_argument("--idle", type=int, default=1500)
    ap.add_argument("--requests", type=int, default=20)
    a = ap.parse_args()
    bin_ = os.path.abspath(a.bin)
    resource.setrlimit(resource.RLIMIT_NOFILE, (a.idle + 512, a.idle + 512))
    with tempfile.TemporaryDirectory() as d:
        subprocess.run(["git", "init", "-q", d], check=True)
        env = dict(os.environ, TASKLOCK_AGENT="bench")
        subprocess.run([bin_, "init"], cwd=d, env=env, capture_output=True, check=True)
        subprocess.run([bin_, "checkout", "k1"], cwd=d, env=env, capture_output=True, check=True)
        ui = subprocess.Popen(
            ["sh", "-c", f"ulimit -n 1024; exec '{bin_}' ui --port 0 --no-open"],
            cwd=d, stdout=subprocess.PIPE, text=True, env={
                k: v for k, v in os.environ.items() if not k.startswith("TASKLOCK_")})
        try:
            url = ui.stdout.readline().split()[-1]
            port = int(re.search(r":(\d+)/", url).group(1))
            token = url.split("token=")[1]
            codes, med, worst = timed(port, token, a.requests)
            print(f"no idle connections: {sorted(map(str, codes))}, median {med:.1f} ms, max {worst:.1f} ms")
            socks = []
            for _ in range(a.idle):
                s = socket.socket()
                s.connect(("127.0.0.1", port))
                s.send(b"G")
                socks.append(s)
            t0 = ticks(ui.pid)
            time.sleep(1)
            codes, med, worst = timed(port, token, a.requests)
            for s in socks:
                try:
                    s.send(b"E")
                except OSError:
                    pass
            time.sleep(4)
            cpu = (ticks(ui.pid) - t0) / os.sysconf("SC_CLK_TCK")
            print(f"{a.idle} idle connections: {sorted(map(str, codes))}, median {med:.1f} ms, "
                  f"max {worst:.1f} ms; server CPU {cpu:.2f} s over ~5 s")
        finally:
            ui.terminate()
            ui.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
