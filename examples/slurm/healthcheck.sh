#!/usr/bin/env bash
# Node health check for Slurm (HealthCheckProgram, or an epilog/prolog): measure every GPU of this
# node at once with the quick suite and judge them with `peakbench fleet`. Exit status 0 when every
# GPU passes; otherwise the node is drained with the reason (when scontrol is there and we may) and
# the status is 1 (a GPU flagged or failed) or 2 (peakbench could not run).
#
#   PEAKBENCH      the peakbench command (default: peakbench on PATH)
#   PEAKBENCH_ARGS run options (default: --quick --tests compute.*,memory.*)
#   FLOOR          a floor file for `peakbench fleet --floor` (optional)
#   RESULTS        folder for the node's record and report (default: a temporary one)
#   DRAIN          0 to report without draining (default: 1)
set -uo pipefail

peakbench=${PEAKBENCH:-peakbench}
read -r -a run_args <<< "${PEAKBENCH_ARGS:---quick --tests compute.*,memory.*}"
node=$(hostname -s)
results=${RESULTS:-$(mktemp -d)}
record="$results/$node.json"
report="$results/$node-fleet.json"

"$peakbench" --device all "${run_args[@]}" --json "$record" > /dev/null
run_status=$?
if [[ ! -s "$record" ]]; then
    reason="peakbench wrote no result (status $run_status)"
    status=2
else
    floor_args=()
    [[ -n "${FLOOR:-}" ]] && floor_args=(--floor "$FLOOR")
    summary=$("$peakbench" fleet "${floor_args[@]}" --json "$report" "$record" | tail -n1)
    status=$?
    # The first flagged test's reason, from the report's JSON (reasons hold no double quote).
    reason=$(grep -m1 -o '"reason": "[^"]*"' "$report" | sed 's/^"reason": "//; s/"$//')
    reason=${reason:-$summary}
fi

if [[ $status -eq 0 ]]; then
    echo "$node: GPUs healthy"
    exit 0
fi
echo "$node: unhealthy: $reason" >&2
if [[ "${DRAIN:-1}" != 0 ]] && command -v scontrol > /dev/null; then
    scontrol update nodename="$node" state=drain reason="peakbench: ${reason:0:180}" \
        || echo "$node: could not drain (scontrol failed)" >&2
fi
exit "$status"
