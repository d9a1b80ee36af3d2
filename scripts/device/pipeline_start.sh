#!/usr/bin/env bash
# Cold and warm start of the trainer's pipelines: the trainer (`train`, the example binary
# scripts/device/pack.sh packs, or target/release/train) runs one profiled step, which builds every
# library pipeline (warm-up: the "pipelines: N built in S s" line) and the shape-specialised
# products of the step; the whole run is timed too. Four cases, RUNS times each:
#   cold     no pipeline cache of ours (a fresh directory), the driver's own cache off
#   ours     our cache warm (the directory the cold runs filled), the driver's cache off
#   driver   ours off (KERNELS_PIPELINE_CACHE=0), the driver's cache warm (NVIDIA: its
#            shader disk cache in a directory of its own, filled by one run first)
#   both     both warm
# The driver's cache is NVIDIA's (__GL_SHADER_DISK_CACHE*); other drivers ignore those
# variables, and Mesa has its own (MESA_SHADER_CACHE_DIR, set the same way).
#
#   scripts/device/pipeline_start.sh [TRAIN] [ARGS...]
#   default TRAIN: ./train if present, else target/release/train; default ARGS: the gpt2-small
#   preset in mixed precision (`--preset gpt2-small --precision mixed`). RUNS (default 3).
set -uo pipefail
train=${1:-}
[ $# -gt 0 ] && shift
if [ -z "$train" ]; then
    if [ -x ./train ]; then train=./train; else train=target/release/train; fi
fi
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--preset gpt2-small --precision mixed)
runs=${RUNS:-3}
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
work=$(mktemp -d)
ours="$work/ours"
driver="$work/driver"

# One run: prints "warm-up seconds, wall seconds, pipelines built".
one() {
    local log="$work/log" start end
    start=$(date +%s.%N)
    "$@" "$train" "${args[@]}" --profile --checkpoint "$work/ck.safetensors" > "$log" 2>&1
    local code=$?
    end=$(date +%s.%N)
    if [ $code -ne 0 ]; then
        echo "pipeline_start.sh: the trainer failed (exit $code):" >&2
        tail -20 "$log" >&2
        exit 1
    fi
    local line
    line=$(grep -m1 '^pipelines:' "$log")
    # "pipelines: 72 built in 3.30 s"
    local built seconds
    built=$(awk '{ print $2 }' <<< "$line")
    seconds=$(awk '{ print $5 }' <<< "$line")
    echo "$seconds $(echo "$end - $start" | bc -l) $built"
}

driver_off=(env __GL_SHADER_DISK_CACHE=0 MESA_SHADER_CACHE_DISABLE=true)
driver_on=(env __GL_SHADER_DISK_CACHE=1 __GL_SHADER_DISK_CACHE_PATH="$driver" __GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1
    MESA_SHADER_CACHE_DIR="$driver")

echo "trainer: $train ${args[*]}; $runs runs per case"
"$train" --version 2>/dev/null | head -1
table=()
measure() {
    local name=$1
    shift
    local i out
    for i in $(seq "$runs"); do
        [ "$name" = cold ] && rm -rf "$ours"
        out=$(one "$@")
        table+=("$name $out")
        echo "$name run $i: warm-up $(awk '{ printf "%.2f", $1 }' <<< "$out") s, whole run $(awk '{ printf "%.2f", $2 }' <<< "$out") s ($(awk '{ print $3 }' <<< "$out") pipelines)"
    done
}
measure cold "${driver_off[@]}" KERNELS_CACHE_DIR="$ours"
ls -l "$ours"
measure ours "${driver_off[@]}" KERNELS_CACHE_DIR="$ours"
# Fill the driver's cache once, then measure it alone and with ours.
one "${driver_on[@]}" KERNELS_PIPELINE_CACHE=0 > /dev/null
measure driver "${driver_on[@]}" KERNELS_PIPELINE_CACHE=0
measure both "${driver_on[@]}" KERNELS_CACHE_DIR="$ours"
du -sh "$ours" "$driver" 2>/dev/null

echo
echo "| case | warm-up (median) | whole run (median) |"
echo "|---|---|---|"
median() { sort -g | awk '{ v[NR] = $1 } END { printf "%.2f", v[int((NR + 1) / 2)] }'; }
for name in cold ours driver both; do
    rows=$(printf '%s\n' "${table[@]}" | awk -v n="$name" '$1 == n')
    echo "| $name | $(awk '{ print $2 }' <<< "$rows" | median) s | $(awk '{ print $3 }' <<< "$rows" | median) s |"
done
rm -rf "$work"
