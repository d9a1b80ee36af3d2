#!/usr/bin/env bash
# gpt2-small at context 8192 (batch 1): mixed precision on flash attention (rate, profile,
# memory), SM clock and memory logged.
set -uo pipefail
FINAL="$OUT"
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json CI=true XDG_RUNTIME_DIR=/tmp
bins=$(mktemp -d)
tar xJf .dev/bins.tar.xz -C "$bins"
W=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$W/gpu.txt" 2>&1
cp .dev/commit "$W/commit.txt" 2>/dev/null
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,memory.used --format=csv -lms 100 > "$W/clocks.csv" 2>&1 &
stamp() { echo "$(date +%H:%M:%S.%3N) $*" >> "$W/phases.log"; }
save() { tar czf "$FINAL/results.tar.gz" -C "$W" .; }
cd "$bins"
stamp train-8192
timeout 100 ./train --preset gpt2-small --precision mixed --seq-len 8192 --batch 1 --steps 40 --log-every 10 --eval-every 100000 --sample-bytes 0 --checkpoint /tmp/ck/c8.safetensors > "$W/train-8192.log" 2>&1
save
stamp profile-8192
timeout 60 ./train --preset gpt2-small --precision mixed --seq-len 8192 --batch 1 --profile --checkpoint /tmp/ck/p8.safetensors > "$W/profile-8192.log" 2>&1
stamp end
save
grep -E "model:|step +|tokens/s" "$W/train-8192.log" | tail -n 6; grep -E "one step|products|attention |memory-bound|idle" "$W/profile-8192.log"; sed -n '/by kernel/,$p' "$W/profile-8192.log" | head -8
awk -F, 'NR>1{print $4}' "$W/clocks.csv" | sort -t' ' -k1 -n | tail -n 1
