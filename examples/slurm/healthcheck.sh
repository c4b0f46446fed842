#!/usr/bin/env bash
# Node health check for Slurm (HealthCheckProgram, or an epilog/prolog): measure every GPU of this
# node at once and judge them with `peakbench fleet`. The profile fits the hook:
#   a job prolog (the default)  seconds: --profile prolog
#   an epilog or a health check a minute of load that shows throttling and instability:
#                               --profile burn-in --duration 60 --tests compute.*,matrix.*,memory.*
#   accepting a new node        the full suite: --profile default
#
# Exit status and what happens to the node:
#   0  every GPU passed                                              the node stays
#   1  a GPU is bad: flagged, failed, or its run did not finish      drained with the reason
#      (killed, interrupted, or no record at all)
#   2  peakbench itself is missing or broken, or its options are     not drained (a broken install
#      wrong: nothing is known about the GPUs                        would drain the whole cluster),
#                                                                    unless DRAIN_ON_ERROR=1
#
#   PEAKBENCH       the peakbench command (default: peakbench on PATH)
#   PEAKBENCH_ARGS  run options (default: --profile prolog --tests compute.*,memory.*)
#   FLOOR           a floor file for `peakbench fleet --floor` (optional)
#   RESULTS         folder to keep the node's record and report in (default: a temporary one,
#                   removed on exit)
#   DRAIN           0 to report without draining (default: 1)
#   DRAIN_ON_ERROR  1 to drain on status 2 too (default: 0)
set -uo pipefail

peakbench=${PEAKBENCH:-peakbench}
read -r -a run_args <<< "${PEAKBENCH_ARGS:---profile prolog --tests compute.*,memory.*}"
node=${SLURMD_NODENAME:-$(hostname -s)}    # the name Slurm knows the node by

if [[ -n "${RESULTS:-}" ]]; then
    results=$RESULTS
else
    results=$(mktemp -d -t peakbench-health.XXXXXX) || { echo "$node: cannot make a temporary folder" >&2; exit 2; }
    trap 'rm -rf -- "$results"' EXIT
fi
record="$results/$node.json"
report="$results/$node-fleet.json"
log="$results/$node.log"

finish() {    # finish STATUS REASON
    local status=$1 reason=$2
    if [[ $status -eq 0 ]]; then
        echo "$node: GPUs healthy"
        exit 0
    fi
    echo "$node: unhealthy: $reason" >&2
    local drain=${DRAIN:-1}
    [[ $status -eq 2 && "${DRAIN_ON_ERROR:-0}" != 1 ]] && drain=0
    if [[ "$drain" != 0 ]] && command -v scontrol > /dev/null; then
        scontrol update nodename="$node" state=drain reason="peakbench: ${reason:0:180}" \
            || echo "$node: could not drain (scontrol failed)" >&2
    fi
    exit "$status"
}

last_line() { [[ -s "$1" ]] && grep -v '^[[:space:]]*$' "$1" | tail -n1; }

if ! command -v "$peakbench" > /dev/null; then
    finish 2 "peakbench missing: '$peakbench' is not on PATH"
fi
if ! version=$("$peakbench" --version 2> "$log"); then
    finish 2 "peakbench broken: '$peakbench --version' failed: $(last_line "$log")"
fi

rm -f -- "$record" "$report"
"$peakbench" --device all "${run_args[@]}" --json "$record" > /dev/null 2> "$log"
run_status=$?
if [[ ! -s "$record" ]]; then
    why="${version} wrote no result (status $run_status): $(last_line "$log")"
    # Status 2 with no record: the options were refused, or nothing could run at all.
    [[ $run_status -eq 2 ]] && finish 2 "peakbench could not run: $why"
    finish 1 "$why"
fi

floor_args=()
[[ -n "${FLOOR:-}" ]] && floor_args=(--floor "$FLOOR")
"$peakbench" fleet "${floor_args[@]}" --json "$report" "$record" > "$results/$node-fleet.txt" 2>> "$log"
status=$?
if [[ $status -eq 2 ]]; then
    finish 2 "peakbench fleet could not judge the record: $(last_line "$log")"
fi
# The first flagged test's reason, from the report's JSON (reasons hold no double quote).
reason=$(grep -m1 -o '"reason": "[^"]*"' "$report" 2> /dev/null | sed 's/^"reason": "//; s/"$//')
if [[ $run_status -ne 0 ]]; then     # a record the fleet passes, from a run that did not end well
    status=1
    reason="peakbench ended with status $run_status: $(last_line "$log")${reason:+; $reason}"
fi
finish "$status" "${reason:-$(last_line "$results/$node-fleet.txt")}"
