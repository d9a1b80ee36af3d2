#!/usr/bin/env bash
# 128×192 blocks (4×3 tiles a subgroup, six vec4 loads of B's slice per invocation) for the
# X·Wᵀ products: their correctness on tensor cores (tests/gemm), the bench's rates against the
# table's choice (--configs), and the mixed step profiled with the H100 table, with it changed
# to 128×192 for the N = 768 X·Wᵀ shapes (t192) or for every X·Wᵀ shape whose N divides by 192
# (t192all), and with the compare's own winners (cmp); then 300 steps each of the baseline and
# the fastest.
# Prepare: COOP_CEILING_SRC=/nonexistent PACK_BENCHES="gemm" PACK_TESTS="gemm" scripts/device/pack.sh
# Call: run(command="bash .dev/h30/run1.sh", carry=[".gl", ".dev/bins.tar.xz", ".dev/corpus.txt", ".dev/commit", ".dev/h30"])
set -uo pipefail
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json CI=true XDG_RUNTIME_DIR=/tmp
root=$PWD
bins=$(mktemp -d)
tar xJf .dev/bins.tar.xz -C "$bins"
cp .dev/corpus.txt /tmp/corpus.txt
W=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$W/gpu.txt" 2>&1
cp .dev/commit "$W/commit.txt"; cp "$0" "$W/run.sh"; cp .dev/h30/t192*.txt "$W/"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 100 > "$W/clocks.csv" 2>&1 &
stamp() { echo "$(date +%H:%M:%S.%3N) $*" >> "$W/phases.log"; }
save() { tar czf "$OUT/results.tar.gz" -C "$W" .; }
trap save EXIT
DEADLINE=${DEADLINE:-575}
left() { [ $((DEADLINE - SECONDS)) -gt "$1" ]; }
cd "$bins"
stamp tests
timeout -k 10 120 tests/gemm > "$W/test-gemm.log" 2>&1; echo "gemm: exit $?" >> "$W/tests.log"
grep -E "test result|FAILED|panicked" "$W/test-gemm.log" | sort | uniq -c >> "$W/tests.log"
save
stamp bench
KERNELS_BENCH_JSON="$W/gemm.jsonl" timeout -k 10 200 ./gemm --configs "128,192,32,4,3,1,4,256 128,192,32,4,3,1,8,256 128,128,32,4,4,1,4,128 128,128,32,4,4,1,8,128" --table "$W/cmp.txt" > "$W/gemm.log" 2>&1
echo "bench: exit $?" >> "$W/tests.log"
save
P="--precision mixed --profile"
step() { grep -m1 "one step" "$1" | grep -oE "[0-9]+\.[0-9]+ ms" | head -1 | cut -d' ' -f1; }
for rep in a b; do
  for t in base t192 t192all cmp; do
    left 150 || break
    tab=""; [ "$t" != base ] && tab="$W/$t.txt"
    [ -n "$tab" ] && [ ! -s "$tab" ] && continue
    stamp profile-$t-$rep
    KERNELS_GEMM_TABLE=$tab timeout -k 10 30 ./train --preset gpt2-small $P --checkpoint /tmp/ck/p.safetensors > "$W/profile-$t-$rep.log" 2>&1
    echo "$t $rep $(step "$W/profile-$t-$rep.log")" >> "$W/steps.txt"
  done
done
save
best=$(grep -v "^base" "$W/steps.txt" | sort -k3 -g | head -1 | cut -d' ' -f1)
echo "best: $best" >> "$W/steps.txt"
T="--precision mixed --log-every 50 --eval-every 100000 --sample-bytes 0 --data /tmp/corpus.txt --steps 300"
left 60 && { stamp train-$best; KERNELS_GEMM_TABLE="$W/$best.txt" timeout -k 10 50 ./train --preset gpt2-small $T --checkpoint /tmp/ck/n.safetensors > "$W/train-$best.log" 2>&1; }
left 35 && { stamp train-base; timeout -k 10 50 ./train --preset gpt2-small $T --checkpoint /tmp/ck/o.safetensors > "$W/train-base.log" 2>&1; }
stamp end
save
cat "$W/gpu.txt" "$W/tests.log" "$W/steps.txt"
grep -E "^\| nt" "$W/gemm.log" | cut -c1-120
cat "$W/cmp.txt" 2>/dev/null | grep "^f16 0 1"
grep -E "products  |gemm16_tc|gemm16_rope" "$W"/profile-*-a.log | cut -c1-150
grep -E "tokens/s|rror" "$W"/train-*.log | tail -4
