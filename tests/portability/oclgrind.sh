#!/bin/sh
# Test wrapper of `meson test --setup oclgrind`: runs one test program on Oclgrind's simulated device
# with --data-races --uninitialized --check-api, and fails when Oclgrind reports anything, even if
# the program itself passed.
#
# usage: oclgrind.sh KEEP_BUFFERS_SO PROGRAM [ARGS...]
#
# Two workarounds for Oclgrind 21.10 (Debian 12) bugs, neither of which hides a report class:
# - -cl-opt-disable: its uninitialized-value checker aborts on LLVM 14's `freeze` instruction,
#   which the optimizer emits; unoptimized IR keeps every access the source makes.
# - KEEP_BUFFERS_SO (oclgrind_keep.c) is preloaded ahead of Oclgrind's runtime, so buffer ids are
#   never reused (a reused id keeps a stale shadow size; see oclgrind_shadow_repro.c). The
#   `oclgrind` launcher would put its runtime first, so this script sets the same variables itself.
keep=$1
shift
[ -f "$keep" ] || {
    echo "oclgrind.sh: $keep is missing (build it: ninja -C build)" >&2
    exit 1
}
command -v oclgrind >/dev/null 2>&1 || {
    echo "oclgrind: not installed (apt-get install oclgrind)" >&2
    exit 77
}
rt=$(oclgrind sh -c 'printf %s "$LD_PRELOAD"') # the runtime library the launcher preloads
log=$(mktemp "${TMPDIR:-/tmp}/clattn-oclgrind.XXXXXX") || exit 1
trap 'rm -f "$log"' EXIT
LD_PRELOAD="$keep:$rt" OCLGRIND_DATA_RACES=1 OCLGRIND_UNINITIALIZED=1 OCLGRIND_CHECK_API=1 \
    OCLGRIND_BUILD_OPTIONS=-cl-opt-disable OCLGRIND_LOG="$log" "$@"
rc=$?
if [ -s "$log" ]; then
    echo "oclgrind: $(grep -c '^[A-Za-z]' "$log") report(s), the first ones:" >&2
    head -c 20000 "$log" >&2
    [ "$rc" -eq 0 ] && rc=1
fi
exit "$rc"
