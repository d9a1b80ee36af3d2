#!/usr/bin/env bash
# The whole H200 comparison in one go, on the device machine: correctness tests at subgroup
# size 32, our benchmarks, the PyTorch baselines of the same session, a training run and a
# profiled training step; then the comparison table. Expects .gl/ (Vulkan loader debs) and
# .dev/bins.tar.xz (from bench/pack.sh); writes report.md and results.tar.gz (every log and
# JSON file; the device tool returns at most 8 files) to ${OUT:-/tmp/out}.
set -uo pipefail
FINAL="${OUT:-/tmp/out}"
mkdir -p "$FINAL"
OUT=$(mktemp -d)
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json CI=true XDG_RUNTIME_DIR=/tmp
root=$PWD
bins=$(mktemp -d)
tar xJf .dev/bins.tar.xz -C "$bins"
cd "$bins"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
(for t in tests/*; do echo "== $t"; timeout 120 "$t" 2>&1 | grep -E "test result|FAILED|panicked"; done) > "$OUT/tests.log" 2>&1
(KERNELS_BENCH_JSON="$OUT/gemm.jsonl" ./gemm
 KERNELS_BENCH_JSON="$OUT/memory.jsonl" ./memory
 KERNELS_BENCH_JSON="$OUT/attention.jsonl" ./attention
 KERNELS_BENCH_JSON="$OUT/reductions.jsonl" ./reductions
 ./host_overhead) > "$OUT/bench.log" 2>&1
# gpt2-small: --precision mixed (300 steps) and f32 (fewer: it is slower), and one profiled step of
# each; the SM clock logged beside them (TENSOR_CORES.md: clocks fall between short bursts).
(nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv -lms 500 > "$OUT/clocks.csv" 2>&1 &
 echo $! > "$OUT/clocks.pid")
(echo "== train-mixed"
 timeout 240 ./train --preset gpt2-small --precision mixed --steps "${MIXED_STEPS:-300}" --log-every 50 --eval-every 100000 --sample-bytes 0 --checkpoint /tmp/ck/mixed.safetensors
 echo "== train-f32"
 timeout 200 ./train --preset gpt2-small --precision f32 --steps "${TRAIN_STEPS:-100}" --log-every 50 --eval-every 100000 --sample-bytes 0 --checkpoint /tmp/ck/f32.safetensors
 echo "== profile-mixed"
 timeout 120 ./train --preset gpt2-small --precision mixed --profile --checkpoint /tmp/ck/profile-mixed.safetensors
 echo "== profile-f32"
 timeout 120 ./train --preset gpt2-small --precision f32 --profile --checkpoint /tmp/ck/profile-f32.safetensors) > "$OUT/train.log" 2>&1
kill "$(cat "$OUT/clocks.pid")" 2>/dev/null
cd "$root"
PYTHONUNBUFFERED=1 timeout 400 python3 bench/torch_baselines.py --out "$OUT/torch.jsonl" > "$OUT/torch.log" 2>&1
python3 bench/report.py "$OUT" | tee "$OUT/report.md"
cp "$OUT/report.md" "$FINAL/"
tar czf "$FINAL/results.tar.gz" -C "$OUT" .
