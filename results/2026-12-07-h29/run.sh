#!/usr/bin/env bash
# The input gradients on the weights' transposed f16 copies (`ModelOptions::transposed_weights`:
# dY·W run as X·Wᵀ on the exact tensor-core kernels): their tests on tensor cores (the transposes,
# the mixed trainer's, the products'), the mixed step's profile with the copies and without
# (`KERNELS_TRANSPOSED_WEIGHTS=0`, the same binaries) twice each, alternating; 300 mixed steps
# both ways; PyTorch's training rates in the same call.
# Prepare (rust machine, checkout root):
#   COOP_CEILING_SRC=/nonexistent PACK_BENCHES="gemm" PACK_TESTS="cast mixed gemm" scripts/device/pack.sh
#   mkdir -p .dev/h29 && cp results/2026-12-07-h29/run.sh .dev/h29/run.sh
# Call: run(command="bash .dev/h29/run.sh", carry=[".gl", ".dev/bins.tar.xz", ".dev/corpus.txt",
# ".dev/commit", ".dev/h29"]) (about 6 minutes with the start).
set -uo pipefail
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json CI=true XDG_RUNTIME_DIR=/tmp
root=$PWD
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
DEADLINE=${DEADLINE:-570}
left() { [ $((DEADLINE - SECONDS)) -gt "$1" ]; }
cd "$bins"
ls tests > "$W/test-binaries.txt"
stamp tests
for t in cast kernels-train.mixed mixed gemm; do
  left 330 || break
  [ -x tests/$t ] || { echo "$t: missing" >> "$W/tests.log"; continue; }
  timeout -k 10 120 tests/$t > "$W/test-$t.log" 2>&1; echo "$t: exit $?" >> "$W/tests.log"
  grep -E "test result|FAILED|panicked" "$W/test-$t.log" | sort | uniq -c >> "$W/tests.log"
done
grep -E "relative distance|transposed weights" "$W/test-kernels-train.mixed.log" >> "$W/tests.log"
save
P="--preset gpt2-small --precision mixed --profile"
for rep in a b; do
  left 200 || break
  stamp profile-new-$rep; timeout -k 10 30 ./train $P --checkpoint /tmp/ck/pn.safetensors > "$W/profile-new-$rep.log" 2>&1
  stamp profile-old-$rep; KERNELS_TRANSPOSED_WEIGHTS=0 timeout -k 10 30 ./train $P --checkpoint /tmp/ck/po.safetensors > "$W/profile-old-$rep.log" 2>&1
done
save
T="--preset gpt2-small --precision mixed --steps 300 --log-every 50 --eval-every 100000 --sample-bytes 0 --data /tmp/corpus.txt"
left 200 && { stamp train-new; timeout -k 10 55 ./train $T --checkpoint /tmp/ck/n.safetensors > "$W/train-new.log" 2>&1; }
save
left 130 && { stamp torch; (cd "$root" && PYTHONUNBUFFERED=1 timeout -k 10 150 python3 scripts/device/torch_baselines.py --out "$W/torch.jsonl" --only train --models gpt2-small > "$W/torch.log" 2>&1); }
save
left 60 && { stamp train-old; KERNELS_TRANSPOSED_WEIGHTS=0 timeout -k 10 55 ./train $T --checkpoint /tmp/ck/o.safetensors > "$W/train-old.log" 2>&1; }
stamp end
save
cat "$W/gpu.txt" "$W/tests.log"
grep -E "one step|products  |attention  |memory-bound|rror|gemm16|transpose" "$W"/profile-*.log | cut -c1-150
grep -E "tokens/s|loss|rror" "$W/train-new.log" "$W/train-old.log" | tail -6
grep -o '"impl": "[^"]*".*"model": "[^"]*".*"tokens_per_s": [0-9.]*' "$W/torch.jsonl" | sed 's/"dim".*"tokens_per_s"/ tokens_per_s/'
