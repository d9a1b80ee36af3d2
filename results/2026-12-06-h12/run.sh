#!/usr/bin/env bash
# The fused epilogues with their loads batched: tensor-core test, the mixed step's profile and rate,
# the loss on the fixed text, PyTorch's gpt2-small baselines, in one call.
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
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 100 > "$W/clocks.csv" 2>&1 &
stamp() { echo "$(date +%H:%M:%S.%3N) $*" >> "$W/phases.log"; }
save() { tar czf "$FINAL/results.tar.gz" -C "$W" .; }
cd "$bins"
for t in gemm_fused; do
  stamp "test $t"
  timeout 150 "tests/$t" --nocapture > "$W/test-$t.log" 2>&1
  echo "$t: exit $?" >> "$W/tests.log"
  grep -E "test result|FAILED|panicked" "$W/test-$t.log" | sort | uniq -c >> "$W/tests.log"
done
save
stamp profile-mixed
timeout 60 ./train --preset gpt2-small --precision mixed --profile --checkpoint /tmp/ck/p.safetensors > "$W/profile-mixed.log" 2>&1
save
stamp train-mixed
timeout 90 ./train --preset gpt2-small --precision mixed --steps 300 --log-every 50 --eval-every 100000 --sample-bytes 0 --checkpoint /tmp/ck/m.safetensors > "$W/train-mixed.log" 2>&1
save
stamp loss-new
timeout 90 ./train --preset gpt2-small --precision mixed --steps 300 --log-every 50 --eval-every 100000 --sample-bytes 0 --data /tmp/corpus.txt --checkpoint /tmp/ck/ln.safetensors > "$W/loss-new.log" 2>&1
save
stamp torch
(cd "$root" && PYTHONUNBUFFERED=1 timeout 150 python3 scripts/device/torch_baselines.py --out "$W/torch.jsonl" --only train --models gpt2-small > "$W/torch.log" 2>&1)
stamp end
save
cat "$W/tests.log"; grep -E "one step|products|attention |memory-bound|idle" "$W/profile-mixed.log"; sed -n '/by kernel/,$p' "$W/profile-mixed.log" | head -8; for f in train-mixed loss-new; do grep -E "step +300|tokens/s" "$W/$f.log" | tail -n 2; done; grep -o '"impl": "[^"]*".*"tokens_per_s": [0-9.]*' "$W/torch.jsonl" | sed 's/"model".*"tokens_per_s"/ tokens_per_s/'
