#!/usr/bin/env bash
# f32 with the layer inputs kept as halves: tensor-core tests, the f32 step (profile, rates, a
# sample through generation), PyTorch's training baselines.
set -uo pipefail
FINAL="$OUT"
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json CI=true XDG_RUNTIME_DIR=/tmp
root=$PWD
bins=$(mktemp -d)
tar xJf .dev/bins.tar.xz -C "$bins"
cp .dev/corpus.txt /tmp/corpus.txt
W=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$W/gpu.txt" 2>&1
cp .dev/commit "$W/commit.txt" 2>/dev/null
cp .dev/run_r10.sh "$W/run.sh"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 100 > "$W/clocks.csv" 2>&1 &
stamp() { echo "$(date +%H:%M:%S.%3N) $*" >> "$W/phases.log"; }
save() { tar czf "$FINAL/results.tar.gz" -C "$W" .; }
cd "$bins"
for t in gemm kernels-train.dispatches kernels-train.flash; do
  stamp "test $t"
  timeout 150 "tests/$t" --nocapture > "$W/test-$t.log" 2>&1
  echo "$t: exit $?" >> "$W/tests.log"
  grep -E "test result|FAILED|panicked" "$W/test-$t.log" | sort | uniq -c >> "$W/tests.log"
done
grep -h "gpt2-small step" "$W/test-kernels-train.dispatches.log" >> "$W/tests.log"
save
stamp profile-f32
timeout 60 ./train --preset gpt2-small --precision f32 --profile --checkpoint /tmp/ck/pf.safetensors > "$W/profile-f32.log" 2>&1
save
stamp train-f32
timeout 90 ./train --preset gpt2-small --precision f32 --steps 150 --log-every 50 --eval-every 100000 --sample-bytes 0 --checkpoint /tmp/ck/f.safetensors > "$W/train-f32.log" 2>&1
save
stamp torch
(cd "$root" && PYTHONUNBUFFERED=1 timeout 150 python3 scripts/device/torch_baselines.py --out "$W/torch.jsonl" --only train --models gpt2-small > "$W/torch.log" 2>&1)
save
stamp train-f32-2
timeout 90 ./train --preset gpt2-small --precision f32 --steps 150 --log-every 50 --eval-every 100000 --sample-bytes 200 --checkpoint /tmp/ck/f2.safetensors > "$W/train-f32-2.log" 2>&1
stamp end
save
cat "$W/gpu.txt" "$W/tests.log"; grep -E "one step|products|attention |memory-bound|idle|precise" "$W/profile-mixed.log" "$W/profile-f32.log"
for f in train-f32 train-f32-2; do grep -E "step +(150|300) |tokens/s" "$W/$f.log" | tail -n 2; done
grep -o '"impl": "[^"]*".*"model": "[^"]*".*"tokens_per_s": [0-9.]*' "$W/torch.jsonl" | sed 's/"dim".*"tokens_per_s"/ tokens_per_s/'
