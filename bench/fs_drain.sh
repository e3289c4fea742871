#!/usr/bin/env bash
# How the file system under a lock directory moves a drain (docs/performance.md, "The
# file system under a drain"). For each binary given, in turn: a new ext4 on a loop
# device, a backlog of N keys (`backlog add --file`), then A shell loops each running
# `checkout --next` until nothing is ready; prints the add's seconds and the claims a
# second. Needs root, mkfs.ext4 and a loop device.
#
#   bench/fs_drain.sh BIN [BIN...]
#
# Environment:
#   N=10000 A=16      keys, drainers
#   FS=nojournal      or `journal`, or `tmpfs` (no ext4: a tmpfs mounted for the run), or
#                     `here`: no file system of its own, MNT on the disk as it is (no root)
#   JUNK=0            create and delete this many files beside the lock directory
#   JUNK_WHEN=before  `before` the backlog add, or `after` it (right before the drain)
#   CYCLE=0           1: each claim is followed by `release KEY --done` (work done), as
#                     agents do; 0: claims only, every key stays held (the drain benchmarks)
#   FRESH=0           1: each claim by an agent never seen before, registering the
#                     script's shell as its process (`checkout --next --pid`)
#   MNT=/mnt/tasklock-fs-drain  where each file system is mounted (emptied, then removed)
set -euo pipefail

N=${N:-10000}
A=${A:-16}
FS=${FS:-nojournal}
JUNK=${JUNK:-0}
JUNK_WHEN=${JUNK_WHEN:-before}
MNT=${MNT:-/mnt/tasklock-fs-drain}

if [ $# -eq 0 ]; then
    # The comment above `set`, without its marks.
    sed -n '2,/^set /p' "$0" | sed -n 's/^# \{0,1\}//p'
    exit 2
fi
if [ "$FS" != here ] && [ "$(id -u)" != 0 ]; then
    echo "fs_drain: mounts a file system per run: run it as root" >&2
    exit 2
fi

img=$(mktemp /var/tmp/tasklock-fs-drain.XXXXXX)
cleanup() {
    [ "$FS" = here ] || umount "$MNT" 2>/dev/null || true
    rm -f "$img"
}
trap cleanup EXIT

# The junk sits beside the lock directory, in one directory below the top (as a project's
# build output does): ext4 spreads directories at the top over the disk, so junk there
# would leave the lock directory's part alone.
junk() {
    mkdir "$run/junk"
    (cd "$run/junk" && seq 1 "$JUNK" | xargs touch)
    rm -rf "$run/junk"
}

for bin in "$@"; do
    bin=$(realpath "$bin")
    [ "$FS" = here ] || umount "$MNT" 2>/dev/null || true
    mkdir -p "$MNT"
    case "$FS" in
    here) rm -rf "$MNT/project" ;;
    tmpfs) mount -t tmpfs -o size=4g tmpfs "$MNT" ;;
    journal | nojournal)
        rm -f "$img"
        truncate -s 4G "$img"
        if [ "$FS" = journal ]; then mkfs.ext4 -q -F "$img"; else mkfs.ext4 -q -F -O ^has_journal "$img"; fi
        mount -o loop "$img" "$MNT"
        ;;
    *)
        echo "fs_drain: FS=$FS: not journal, nojournal or tmpfs" >&2
        exit 2
        ;;
    esac
    run=$MNT/project
    mkdir "$run"
    export TASKLOCK_DIR=$run/.locks
    seq -f 'job-%06g' 0 $((N - 1)) >"$run/keys"
    "$bin" list --agent setup >/dev/null
    [ "$JUNK" -gt 0 ] && [ "$JUNK_WHEN" = before ] && junk
    t_add=$(date +%s.%N)
    "$bin" backlog add --file "$run/keys" --agent setup >/dev/null
    t_added=$(date +%s.%N)
    [ "$JUNK" -gt 0 ] && [ "$JUNK_WHEN" = after ] && junk
    t0=$(date +%s.%N)
    for i in $(seq 1 "$A"); do
        (
            c=0
            if [ "${CYCLE:-0}" = 1 ]; then
                while out=$("$bin" checkout --next --json --agent "drainer-$i" 2>/dev/null); do
                    key=${out#*\"key\":\"}
                    "$bin" release "${key%%\"*}" --done --agent "drainer-$i" >/dev/null
                    c=$((c + 1))
                done
            elif [ "${FRESH:-0}" = 1 ]; then
                while "$bin" checkout --next --agent "drainer-$i-$c" --pid "$$" >/dev/null 2>&1; do c=$((c + 1)); done
            else
                while "$bin" checkout --next --agent "drainer-$i" >/dev/null 2>&1; do c=$((c + 1)); done
            fi
            echo "$c" >"$run/claims.$i"
        ) &
    done
    wait
    t1=$(date +%s.%N)
    claims=$(cat "$run"/claims.* | paste -sd+ | bc)
    if [ "$claims" != "$N" ]; then
        echo "fs_drain: $bin claimed $claims keys of $N" >&2
        exit 1
    fi
    printf '%s  FS=%s JUNK=%s(%s) CYCLE=%s FRESH=%s  add %.2f s  drain %.1f s  %.0f claims/s\n' "$bin" "$FS" \
        "$JUNK" "$JUNK_WHEN" "${CYCLE:-0}" "${FRESH:-0}" "$(echo "$t_added - $t_add" | bc)" "$(echo "$t1 - $t0" | bc)" \
        "$(echo "$claims / ($t1 - $t0)" | bc -l)"
    if [ "$FS" = here ]; then rm -rf "$run"; else umount "$MNT"; fi
done
