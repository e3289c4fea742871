#!/usr/bin/env python3
"""What npm's `tasklock` command costs per call when npm ran no install scripts
(`npm install --ignore-scripts`, or scripts not allowed): the sh launcher that execs the
platform package's binary, against the binary itself and the Node launcher it replaces.
Each is run interleaved, `--version` and a `hook user-prompt-submit` (what every prompt of
every session runs), 300 rounds; medians and the ratio to the binary.

    python3 bench/npm_launcher.py [BIN]      (default: target/debug/tasklock, stripped)

It packs BIN as the release does (scripts/dist.sh, then scripts/npm.sh from its
archive), installs both tarballs with `npm install -g --offline --ignore-scripts` into a
temporary prefix, and times `PREFIX/bin/tasklock` (the launcher), the platform package's
binary, and `node PREFIX/lib/node_modules/tasklock/launcher.js`. Uses hyperfine instead
of the Python loop when it is on PATH (HYPERFINE=0 to skip).
"""
import json, os, shutil, statistics, subprocess, sys, tempfile, time

repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(repo, 'target/debug/tasklock')
work = tempfile.mkdtemp(prefix='tasklock-npm-bench.')
os.makedirs(os.path.join(work, 'tmp'))
env = dict(os.environ, TMPDIR=os.path.join(work, 'tmp'))
built = os.path.join(work, 'tasklock')
shutil.copy(src, built)
subprocess.run(['strip', built], check=True)
out = subprocess.run(['sh', os.path.join(repo, 'scripts/dist.sh'), os.path.join(work, 'dist')],
                     env=dict(env, TASKLOCK_DIST_BINARY=built), check=True,
                     capture_output=True, text=True).stdout.split()
archive = out[0]
tarballs = subprocess.run(['sh', os.path.join(repo, 'scripts/npm.sh'), '--archive', archive,
                           os.path.join(work, 'npm')], env=env, check=True,
                          capture_output=True, text=True).stdout.split()
prefix = os.path.join(work, 'prefix')
subprocess.run(['npm', 'install', '-g', '--offline', '--ignore-scripts', '--no-audit',
                '--no-fund', '--prefix', prefix] + sorted(tarballs, key=len, reverse=True),
               env=dict(env, HOME=work), check=True, capture_output=True)
modules = os.path.join(prefix, 'lib/node_modules')
plat = os.path.join(modules, '@tasklock', os.listdir(os.path.join(modules, '@tasklock'))[0])
cmds = {
    'binary': [os.path.join(plat, 'bin/tasklock')],
    'sh launcher': [os.path.join(prefix, 'bin/tasklock')],
    'node launcher': ['node', os.path.join(modules, 'tasklock/launcher.js')],
}
with open(cmds['sh launcher'][0], 'rb') as f:
    assert f.read(9) == b'#!/bin/sh', 'npm installed no sh launcher'

lockdir = os.path.join(work, 'locks')
hook_input = json.dumps({'session_id': 'bench-session', 'hook_event_name': 'UserPromptSubmit',
                         'cwd': work, 'prompt': 'x'}).encode()
run_env = dict(os.environ, TASKLOCK_DIR=lockdir)
cases = {'--version': (['--version'], None), 'hook user-prompt-submit': (['hook', 'user-prompt-submit'], hook_input)}

def once(cmd, args, stdin):
    t = time.perf_counter()
    subprocess.run(cmd + args, input=stdin, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, env=run_env)
    return time.perf_counter() - t

if shutil.which('hyperfine') and os.environ.get('HYPERFINE') != '0':
    for case, (args, _) in cases.items():
        if case != '--version':
            continue
        subprocess.run(['hyperfine', '-N', '--warmup', '20', '--runs', '300']
                       + [' '.join(c + args) for c in cmds.values()], check=True)
rounds = 300
times = {(n, c): [] for n in cmds for c in cases}
for n, cmd in cmds.items():
    for c, (args, stdin) in cases.items():
        for _ in range(20):
            once(cmd, args, stdin)
for _ in range(rounds):
    for n, cmd in cmds.items():
        for c, (args, stdin) in cases.items():
            times[(n, c)].append(once(cmd, args, stdin))
print(f'{rounds} rounds, median per call (ratio to the binary):')
for c in cases:
    base = statistics.median(times[('binary', c)])
    for n in cmds:
        m = statistics.median(times[(n, c)])
        print(f'  {c:26} {n:14} {m * 1000:7.2f} ms  {m / base:5.2f}x')
shutil.rmtree(work)
