#!/usr/bin/env python3
"""Start-up cost of tasklock builds, interleaved: `--version`, `checkout` + `release` on
the file store (the lock directory in a temp dir), and a checkout refused because a live
agent holds the key (its process is read), 400 rounds per binary.

    python3 bench/startup.py BIN_A BIN_B [...]

Build the binaries to compare as install.sh does (static-pie), e.g. with and without the
default features. `NAME=VALUE@BIN` runs BIN with that variable set, e.g.
`TASKLOCK_PORTABLE_OS=1@BIN` for the OS layer macOS runs (a build with the feature
`portable-os`). Medians only; compare within one run.
"""
import subprocess, time, statistics, sys, os, tempfile
bins = sys.argv[1:]
def split(spec):
    """`NAME=VALUE@BIN` -> (BIN, {NAME: VALUE}); `BIN` -> (BIN, {})."""
    if '@' in spec and '=' in spec.split('@', 1)[0]:
        var, b = spec.split('@', 1)
        k, v = var.split('=', 1)
        return b, {k: v}
    return spec, {}
def run(spec, args, extra=None):
    b, env = split(spec)
    env = dict(os.environ, **env, **(extra or {}))
    t=time.perf_counter(); subprocess.run([b]+args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env); return time.perf_counter()-t
res={b:{'version':[], 'co':[]} for b in bins}
d=tempfile.mkdtemp()
agent={'TASKLOCK_AGENT': 'bench'}
for b in bins:
    for _ in range(20): run(b,['--version'])
for i in range(400):
    for n, b in enumerate(bins):
        res[b]['version'].append(run(b,['--version']))
        lock=os.path.join(d, f"{n}.locks")
        t=run(b,['--dir',lock,'checkout','k'],agent)+run(b,['--dir',lock,'release','k'],agent)
        res[b]['co'].append(t)
# A refused checkout of a key whose holder has a registered, live process: the liveness
# check reads that process (procfs on Linux, sysinfo on the portable layer).
holder = subprocess.Popen(['sleep', '600'])
for n, b in enumerate(bins):
    lock=os.path.join(d, f"{n}.held")
    run(b,['--dir',lock,'heartbeat','--pid',str(holder.pid)],{'TASKLOCK_AGENT':'holder'})
    run(b,['--dir',lock,'checkout','busy'],{'TASKLOCK_AGENT':'holder'})
    res[b]['refused']=[]
for i in range(400):
    for n, b in enumerate(bins):
        lock=os.path.join(d, f"{n}.held")
        res[b]['refused'].append(run(b,['--dir',lock,'checkout','busy'],agent))
holder.kill()
for b in bins:
    v=statistics.median(res[b]['version'])*1000; c=statistics.median(res[b]['co'])*1000
    r=statistics.median(res[b]['refused'])*1000
    print(f"{b}: size {os.path.getsize(split(b)[0])/1e6:.2f} MB, --version median {v:.3f} ms, checkout+release median {c:.3f} ms, refused checkout (live holder's process read) median {r:.3f} ms")
