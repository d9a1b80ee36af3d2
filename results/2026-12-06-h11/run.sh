#!/usr/bin/env bash
# Fused SwiGLU and RoPE epilogues: tensor-core tests, the mixed step's profile and rate, the loss on
# the fixed text (same bits expected as 2026-12-06-h9's loss-new), f32 and gpt2-medium, PyTorch's
# training baselines, all in one call.
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
for t in gemm_fused gemm kernels-train.dispatches kernels-train.mixed kernels-train.flash; do
  stamp "test $t"
  timeout 150 "tests/$t" --nocapture > "$W/test-$t.log" 2>&1
  echo "$t: exit $?" >> "$W/tests.log"
  grep -E "test result|FAILED|panicked" "$W/test-$t.log" | sort | uniq -c >> "$W/tests.log"
done
grep -h "gpt2-small step" "$W/test-kernels-train.dispatches.log" >> "$W/tests.log"
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
stamp train-f32
timeout 60 ./train --preset gpt2-small --precision f32 --steps 100 --log-every 50 --eval-every 100000 --sample-bytes 0 --checkpoint /tmp/ck/f.safetensors > "$W/train-f32.log" 2>&1
save
stamp profile-medium
timeout 90 ./train --preset gpt2-medium --precision mixed --profile --checkpoint /tmp/ck/pm.safetensors > "$W/profile-medium.log" 2>&1
save
stamp train-medium
timeout 120 ./train --preset gpt2-medium --precision mixed --steps 100 --log-every 50 --eval-every 100000 --sample-bytes 0 --checkpoint /tmp/ck/md.safetensors > "$W/train-medium.log" 2>&1
save
stamp torch
(cd "$root" && PYTHONUNBUFFERED=1 timeout 200 python3 scripts/device/torch_baselines.py --out "$W/torch.jsonl" --only train --models gpt2-small,gpt2-medium > "$W/torch.log" 2>&1)
stamp end
save
cat "$W/tests.log"; grep -E "one step|products|attention |memory-bound|idle" "$W/profile-mixed.log" "$W/profile-medium.log" | head -12; sed -n '/by kernel/,$p' "$W/profile-mixed.log" | head -18; tail -2 "$W/train-mixed.log" "$W/train-f32.log" "$W/train-medium.log" "$W/loss-new.log"; tail -10 "$W/torch.log"
