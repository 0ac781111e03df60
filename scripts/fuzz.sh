#!/usr/bin/env bash
# `make fuzz SECONDS=N`: builds cortado-fuzz with libFuzzer and AddressSanitizer (its own
# build folder, .build-fuzz), then runs each target for N seconds (default 30) from its seed
# corpus (fuzz/corpus/<target>) and the inputs that once crashed it (fuzz/regressions/<target>).
# New coverage goes to .build-fuzz/corpus/<target>, crashes to .build-fuzz/crashes/. Prints
# the executions per target; exits non-zero when any target crashed.
# TARGETS="http2 json" narrows the run; extra libFuzzer flags go in FUZZ_FLAGS.
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
targets=${TARGETS:-"model-loader infer-decoder http2 feature-json"}
build=.build-fuzz
# One combined -sanitize for Swift: given `--sanitize=fuzzer --sanitize=address`, SwiftPM passes
# two -sanitize= flags in no fixed order and swift-frontend keeps the last, so a build had
# either coverage or AddressSanitizer (and rebuilt everything when the order changed).
swift build --build-path "$build" --sanitize=fuzzer -Xswiftc -sanitize=fuzzer,address -Xcc -fsanitize=address \
    -Xswiftc -DCORTADO_LIBFUZZER --product cortado-fuzz || exit 1
mkdir -p "$build/crashes" "$build/logs"
failed=0
summary=""
for target in $targets; do
    mkdir -p "$build/corpus/$target" "fuzz/regressions/$target"
    log="$build/logs/$target.log"
    # The Swift backtracer would take the crash signal before libFuzzer writes the input.
    CORTADO_FUZZ_TARGET=$target SWIFT_BACKTRACE=enable=no ASAN_OPTIONS=detect_leaks=0 \
        "$build/debug/cortado-fuzz" -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=16384 -timeout=20 \
        -print_final_stats=1 -artifact_prefix="$build/crashes/$target-" ${FUZZ_FLAGS:-} \
        "$build/corpus/$target" "fuzz/corpus/$target" "fuzz/regressions/$target" >"$log" 2>&1
    status=$?
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
    if [ "$status" -ne 0 ]; then
        failed=1
        summary+=$(printf '%-14s CRASHED after %s executions (%s): see %s and %s\n' "$target" "${runs:-?}" "${cov:-?}" "$log" "$build/crashes/")$'\n'
    else
        summary+=$(printf '%-14s %s executions in %ss, %s, no crash\n' "$target" "${runs:-?}" "$seconds" "${cov:-?}")$'\n'
    fi
done
printf '%s' "$summary"
exit $failed
