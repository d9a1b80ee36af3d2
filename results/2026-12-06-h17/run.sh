#!/usr/bin/env bash
# H200 measurement: tensor-core tests, attention against SDPA, the mixed and f32 steps (profiles,
# rates, the loss on the fixed text), PyTorch's training baselines, then the GEMM lab.
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
cp .dev/run_h1.sh "$W/run.sh"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 100 > "$W/clocks.csv" 2>&1 &
stamp() { echo "$(date +%H:%M:%S.%3N) $*" >> "$W/phases.log"; }
save() { tar czf "$FINAL/results.tar.gz" -C "$W" .; }
cd "$bins"
for t in gemm gemm_fused flash_attention kernels-train.dispatches kernels-train.mixed kernels-train.flash; do
  stamp "test $t"
  timeout 120 "tests/$t" --nocapture > "$W/test-$t.log" 2>&1
  echo "$t: exit $?" >> "$W/tests.log"
  grep -E "test result|FAILED|panicked" "$W/test-$t.log" | sort | uniq -c >> "$W/tests.log"
done
grep -h "gpt2-small step" "$W/test-kernels-train.dispatches.log" >> "$W/tests.log"
save
stamp bench-attention
KERNELS_BENCH_JSON="$W/attention.jsonl" timeout 120 ./attention > "$W/bench.log" 2>&1
save
stamp sdpa
(cd "$root" && PYTHONUNBUFFERED=1 timeout 120 python3 scripts/device/sdpa_baseline.py --out "$W/sdpa.jsonl" > "$W/sdpa.log" 2>&1)
save
stamp profile-mixed
timeout 60 ./train --preset gpt2-small --precision mixed --profile --checkpoint /tmp/ck/p.safetensors > "$W/profile-mixed.log" 2>&1
save
stamp train-mixed
timeout 90 ./train --preset gpt2-small --precision mixed --steps 300 --log-every 50 --eval-every 100000 --sample-bytes 0 --data /tmp/corpus.txt --checkpoint /tmp/ck/ln.safetensors > "$W/loss-new.log" 2>&1
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
stamp gemm-lab
(cd "$root" && OUT="$W/lab" && mkdir -p "$OUT" && export OUT && timeout 150 bash .dev/g/run.sh > "$W/lab-run.log" 2>&1)
stamp end
save
cat "$W/gpu.txt" "$W/tests.log"; grep -E "^\|" "$W/bench.log" | head -12; grep -E "fwd_bwd" "$W/sdpa.jsonl" | cut -c1-160
grep -E "one step|products|attention |memory-bound|idle" "$W/profile-mixed.log" "$W/profile-f32.log"
for f in loss-new train-f32; do grep -E "step +(150|300) |tokens/s" "$W/$f.log" | tail -n 2; done
grep -o '"impl": "[^"]*".*"model": "[^"]*".*"tokens_per_s": [0-9.]*' "$W/torch.jsonl" | sed 's/"dim".*"tokens_per_s"/ tokens_per_s/'
cat "$W/lab/summary.log" "$W/lab/stats.log" 2>/dev/null
