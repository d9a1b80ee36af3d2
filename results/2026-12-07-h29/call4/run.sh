#!/usr/bin/env bash
# gpt2-small in both precisions beside PyTorch in one call: 300 mixed steps and 300 f32 steps of
# main's code, each precision's step profiled, and PyTorch's four training rates.
# Prepare (rust machine, checkout root):
#   COOP_CEILING_SRC=/nonexistent PACK_BENCHES="gemm" PACK_TESTS="cast" scripts/device/pack.sh
#   mkdir -p .dev/h29 && cp results/2026-12-07-h29/run4.sh .dev/h29/run4.sh
# Call: run(command="bash .dev/h29/run4.sh", carry=[".gl", ".dev/bins.tar.xz", ".dev/corpus.txt",
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
DEADLINE=${DEADLINE:-575}
left() { [ $((DEADLINE - SECONDS)) -gt "$1" ]; }
cd "$bins"
T="--preset gpt2-small --steps 300 --log-every 50 --eval-every 100000 --sample-bytes 0 --data /tmp/corpus.txt"
stamp profile-mixed; timeout -k 10 30 ./train --preset gpt2-small --precision mixed --profile --checkpoint /tmp/ck/pm.safetensors > "$W/profile-mixed.log" 2>&1
stamp profile-f32; timeout -k 10 40 ./train --preset gpt2-small --precision f32 --profile --checkpoint /tmp/ck/pf.safetensors > "$W/profile-f32.log" 2>&1
save
left 400 && { stamp train-mixed; timeout -k 10 60 ./train $T --precision mixed --checkpoint /tmp/ck/m.safetensors > "$W/train-mixed.log" 2>&1; }
save
left 330 && { stamp train-f32; timeout -k 10 90 ./train $T --precision f32 --checkpoint /tmp/ck/f.safetensors > "$W/train-f32.log" 2>&1; }
save
left 150 && { stamp torch; (cd "$root" && PYTHONUNBUFFERED=1 timeout -k 10 140 python3 scripts/device/torch_baselines.py --out "$W/torch.jsonl" --only train --models gpt2-small > "$W/torch.log" 2>&1); }
stamp end
save
cat "$W/gpu.txt"
grep -E "one step|products  |attention  |memory-bound|idle  |rror" "$W"/profile-*.log | cut -c1-150
grep -E "step +300 |tokens/s|rror" "$W/train-mixed.log" "$W/train-f32.log" | tail -4
grep -o '"impl": "[^"]*".*"model": "[^"]*".*"tokens_per_s": [0-9.]*' "$W/torch.jsonl" | sed 's/"dim".*"tokens_per_s"/ tokens_per_s/'
