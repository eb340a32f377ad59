#!/bin/sh
# Runs the built fuzzers one after another, each for SECONDS, and prints one summary line per
# fuzzer: executions, executions per second, coverage (libFuzzer's cov and ft), and whether it
# found anything. Exits 1 when one did; its input is kept under OUT/<fuzzer>/.
#
#   Fuzz/run.sh SECONDS BIN_DIR OUT_DIR [FUZZER...]
#
# The repository's corpus (Fuzz/Corpus/<fuzzer>) and regressions (Fuzz/Regressions/<fuzzer>)
# are read as seeds only: libFuzzer writes what it discovers into OUT/<fuzzer>/corpus, the
# first corpus directory, so a run never changes the repository.
set -u
seconds=$1 bin=$2 out=$3
shift 3
[ $# -gt 0 ] || set -- request event stored-value projection-record sync-stream
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out/tmp"
failed=0
summary=""
for fuzzer in "$@"; do
    case $fuzzer in
        request) product=FuzzRequest max_len=4096 ;;
        event) product=FuzzEvent max_len=2048 ;;
        stored-value) product=FuzzStoredValue max_len=2048 ;;
        projection-record) product=FuzzProjectionRecord max_len=4096 ;;
        sync-stream) product=FuzzSyncStream max_len=8192 ;;
        *) echo "no fuzzer \"$fuzzer\" (request, event, stored-value, projection-record, sync-stream)" >&2; exit 64 ;;
    esac
    dir="$out/$fuzzer"
    mkdir -p "$dir/corpus"
    rm -f "$dir"/crash-* "$dir"/leak-* "$dir"/timeout-* "$dir"/oom-* "$dir"/slow-unit-*
    seeds="$here/Corpus/$fuzzer"
    [ -d "$here/Regressions/$fuzzer" ] && seeds="$seeds $here/Regressions/$fuzzer"
    echo "fuzz $fuzzer: $seconds s, log in $dir/fuzz.log"
    # Leaks are reported: a leak in our code is a finding like a crash.
    # shellcheck disable=SC2086
    TMPDIR="$out/tmp" ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}" \
        "$bin/$product" -max_total_time="$seconds" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
        -dict="$here/json.dict" -artifact_prefix="$dir/" -print_final_stats=1 \
        "$dir/corpus" $seeds >"$dir/fuzz.log" 2>&1
    status=$?
    runs=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\1/p' "$dir/fuzz.log" | tail -1)
    took=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\2/p' "$dir/fuzz.log" | tail -1)
    stats=$(grep -o 'cov: [0-9]* ft: [0-9]* corp: [0-9]*' "$dir/fuzz.log" | tail -1)
    found=$(ls "$dir" | grep -E '^(crash|leak|timeout|oom)-' | head -1)
    if [ -n "$runs" ] && [ "${took:-0}" -gt 0 ]; then rate=$((runs / took)); else rate="?"; fi
    if [ $status -eq 0 ] && [ -z "$found" ]; then
        result="nothing found"
    else
        result="FOUND (exit $status) ${found:+$dir/$found}"
        failed=1
    fi
    line="fuzz $fuzzer: ${runs:-?} runs in ${took:-?} s (${rate} exec/s), ${stats:-no coverage line}: $result"
    echo "$line"
    summary="$summary$line
"
done
echo
echo "summary:"
printf '%s' "$summary"
exit $failed
