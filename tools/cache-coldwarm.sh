#!/bin/sh
# Cold vs warm first ops in new processes, with clattn's program cache (CLATTN_CACHE_DIR).
# usage: tools/cache-coldwarm.sh [BUILD_DIR] [RUNS]
# PoCL keeps its own compiled-kernel cache; it is turned off (POCL_KERNEL_CACHE=0) for the clattn
# cache rows so that they show clattn's cache alone, and a last row shows PoCL's cache alone.
build=${1:-build}
runs=${2:-3}
tool=$build/tools/clattn-firstop
dir=$(mktemp -d "${TMPDIR:-/tmp}/clattn-coldwarm.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
i=0
while [ "$i" -lt "$runs" ]; do
    rm -rf "$dir/cache"
    printf 'cold, clattn cache empty:   '
    POCL_KERNEL_CACHE=0 "$tool" "$dir/cache" || exit 1
    printf 'warm, clattn cache filled:  '
    POCL_KERNEL_CACHE=0 "$tool" "$dir/cache" || exit 1
    i=$((i + 1))
done
printf 'no clattn cache, PoCL cache warm: '
"$tool" >/dev/null && "$tool"
