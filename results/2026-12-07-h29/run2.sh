#!/usr/bin/env bash
# gpt2-medium with the transposed weight copies (its products' shapes put the input gradients
# of wqkv, wo and w13 on the exact kernels, not w2's: 2752 columns) beside the same binaries
# without them (`KERNELS_TRANSPOSED_WEIGHTS=0`), and PyTorch's gpt2-medium rates in the same
# call; the transposes' test and gpt2-small's profiled step with the bisecting
# `cast::transpose_f16x4`.
# Prepare (rust machine, checkout root):
#   COOP_CEILING_SRC=/nonexistent PACK_BENCHES="gemm" PACK_TESTS="cast dispatches" scripts/device/pack.sh
#   mkdir -p .dev/h29 && cp results/2026-12-07-h29/run2.sh .dev/h29/run2.sh
# Call: run(command="bash .dev/h29/run2.sh", carry=[".gl", ".dev/bins.tar.xz", ".dev/corpus.txt",
# ".dev/commit", ".dev/h29"]) (about 5 minutes with the start).
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
stamp tests
for t in cast kernels-train.dispatches; do
  timeout -k 10 60 tests/$t --nocapture > "$W/test-$t.log" 2>&1; echo "$t: exit $?" >> "$W/tests.log"
  grep -E "test result|FAILED|panicked|dispatches" "$W/test-$t.log" | sort | uniq -c >> "$W/tests.log"
done
stamp profile-small
timeout -k 10 30 ./train --preset gpt2-small --precision mixed --profile --checkpoint /tmp/ck/ps.safetensors > "$W/profile-small.log" 2>&1
save
P="--preset gpt2-medium --precision mixed --profile"
left 400 && { stamp profile-medium-new; timeout -k 10 60 ./train $P --checkpoint /tmp/ck/pmn.safetensors > "$W/profile-medium-new.log" 2>&1; }
left 380 && { stamp profile-medium-old; KERNELS_TRANSPOSED_WEIGHTS=0 timeout -k 10 60 ./train $P --checkpoint /tmp/ck/pmo.safetensors > "$W/profile-medium-old.log" 2>&1; }
save
T="--preset gpt2-medium --precision mixed --steps 100 --log-every 50 --eval-every 100000 --sample-bytes 0 --data /tmp/corpus.txt"
left 330 && { stamp train-medium; timeout -k 10 90 ./train $T --checkpoint /tmp/ck/m.safetensors > "$W/train-medium.log" 2>&1; }
save
left 200 && { stamp torch; (cd "$root" && PYTHONUNBUFFERED=1 timeout -k 10 180 python3 scripts/device/torch_baselines.py --out "$W/torch.jsonl" --only train --models gpt2-medium > "$W/torch.log" 2>&1); }
stamp end
save
cat "$W/gpu.txt" "$W/tests.log"
grep -E "one step|products  |attention  |memory-bound|rror|gemm16|transpose" "$W"/profile-*.log | cut -c1-150
grep -E "tokens/s|loss|rror" "$W/train-medium.log" | tail -3
grep -o '"impl": "[^"]*".*"model": "[^"]*".*"tokens_per_s": [0-9.]*' "$W/torch.jsonl" | sed 's/"dim".*"tokens_per_s"/ tokens_per_s/'
