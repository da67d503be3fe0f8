#!/bin/sh
# Offline compile check (meson suite `portability`): builds every (kernel file, build options) pair
# that clattn can build, as listed by tools/clattn-kernels, for one target without its hardware.
#
# usage: compile.sh TARGET CLATTN_KERNELS KERNEL_DIR [--tune OVERRIDES]...
#   strict        OpenCL C 1.2 front end with every extension off, -Wall -Wextra -pedantic -Werror
#                 (less unused parameters and helpers: kernels share argument lists and common.cl),
#                 for GPU, CPU and other device types
#   amd-gfxN      clang -target amdgcn-amd-amdhsa -mcpu=gfxN, linked with libclc's builtins into a
#                 code object (so a helper that is called but never defined fails, as on a driver)
#   nvidia-sm_90  clang -target nvptx64-nvidia-nvcl to PTX (libclc's builtins linked in), then the
#                 CUDA toolkit's ptxas -arch=sm_90 (which also enforces the 48 KiB of __local)
#   intel-DEV     ocloc compile -device DEV (tgllp, dg2)
# The --tune strings add the option sets the tests force (tests/meson.build's variants).
#
# Exits 77 (meson's "skipped") with the reason when the target's tool is missing, except with
# CLATTN_PORTABILITY_REQUIRE=1 (set by .ci/run, which installs the tools), where that fails.
# Tools: CLATTN_CLANG (default: the newest clang-15 or later), CLATTN_PTXAS, CLATTN_LIBCLC (the
# directory of libclc's bitcode, default /usr/lib/clc).
target=$1
lister=$2
kdir=$3
shift 3

missing() {
    if [ "${CLATTN_PORTABILITY_REQUIRE:-0}" = 1 ]; then
        echo "portability $target: FAILED: $1 (CLATTN_PORTABILITY_REQUIRE=1)" >&2
        exit 1
    fi
    echo "portability $target: SKIPPED: $1" >&2
    exit 77
}

find_clang() {
    [ -n "${CLATTN_CLANG:-}" ] && { echo "$CLATTN_CLANG"; return; }
    for v in 19 18 17 16 15; do
        command -v "clang-$v" >/dev/null 2>&1 && { echo "clang-$v"; return; }
    done
    # gfx1100 and OpenCL builtin declarations need clang 15 or later
    major=$(clang -dumpversion 2>/dev/null | cut -d. -f1)
    [ -n "$major" ] && [ "$major" -ge 15 ] && echo clang
}

find_ptxas() {
    for p in "${CLATTN_PTXAS:-}" "$(command -v ptxas 2>/dev/null)" /usr/local/cuda/bin/ptxas \
             /usr/lib/nvidia-cuda-toolkit/bin/ptxas; do
        [ -n "$p" ] && [ -x "$p" ] && { echo "$p"; return; }
    done
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/clattn-portability.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

case $target in
strict | amd-* | nvidia-*)
    clang=$(find_clang)
    [ -n "$clang" ] || missing "no clang 15 or later (apt-get install clang-15)"
    ;;
esac
case $target in
strict)
    types="gpu cpu other"
    ;;
amd-gfx*)
    types=gpu
    libclc=${CLATTN_LIBCLC:-/usr/lib/clc}/amdgcn--amdhsa.bc
    [ -f "$libclc" ] || missing "no libclc bitcode $libclc (apt-get install libclc-15)"
    ;;
nvidia-sm_*)
    types=gpu
    ptxas=$(find_ptxas)
    [ -n "$ptxas" ] || missing "no ptxas (CUDA toolkit; Debian: nvidia-cuda-toolkit from non-free)"
    libclc=${CLATTN_LIBCLC:-/usr/lib/clc}/nvptx64--nvidiacl.bc
    [ -f "$libclc" ] || missing "no libclc bitcode $libclc (apt-get install libclc-15)"
    ;;
intel-*)
    types=gpu
    command -v ocloc >/dev/null 2>&1 || missing "no ocloc (apt-get install intel-opencl-icd)"
    ;;
*)
    echo "compile.sh: unknown target $target" >&2
    exit 2
    ;;
esac

# One compile: $1 = kernel file, $2 = build options, $3 = output stem. Prints the tool's output on
# failure and returns non-zero.
compile_one() {
    file=$kdir/$1
    out=$tmp/$3
    case $target in
    strict)
        # without the library's -w (which keeps PoCL's compiler warnings off the application's
        # stderr), or -Werror would hold nothing
        opts=$(printf '%s\n' "$2" | sed 's/\(^\| \)-w\( \|$\)/\1/')
        # shellcheck disable=SC2086 # options are a word list
        "$clang" -x cl -target spir -Xclang -finclude-default-header -Xclang -cl-ext=-all \
            -fsyntax-only -Wall -Wextra -Wno-unused-parameter -Wno-unused-function -pedantic -Werror \
            -I "$kdir" $opts "$file" >"$out.log" 2>&1
        ;;
    amd-*)
        # libclc 15 has no half conversions (convert_float(half) and the like; ROCm's device
        # libraries do): the CLATTN_FP16 sets stop at an object file, unlinked
        opts=$2
        set -- -o "$out.co"
        case $opts in *CLATTN_FP16=1*) set -- -c -o "$out.o" ;; esac
        # shellcheck disable=SC2086
        "$clang" -x cl -target amdgcn-amd-amdhsa -nogpulib -mcpu="${target#amd-}" \
            -Xclang -mlink-builtin-bitcode -Xclang "$libclc" -Wno-linker-warnings -I "$kdir" \
            $opts "$file" "$@" >"$out.log" 2>&1
        ;;
    nvidia-*)
        # shellcheck disable=SC2086
        "$clang" -x cl -target nvptx64-nvidia-nvcl -O2 -Xclang -mlink-builtin-bitcode \
            -Xclang "$libclc" -Wno-linker-warnings -I "$kdir" $2 -S "$file" -o "$out.ptx" \
            >"$out.log" 2>&1 &&
            "$ptxas" -arch="${target#nvidia-}" "$out.ptx" -o "$out.cubin" >>"$out.log" 2>&1
        ;;
    intel-*)
        ocloc compile -file "$file" -device "${target#intel-}" -options "$2 -I $kdir" \
            -out_dir "$out.d" >"$out.log" 2>&1
        ;;
    esac
    rc=$?
    [ "$rc" -eq 0 ] || cat "$out.log"
    return "$rc"
}

n=0
failed=0
for type in $types; do
    # every kernel file with its own defaults, then the table's and the tests' option sets
    files=$(cd "$kdir" && ls -- *.cl)
    # shellcheck disable=SC2086
    "$lister" --type "$type" "$@" $files >"$tmp/list" || {
        echo "portability $target: clattn-kernels failed" >&2
        exit 1
    }
    while IFS="$(printf '\t')" read -r file options; do
        # cl_khr_fp16's conversions (the half tuning): built only where the device has the
        # extension; NVIDIA's OpenCL has not, and strict enables it for these alone
        case $options in
        *CLATTN_FP16=1*)
            case $target in
            nvidia-*) continue ;;
            strict) options="-Xclang -cl-ext=+cl_khr_fp16 $options" ;;
            esac
            ;;
        esac
        n=$((n + 1))
        if compile_one "$file" "$options" "k$n"; then
            echo "ok   $target  $file  $options"
        else
            echo "FAIL $target  $file  $options"
            failed=$((failed + 1))
        fi
    done <"$tmp/list"
done
echo "portability $target: $((n - failed)) of $n kernel builds compiled"
[ "$failed" -eq 0 ]
