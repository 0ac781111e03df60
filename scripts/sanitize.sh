#!/usr/bin/env bash
# `make sanitize`: the Swift tests that share state between threads (the loop thread, worker
# pool, batcher, scheduler, output pools, the loopback server and client, the fuzz seeds)
# under AddressSanitizer, then ThreadSanitizer, each in a build folder of its own
# (.build-asan, .build-tsan: a full rebuild each, several minutes). Suppressions, each with
# its reason: scripts/tsan.supp. SANITIZERS="thread" runs one; FILTER overrides the tests.
set -uo pipefail
cd "$(dirname "$0")/.."
sanitizers=${SANITIZERS:-"address thread"}
filter=${FILTER:-"CortadoServerTests|CortadoGRPCTests|CortadoLoadTests|CortadoFuzzTests|CortadoCoreTests"}
failed=0
for s in $sanitizers; do
    case $s in
        address) build=.build-asan; export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=0} ;;
        thread) build=.build-tsan; export TSAN_OPTIONS=${TSAN_OPTIONS:-"suppressions=$PWD/scripts/tsan.supp:halt_on_error=0:second_deadlock_stack=1"} ;;
        *) echo "unknown sanitizer $s"; exit 2 ;;
    esac
    mkdir -p "$build"; log=$build/sanitize.log
    echo "== swift test --sanitize=$s --filter '$filter' (log: $log)"
    swift test --build-path "$build" --sanitize="$s" --filter "$filter" >"$log" 2>&1
    status=$?
    reports=$(grep -c -E '^(==[0-9]+==ERROR: AddressSanitizer|WARNING: ThreadSanitizer)' "$log")
    grep -E '(Executed [0-9]+ tests|ThreadSanitizer: reported|SUMMARY: )' "$log" | tail -3
    echo "-- $s: exit status $status, $reports sanitizer reports"
    if [ "$status" -ne 0 ] || [ "$reports" -ne 0 ]; then failed=1; fi
done
exit $failed
