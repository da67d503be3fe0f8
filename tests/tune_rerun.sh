#!/bin/sh
# A second clattn-tune run over its own file (meson test `tune-rerun`): the "table" it measures
# against must still be the tuning table's choice, not the file's entry for the op (an entry that
# is still the best would otherwise be taken for the table's and dropped from the new file). The
# file is named by CLATTN_TUNE_FILE, as a user's default file is found, so that clattn-tune's
# context would read it.
#
# usage: tune_rerun.sh CLATTN_TUNE OUT_DIR
tune=$1
dir=$2
file=$dir/tune.txt
mkdir -p "$dir" && rm -f "$file" || exit 1
CLATTN_TUNE_FILE=$file
export CLATTN_TUNE_FILE
table_line() { grep '^softmax (' "$1" | sed 's/.*, table: //'; }

"$tune" --quick --ops softmax --budget 4 >"$dir/run1.log" 2>&1 || {
    cat "$dir/run1.log"
    exit 1
}
first=$(table_line "$dir/run1.log")
[ -n "$first" ] || { echo "tune_rerun: no table line in the first run"; cat "$dir/run1.log"; exit 1; }
# an entry the table does not choose, as if an earlier run had kept it
case $first in
*VW=16*) other=$(printf '%s\n' "$first" | sed 's/VW=16/VW=8/') ;;
*VW=8*) other=$(printf '%s\n' "$first" | sed 's/VW=8/VW=16/') ;;
*WG=64:*) other=$(printf '%s\n' "$first" | sed 's/WG=64:/WG=32:/') ;;
*WG=*) other=$(printf '%s\n' "$first" | sed 's/WG=[0-9]*/WG=64/') ;;
*) echo "tune_rerun: SKIPPED: the table's softmax choice '$first' has no VW or WG"; exit 77 ;;
esac
grep -v '^softmax=' "$file" >"$file.new" && printf '%s\n' "$other" >>"$file.new" &&
    mv "$file.new" "$file" || exit 1
"$tune" --quick --ops softmax --budget 4 >"$dir/run2.log" 2>&1 || {
    cat "$dir/run2.log"
    exit 1
}
second=$(table_line "$dir/run2.log")
if [ "$second" != "$first" ]; then
    echo "tune_rerun: FAILED: the second run's table is '$second', the table's choice '$first'"
    echo "(the file held '$other')"
    exit 1
fi
echo "tune_rerun: both runs measured against the table's choice $first"
