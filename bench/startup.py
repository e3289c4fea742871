#!/usr/bin/env python3
"""Start-up cost of tasklock builds, interleaved: `--version`, and `checkout` + `release`
on the file store (the lock directory in a temp dir), 400 rounds per binary.

    python3 bench/startup.py BIN_A BIN_B [...]

Build the binaries to compare as install.sh does (static-pie), e.g. with and without the
default features. Medians only; compare within one run.
"""
import subprocess, time, statistics, sys, os, tempfile
bins = sys.argv[1:]
def run(b, args, env=None):
    t=time.perf_counter(); subprocess.run([b]+args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env); return time.perf_counter()-t
res={b:{'version':[], 'co':[]} for b in bins}
d=tempfile.mkdtemp()
env=dict(os.environ, TASKLOCK_AGENT='bench')
for b in bins:
    for _ in range(20): run(b,['--version'])
for i in range(400):
    for b in bins:
        res[b]['version'].append(run(b,['--version']))
        lock=os.path.join(d, os.path.basename(b)+'.locks')
        t=run(b,['--dir',lock,'checkout','k'],env)+run(b,['--dir',lock,'release','k'],env)
        res[b]['co'].append(t)
for b in bins:
    v=statistics.median(res[b]['version'])*1000; c=statistics.median(res[b]['co'])*1000
    print(f"{b}: size {os.path.getsize(b)/1e6:.2f} MB, --version median {v:.3f} ms, checkout+release median {c:.3f} ms")
