#!/usr/bin/env bash
# Runs peakbench on a lent GPU machine with no network, set up by scripts/lent-machine.sh (the
# Vulkan loader and the wheels carried in .gl/ and .whl/): the given peakbench arguments, keeping
# JSON, Markdown, charts and logs under $OUT
# (--plot needs matplotlib, which the lent machine's image has; carry it as a wheel elsewhere).
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
. scripts/lent-machine.sh
export PYTHONPATH=/tmp/site:$PWD PEAKBENCH_CACHE=/tmp/peakbench-cache
export PEAKBENCH_DUMP_DIR=/tmp/peakbench-ir
nvidia-smi --query-gpu=name,pci.device_id,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu,clocks_event_reasons.active --format=csv > "$OUT/smi_before.csv" 2>&1
python3 -m peakbench --list-devices 2>&1 | tee "$OUT/devices.txt"
start=$(date +%s)
python3 -m peakbench --json "$OUT/result.json" --markdown "$OUT/result.md" --plot "$OUT" "$@" 2> >(tee "$OUT/progress.txt" >&2)
rc=$?
echo "peakbench exit $rc, $(( $(date +%s) - start )) s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu,clocks_event_reasons.active --format=csv > "$OUT/smi_after.csv" 2>&1
cat "$OUT/smi_before.csv" "$OUT/smi_after.csv"
if [ -d /tmp/peakbench-ir ]; then tar czf "$OUT/internal-representations.tgz" -C /tmp peakbench-ir; fi
exit $rc
