#!/usr/bin/env bash
# Whatever kind the call gets (an H200 when no H100 starts): the transposed weight copies'
# tests on tensor cores (the transposes, the step's dispatch bound) and the flash kernels';
# gpt2-small's mixed step profiled with the copies and without (`KERNELS_TRANSPOSED_WEIGHTS=0`,
# the same binaries) and 300 steps with them; gpt2-medium the same way (100 steps); PyTorch's
# training rates for both models; the attention bench beside PyTorch's SDPA. All in one call.
# Prepare (rust machine, checkout root):
#   COOP_CEILING_SRC=/nonexistent PACK_BENCHES="attention" PACK_TESTS="cast dispatches flash_attention flash" scripts/device/pack.sh
#   mkdir -p .dev/h29 && cp results/2026-12-07-h29/run3.sh .dev/h29/run3.sh
# Call: run(command="bash .dev/h29/run3.sh", carry=[".gl", ".dev/bins.tar.xz", ".dev/corpus.txt",
# ".dev/commit", ".dev/h29"]) (about 7 minutes with the start).
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
ls tests > "$W/test-binaries.txt"
stamp tests
for t in cast kernels-train.dispatches flash_attention kernels-train.flash; do
  left 420 || break
  [ -x tests/$t ] || { echo "$t: missing" >> "$W/tests.log"; continue; }
  timeout -k 10 90 tests/$t > "$W/test-$t.log" 2>&1; echo "$t: exit $?" >> "$W/tests.log"
  grep -E "test result|FAILED|panicked" "$W/test-$t.log" | sort | uniq -c >> "$W/tests.log"
done
save
P="--precision mixed --profile"
left 380 && for rep in a b; do
  stamp profile-new-$rep; timeout -k 10 30 ./train --preset gpt2-small $P --checkpoint /tmp/ck/pn.safetensors > "$W/profile-new-$rep.log" 2>&1
  stamp profile-old-$rep; KERNELS_TRANSPOSED_WEIGHTS=0 timeout -k 10 30 ./train --preset gpt2-small $P --checkpoint /tmp/ck/po.safetensors > "$W/profile-old-$rep.log" 2>&1
done
save
T="--precision mixed --log-every 50 --eval-every 100000 --sample-bytes 0 --data /tmp/corpus.txt"
left 330 && { stamp train-new; timeout -k 10 55 ./train --preset gpt2-small $T --steps 300 --checkpoint /tmp/ck/n.safetensors > "$W/train-new.log" 2>&1; }
save
left 280 && { stamp profile-medium-new; timeout -k 10 50 ./train --preset gpt2-medium $P --checkpoint /tmp/ck/pmn.safetensors > "$W/profile-medium-new.log" 2>&1; }
left 260 && { stamp profile-medium-old; KERNELS_TRANSPOSED_WEIGHTS=0 timeout -k 10 50 ./train --preset gpt2-medium $P --checkpoint /tmp/ck/pmo.safetensors > "$W/profile-medium-old.log" 2>&1; }
left 240 && { stamp train-medium; timeout -k 10 80 ./train --preset gpt2-medium $T --steps 100 --checkpoint /tmp/ck/m.safetensors > "$W/train-medium.log" 2>&1; }
save
left 150 && { stamp torch; (cd "$root" && PYTHONUNBUFFERED=1 timeout -k 10 140 python3 scripts/device/torch_baselines.py --out "$W/torch.jsonl" --only train --models gpt2-small,gpt2-medium > "$W/torch.log" 2>&1); }
save
left 50 && { stamp bench-attention; KERNELS_BENCH_JSON="$W/attention.jsonl" timeout -k 10 40 ./attention > "$W/attention.log" 2>&1; }
left 30 && { stamp sdpa; (cd "$root" && PYTHONUNBUFFERED=1 timeout -k 10 30 python3 scripts/device/sdpa_baseline.py --out "$W/sdpa.jsonl" > "$W/sdpa.log" 2>&1); }
stamp end
save
cat "$W/gpu.txt" "$W/tests.log"
grep -E "one step|products  |attention  |memory-bound|rror|gemm16_tc|transpose" "$W"/profile-*.log | cut -c1-150
grep -E "tokens/s|rror" "$W/train-new.log" "$W/train-medium.log" | tail -4
grep -o '"impl": "[^"]*".*"model": "[^"]*".*"tokens_per_s": [0-9.]*' "$W/torch.jsonl" | sed 's/"dim".*"tokens_per_s"/ tokens_per_s/'
grep -E "flash" "$W/attention.log" | cut -c1-150 | head -8; grep -E "ms" "$W/sdpa.log" | tail -6
