#!/usr/bin/env bash
# One call: the GEMM growth (lean toward the library, run10), the tensor-core tests, then the
# record pieces (train mixed 300 + f32 100 with profiles, attention bench, SDPA, torch train
# baselines for gpt2-small and gpt2-medium, gpt2-medium mixed). Saves after every phase.
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
cp .dev/commit "$W/commit.txt"; cp .dev/run_h25.sh "$W/run.sh"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 100 > "$W/clocks.csv" 2>&1 &
stamp() { echo "$(date +%H:%M:%S.%3N) $*" >> "$W/phases.log"; }
save() { tar czf "$FINAL/results.tar.gz" -C "$W" .; }
# Phases start only while the call has time for them (DEADLINE seconds in all).
DEADLINE=${DEADLINE:-400}
left() { [ $((DEADLINE - SECONDS)) -gt "$1" ]; }
G=$root/.dev/g2
stamp gemm-growth
(cd $G && W=$W OUT=$W bash -c '
V="lean_a lean_afn lean_g1 lean_g2 lean_g3 lean_g4 lean_g5 lean_g6 lean_g7"
for f in $V; do echo "== $f" >> "$W/stats.log"; timeout 60 ./pipeline-stats -o L_PF=1 ${f}E.wgsl lean 2>&1 | grep -E "Register|error" >> "$W/stats.log"; done
L="m=4096 n=4096 k=4096 --shared none --grid 512 --flops 2*m*n*k L_PF=1"
run() { local name=$1; shift
  echo "== $name: $*" >> "$W/tk.log"
  timeout 40 ./time_kernel "$@" > "$W/one.log" 2>&1; cat "$W/one.log" >> "$W/tk.log"
  echo "$name: $(grep -E "^time|FLOP|error" "$W/one.log" | tr "\n" " ")" >> "$W/summary.log"
}
run warm lean_rt.wgsl:lean $L --warmup-ms 2500
run lean gemm_lab.wgsl:lean $L --warmup-ms 400
for f in $V; do run $f $f.wgsl:lean $L --warmup-ms 400; done
run lean-b gemm_lab.wgsl:lean $L --warmup-ms 400
')
save
cd "$bins"
stamp tests
for t in flash_attention kernels-train.flash; do
  left 200 || break
  [ -x tests/$t ] || continue
  timeout 150 tests/$t > "$W/test-$t.log" 2>&1; echo "$t: exit $?" >> "$W/tests.log"
  grep -E "test result|FAILED|panicked" "$W/test-$t.log" | sort | uniq -c >> "$W/tests.log"
done
save
TR="--log-every 50 --eval-every 100000 --sample-bytes 0 --data /tmp/corpus.txt"
stamp train-mixed
timeout 90 ./train --preset gpt2-small --precision mixed --steps 300 $TR --checkpoint /tmp/ck/m.safetensors > "$W/train-mixed.log" 2>&1
stamp profile-mixed
timeout 40 ./train --preset gpt2-small --precision mixed --profile --checkpoint /tmp/ck/pm.safetensors > "$W/profile-mixed.log" 2>&1
save
if left 100; then
stamp train-f32
timeout 90 ./train --preset gpt2-small --precision f32 --steps 100 $TR --checkpoint /tmp/ck/f.safetensors > "$W/train-f32.log" 2>&1
stamp profile-f32
timeout 40 ./train --preset gpt2-small --precision f32 --profile --checkpoint /tmp/ck/pf.safetensors > "$W/profile-f32.log" 2>&1
fi
save
left 60 && {
stamp bench-attention
KERNELS_BENCH_JSON="$W/attention.jsonl" timeout 90 ./attention > "$W/bench-attention.log" 2>&1
}
save
left 40 && {
stamp sdpa
(cd "$root" && PYTHONUNBUFFERED=1 timeout 80 python3 scripts/device/sdpa_baseline.py --out "$W/sdpa.jsonl" > "$W/sdpa.log" 2>&1)
}
save
left 60 && {
stamp torch
(cd "$root" && PYTHONUNBUFFERED=1 timeout 150 python3 scripts/device/torch_baselines.py --out "$W/torch.jsonl" --only train --models gpt2-small > "$W/torch.log" 2>&1)
}
save
left 50 && {
stamp train-medium
timeout 60 ./train --preset gpt2-medium --precision mixed --steps 60 --log-every 20 --eval-every 100000 --sample-bytes 0 --data /tmp/corpus.txt --checkpoint /tmp/ck/md.safetensors > "$W/train-medium.log" 2>&1
}
stamp end
save
cat "$W/gpu.txt" "$W/stats.log" "$W/summary.log" "$W/tests.log"
grep -E "one step|products|attention |memory-bound" "$W/profile-mixed.log" "$W/profile-f32.log" | head -12
grep -E "tokens/s" "$W/train-mixed.log" "$W/train-f32.log" "$W/train-medium.log" | tail -n 3
grep -E "^\|" "$W/bench-attention.log" | head -8
grep -o '"impl": "[^"]*".*"model": "[^"]*".*"tokens_per_s": [0-9.]*' "$W/torch.jsonl" | sed 's/"dim".*"tokens_per_s"/ tokens_per_s/'
