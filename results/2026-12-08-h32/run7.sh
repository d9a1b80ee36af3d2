#!/usr/bin/env bash
# The fused gate/up product on the exact kernel with its base row and skip as arithmetic
# overrides (G_GU_SHIFT, G_GU_SKIP); KERNELS_LAB_SWIGLU_TC=0 runs `gemm16_swiglu` on the full
# core (same binaries). Register counts of the old (select on G_GU) and new builds; tests on
# tensor cores; the fused bench; profiles base / sw alternating; 300 steps each way (losses:
# 1.3484 / 1.2640 both).
# Also RMSNorm's backward held in registers (memory bench, new against memory-old, alternating).
# Call: run(command="bash .dev/h32/run7.sh", carry=[".gl", ".dev/bins.tar.xz", ".dev/corpus.txt", ".dev/commit", ".dev/h32"])
set -uo pipefail
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json CI=true XDG_RUNTIME_DIR=/tmp
bins=$(mktemp -d)
tar xJf .dev/bins.tar.xz -C "$bins"
xz -dc .dev/h32/memory-old.xz > "$bins/memory-old"; chmod +x "$bins/memory-old"
cp .dev/corpus.txt /tmp/corpus.txt
W=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$W/gpu.txt" 2>&1
cp .dev/commit "$W/commit.txt"; cp "$0" "$W/run.sh"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 100 > "$W/clocks.csv" 2>&1 &
stamp() { echo "$(date +%H:%M:%S.%3N) $*" >> "$W/phases.log"; }
save() { tar czf "$OUT/results.tar.gz" -C "$W" .; }
trap save EXIT
DEADLINE=${DEADLINE:-330}
left() { [ $((DEADLINE - SECONDS)) -gt "$1" ]; }
cd "$bins"
stamp stats
O="A_T=0,B_T=1,G_BM=128,G_BN=256,G_BK=32,G_TM=4,G_TN=4,G_PF=1,G_GROUP=8,G_WG=256,M_C=8192,N_C=4096,K_C=768,G_PARTS=1,G_CHUNK=768"
for v in "linear::gemm16_swiglu_tc ,G_GU_SHIFT=1,G_GU_SKIP=1920" "linear::gemm16_tc "; do
  set -- $v
  echo "== $1 ${2:-}" >> "$W/stats.log"
  timeout -k 5 30 ./pipeline-stats -o "$O${2:-}" $1 2>&1 | grep -E "Register|rror|Spill|Local" >> "$W/stats.log"
done
ttest() { local name=$1; shift
  timeout -k 5 60 "$@" > "$W/test-$name.log" 2>&1; echo "$name: exit $?" >> "$W/tests.log"
  grep -E "test result|FAILED|panicked" "$W/test-$name.log" | sort | uniq -c >> "$W/tests.log"; }
stamp tests
ttest gemm_fused tests/gemm_fused
ttest gemm tests/gemm
ttest dispatches tests/kernels-train.dispatches
ttest norm tests/norm
save
for rep in a b; do
  stamp memory-new-$rep; KERNELS_BENCH_JSON="$W/memory-new-$rep.jsonl" timeout -k 5 40 ./memory > "$W/memory-new-$rep.log" 2>&1
  stamp memory-old-$rep; KERNELS_BENCH_JSON="$W/memory-old-$rep.jsonl" timeout -k 5 40 ./memory-old > "$W/memory-old-$rep.log" 2>&1
done
save
stamp fused
KERNELS_BENCH_JSON="$W/fused.jsonl" timeout -k 5 25 ./gemm --fused > "$W/fused.log" 2>&1
save
P="--precision mixed --profile"
step() { grep -m1 "one step" "$1" | grep -oE "[0-9]+\.[0-9]+ ms" | head -1 | cut -d' ' -f1; }
run_as() { case $1 in base) echo "KERNELS_LAB_SWIGLU_TC=0";; sw) echo "KERNELS_LAB_SWIGLU_TC=1";; esac; }
prof() { stamp profile-$1-$2; env $(run_as $1) timeout -k 5 25 ./train --preset gpt2-small $P --checkpoint /tmp/ck/p.safetensors > "$W/profile-$1-$2.log" 2>&1
  echo "$1 $2 $(step "$W/profile-$1-$2.log")" >> "$W/steps.txt"; }
T="--precision mixed --log-every 50 --eval-every 100000 --sample-bytes 0 --data /tmp/corpus.txt --steps 300"
train() { stamp train-$1; env $(run_as $1) timeout -k 5 40 ./train --preset gpt2-small $T --checkpoint /tmp/ck/n$1.safetensors > "$W/train-$1.log" 2>&1; }
for rep in a b; do left 110 && prof base $rep; left 100 && prof sw $rep; done
save
left 70 && train sw
left 40 && train base
stamp end
save
cat "$W/gpu.txt" "$W/stats.log" "$W/tests.log" "$W/steps.txt"
grep -hE "^\|" "$W/fused.log" | cut -c1-160
grep -E "rmsnorm_backward|residual" "$W"/memory-*.log | cut -c1-160
grep -E "products  |gemm16_tc |gemm16_swiglu|gemm16_rope" "$W"/profile-*-a.log | cut -c1-150
grep -hE "loss|tokens/s|rror" "$W"/train-*.log | tail -6
