#!/usr/bin/env bash
# The performance issue's table on one board in one call (PERFORMANCE_ANALYSIS.md, thirteenth round):
# cold and warm --quick per backend from this checkout and from the installed wheel (WHEEL, a
# folder holding peakbench's wheel; default dist/), the peer bundle (.peers/, a copy of
# ../shared/peers), CUDA's GEMM tests in a process of their own (as torch-peaks runs its products),
# then the default suite of both backends in one process from an empty cache, in
# what time is left of LIMIT seconds (default 585). Each run's JSON, output and log, the peers'
# files and the wall times go to /tmp/r, packed into $OUT/table.tgz after each step. Needs what
# scripts/gpu-run.sh needs (.gl/ and .whl/ carried). Bytecode as a user has it: the wheel is
# compiled when installed (pip's default) and the checkout writes its __pycache__ on its first
# (cold) run, which the warm runs then read.
set -u
OUT=${OUT:-/tmp/out}; R=/tmp/r; mkdir -p "$OUT" $R
T0=$(date +%s)
. scripts/lent-machine.sh
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/wsite "${WHEEL:-dist}"/*.whl || exit 1
nvidia-smi --query-gpu=name,uuid,driver_version,power.limit,clocks.max.sm,temperature.gpu --format=csv,noheader | tee $R/board.txt
pack() { tar czf "$OUT/table.tgz" -C /tmp r; }
# t LABEL CACHE DIR args...: one peakbench process, wall time in ms
t() {
    local label=$1 c=$2 dir=$3; shift 3
    local s=$(date +%s%N)
    (cd $dir && PEAKBENCH_CACHE=/tmp/cache-$c CUPY_CACHE_DIR=/tmp/cupy-$c python3 -P -m peakbench "$@" \
        --json $R/$label.json > $R/$label.txt 2> $R/$label.log)
    local rc=$? e=$(date +%s%N)
    echo "$label rc=$rc $(( (e - s) / 1000000 )) ms (at $(( $(date +%s) - T0 )) s)" | tee -a $R/times.txt
    pack
}
TREE=$PWD
export PYTHONPATH=/tmp/site:$TREE
t cuda-cold cuda $TREE --backend cuda --quick
t vulkan-cold vk $TREE --backend vulkan --quick
t cuda-warm cuda $TREE --backend cuda --quick
t vulkan-warm vk $TREE --backend vulkan --quick
export PYTHONPATH=/tmp/site:/tmp/wsite
t wheel-cuda-cold wcuda /tmp --backend cuda --quick
t wheel-vulkan-cold wvk /tmp --backend vulkan --quick
export PYTHONPATH=/tmp/site:$TREE
s=$(date +%s); OUT=$R PEERS_DEADLINE=${PEERS_DEADLINE:-240} bash .peers/run.sh > $R/peers.txt 2>&1
echo "peers $(( $(date +%s) - s )) s (at $(( $(date +%s) - T0 )) s)" | tee -a $R/times.txt; pack
t cuda-gemm cuda $TREE --backend cuda --tests 'gemm.*'
left=$(( ${LIMIT:-585} - ($(date +%s) - T0) ))
echo "default suite: $left s left" | tee -a $R/times.txt
timeout $left bash -c "$(declare -f t pack); T0=$T0 R=$R OUT=$OUT; t default-both all $TREE --backend vulkan,cuda --markdown $R/default-both.md"
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv,noheader >> $R/board.txt
pack; cat $R/times.txt; tail -25 $R/peers.txt
