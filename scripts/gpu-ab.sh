#!/usr/bin/env bash
# Before/after on one lent GPU, in one call: the default suite of each backend from a BEFORE tree
# (a `git archive` of peakbench/ and shaders/ at the older commit, carried in an ignored folder)
# and from this checkout, interleaved per backend so both see the same board and clocks.
#   scripts/gpu-ab.sh .before vulkan,cuda [peakbench options...]
# Needs what scripts/gpu-run.sh needs (.gl/ and .whl/ carried). JSON per run under $OUT.
set -u
before=$1 backends=$2
shift 2
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
. scripts/lent-machine.sh
export PEAKBENCH_CACHE=/tmp/peakbench-cache
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
rc=0
for backend in ${backends//,/ }; do
    for side in before after; do
        tree=$PWD
        [ "$side" = before ] && tree=$(cd "$before" && pwd)
        start=$(date +%s)
        # -P: `python -m` would put the working directory (the checkout) first on sys.path, and
        # both sides would import the checkout's peakbench whatever PYTHONPATH says.
        PYTHONPATH=/tmp/site:$tree python3 -P -m peakbench --backend "$backend" --json "$OUT/$side-$backend.json" "$@" \
            > "$OUT/$side-$backend.txt" 2> "$OUT/$side-$backend.log"
        status=$?
        [ $status -eq 0 ] || rc=1
        echo "$side $backend: exit $status, $(( $(date +%s) - start )) s"
    done
done
for backend in ${backends//,/ }; do
    PYTHONPATH=/tmp/site:$PWD python3 -m peakbench compare "$OUT/before-$backend.json" "$OUT/after-$backend.json"
done
# The tool that fetches $OUT takes a few files: keep the JSON, pack the tables and logs.
(cd "$OUT" && tar czf ab-logs.tgz ./*-*.txt ./*-*.log && rm -f ./*-*.txt ./*-*.log)
exit $rc
