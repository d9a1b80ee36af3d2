#!/usr/bin/env bash
# Not run (the session's device time ran out): 300 mixed steps of gpt2-small on main's code
# (the exact-rows attention) beside PyTorch's training rates, for BENCHMARKS §5's table. Prepare:
#   COOP_CEILING_SRC=/nonexistent PACK_BENCHES="attention" PACK_TESTS="flash" scripts/device/pack.sh
#   mkdir -p .dev/h28 && cp results/2026-12-07-h28/next/run.sh .dev/h28/run4.sh
# Call: run(command="bash .dev/h28/run4.sh", carry=[".gl", ".dev/bins.tar.xz", ".dev/corpus.txt",
# ".dev/commit", ".dev/h28"]) (about 4 minutes, with the start).
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
cd "$bins"
stamp train; timeout -k 5 60 ./train --preset gpt2-small --precision mixed --steps 300 --log-every 50 --eval-every 100000 --sample-bytes 0 --data /tmp/corpus.txt --checkpoint /tmp/ck/n.safetensors > "$W/train-new.log" 2>&1
save
stamp torch; (cd "$root" && PYTHONUNBUFFERED=1 timeout -k 5 130 python3 scripts/device/torch_baselines.py --out "$W/torch.jsonl" --only train --models gpt2-small > "$W/torch.log" 2>&1)
stamp end
save
grep -E "tokens/s|loss|rror" "$W/train-new.log" | tail -4
grep -o '"impl": "[^"]*".*"model": "[^"]*".*"tokens_per_s": [0-9.]*' "$W/torch.jsonl" | sed 's/"dim".*"tokens_per_s"/ tokens_per_s/'
