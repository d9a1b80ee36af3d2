#!/usr/bin/env bash
# The committed H100 table: the f16 core's tests, the mixed step (profile, 300 steps on the fixed
# text) and PyTorch's gpt2-small baselines in the same call.
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
cp .dev/commit "$W/commit.txt"; cp .dev/run_h4.sh "$W/run.sh"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 100 > "$W/clocks.csv" 2>&1 &
stamp() { echo "$(date +%H:%M:%S.%3N) $*" >> "$W/phases.log"; }
save() { tar czf "$FINAL/results.tar.gz" -C "$W" .; }
cd "$bins"
stamp "test gemm"
timeout 60 tests/gemm --nocapture > "$W/test-gemm.log" 2>&1; echo "gemm: exit $?" >> "$W/tests.log"
grep -E "test result|FAILED|panicked" "$W/test-gemm.log" | sort | uniq -c >> "$W/tests.log"
stamp profile-mixed
timeout 40 ./train --preset gpt2-small --precision mixed --profile --checkpoint /tmp/ck/p.safetensors > "$W/profile-mixed.log" 2>&1
save
stamp train-mixed
timeout 60 ./train --preset gpt2-small --precision mixed --steps 300 --log-every 50 --eval-every 100000 --sample-bytes 0 --data /tmp/corpus.txt --checkpoint /tmp/ck/ln.safetensors > "$W/loss-new.log" 2>&1
save
stamp torch
(cd "$root" && PYTHONUNBUFFERED=1 timeout 100 python3 scripts/device/torch_baselines.py --out "$W/torch.jsonl" --only train --models gpt2-small > "$W/torch.log" 2>&1)
stamp end
save
cat "$W/gpu.txt" "$W/tests.log"
grep -E "one step|products|attention |memory-bound|idle|gemm16" "$W/profile-mixed.log"
grep -E "step +300 |tokens/s" "$W/loss-new.log" | tail -n 2
grep -o '"impl": "[^"]*".*"model": "[^"]*".*"tokens_per_s": [0-9.]*' "$W/torch.jsonl" | sed 's/"dim".*"tokens_per_s"/ tokens_per_s/'
