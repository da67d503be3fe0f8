#!/usr/bin/env bash
# The whole check on a GPU machine in one call (../shared/device/README.md): build, clattn-check,
# the test suite, clattn-bench, a short clattn-tune, each step under its own time limit so that a
# slow step cannot starve the later ones, logs in $OUT. Run from the project's root there:
#
#     bash .device/on-device.sh bash tools/device-check.sh
#
# Limits (seconds) from the environment: TEST_S, BENCH_S, TUNE_S (0 skips a step). The machine's
# time is scarce, so the order is by value: correctness (check, tests), then speed.
set -u
out=${OUT:-/tmp/device-out}
build=${BUILD:-/tmp/b}
mkdir -p "$out"
t0=$(date +%s)
elapsed() { echo $(($(date +%s) - t0)); }
# step NAME LIMIT CMD...: runs CMD under LIMIT seconds, its output in $out/NAME.log.
step() {
    local name=$1 lim=$2
    shift 2
    [ "$lim" -gt 0 ] || return 0
    echo "== $name: start at $(elapsed) s, limit $lim s"
    timeout -k 5 "$lim" "$@" >"$out/$name.log" 2>&1
    local rc=$?
    echo "== $name: rc $rc at $(elapsed) s"
    return $rc
}

{ nvidia-smi; nvidia-smi -q -d CLOCK; } >"$out/nvidia-smi.log" 2>&1
clinfo >"$out/clinfo.log" 2>&1
step setup 90 meson setup "$build" -Dbuildtype=release || { tail -40 "$out/setup.log"; exit 1; }
step build 180 ninja -C "$build" || { tail -40 "$out/build.log"; exit 1; }
step info 30 "$build/tools/clattn-info"
tail -30 "$out/info.log"
step check 120 "$build/tools/clattn-check"
grep '^|' "$out/check.log" | tail -12
step test "${TEST_S:-200}" meson test -C "$build" --num-processes 12 --print-errorlogs
grep -E '^ *[0-9]+/[0-9]+ .*(FAIL|TIMEOUT|ERROR)' "$out/test.log" | head -40
grep -E '^(Ok|Expected Fail|Fail|Unexpected Pass|Skipped|Timeout):' "$out/test.log"
cp "$build/meson-logs/testlog.txt" "$out/" 2>/dev/null
step bench "${BENCH_S:-150}" "$build/tools/clattn-bench" --sizes 1024,2048,4096,8192 \
    --attn-n 1024,2048,4096 --reps 10 --warmup 2 --max-time 3
grep '^|' "$out/bench.log"
step tune "${TUNE_S:-60}" "$build/tools/clattn-tune" --budget "$((${TUNE_S:-60} - 15))" \
    --out "$out/tune.txt"
tail -25 "$out/tune.log"
echo "== done at $(elapsed) s"
