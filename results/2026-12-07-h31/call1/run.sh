#!/usr/bin/env bash
# The fused gate/up product on the exact tensor-core kernel (`linear::gemm16_swiglu_tc`;
# KERNELS_LAB_SWIGLU_TC=0 runs `gemm16_swiglu` on the full core, same binaries) and two slices
# of register prefetch in the exact kernels (LAB G_PF2, KERNELS_GEMM_PF2=1), in priority order:
# tests on tensor cores (gemm_fused, gemm, the trainer's dispatch bound); the mixed step
# profiled base / sw alternating, twice; 300 steps with sw (losses: the same bits as the base's
# 1.3484 / 1.2640); the bench's exact products with and without PF2; the fused epilogues' bench;
# gemm's tests with PF2 and the step with both; 300 steps of the base.
# Prepare: COOP_CEILING_SRC=/nonexistent PACK_BENCHES="gemm" PACK_TESTS="gemm gemm_fused mixed dispatches" scripts/device/pack.sh
# Call: run(command="bash .dev/h30/run4.sh", carry=[".gl", ".dev/bins.tar.xz", ".dev/corpus.txt", ".dev/commit", ".dev/h30"])
set -uo pipefail
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json CI=true XDG_RUNTIME_DIR=/tmp
bins=$(mktemp -d)
tar xJf .dev/bins.tar.xz -C "$bins"
cp .dev/corpus.txt /tmp/corpus.txt
W=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$W/gpu.txt" 2>&1
cp .dev/commit "$W/commit.txt"; cp "$0" "$W/run.sh"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 100 > "$W/clocks.csv" 2>&1 &
stamp() { echo "$(date +%H:%M:%S.%3N) $*" >> "$W/phases.log"; }
save() { tar czf "$OUT/results.tar.gz" -C "$W" .; }
trap save EXIT
DEADLINE=${DEADLINE:-230}
left() { [ $((DEADLINE - SECONDS)) -gt "$1" ]; }
cd "$bins"
ttest() { local name=$1; shift
  timeout -k 5 60 "$@" > "$W/test-$name.log" 2>&1; echo "$name: exit $?" >> "$W/tests.log"
  grep -E "test result|FAILED|panicked" "$W/test-$name.log" | sort | uniq -c >> "$W/tests.log"; }
stamp tests
ttest gemm_fused tests/gemm_fused
ttest gemm tests/gemm
ttest dispatches tests/kernels-train.dispatches
save
P="--precision mixed --profile"
step() { grep -m1 "one step" "$1" | grep -oE "[0-9]+\.[0-9]+ ms" | head -1 | cut -d' ' -f1; }
run_as() { case $1 in base) echo "KERNELS_LAB_SWIGLU_TC=0 KERNELS_GEMM_PF2=0";; sw) echo "KERNELS_LAB_SWIGLU_TC=1 KERNELS_GEMM_PF2=0";; swpf2) echo "KERNELS_LAB_SWIGLU_TC=1 KERNELS_GEMM_PF2=1";; esac; }
prof() { stamp profile-$1-$2; env $(run_as $1) timeout -k 5 25 ./train --preset gpt2-small $P --checkpoint /tmp/ck/p.safetensors > "$W/profile-$1-$2.log" 2>&1
  echo "$1 $2 $(step "$W/profile-$1-$2.log")" >> "$W/steps.txt"; }
T="--precision mixed --log-every 50 --eval-every 100000 --sample-bytes 0 --data /tmp/corpus.txt --steps 300"
train() { stamp train-$1; env $(run_as $1) timeout -k 5 40 ./train --preset gpt2-small $T --checkpoint /tmp/ck/n$1.safetensors > "$W/train-$1.log" 2>&1; }
for rep in a b; do left 150 && prof base $rep; left 145 && prof sw $rep; done
save
left 130 && train sw
save
for v in 0 1; do left 100 && { stamp bench-$v; KERNELS_GEMM_PF2=$v KERNELS_BENCH_JSON="$W/gemm-$v.jsonl" timeout -k 5 30 ./gemm --configs "" > "$W/gemm-$v.log" 2>&1; }; done
left 75 && { stamp fused; KERNELS_BENCH_JSON="$W/fused.jsonl" timeout -k 5 25 ./gemm --fused > "$W/fused.log" 2>&1; }
save
left 55 && ttest gemm-pf2 env KERNELS_GEMM_PF2=1 tests/gemm
left 40 && prof swpf2 a
left 30 && train base
stamp end
save
cat "$W/gpu.txt" "$W/tests.log" "$W/steps.txt"
grep -hE "^\| nt" "$W"/gemm-0.log "$W"/gemm-1.log | cut -c1-110
grep -hE "^\|" "$W/fused.log" | cut -c1-160
grep -E "products  |gemm16_tc |gemm16_swiglu|gemm16_rope" "$W"/profile-*-a.log | cut -c1-150
grep -E "tokens/s|rror" "$W"/train-*.log | tail -4
