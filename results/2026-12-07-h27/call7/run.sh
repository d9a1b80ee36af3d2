#!/usr/bin/env bash
# The exact tensor-core kernels decided: the products' tests on tensor cores, the register counts,
# every bench shape and the mixed step's profile with them and without (KERNELS_GEMM_EXACT_TC=0,
# the same binaries), 300 mixed steps, PyTorch's training rates.
# Carry: .gl .dev/bins.tar.xz .dev/corpus.txt .dev/h27/run7.sh
set -uo pipefail
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json CI=true XDG_RUNTIME_DIR=/tmp
root=$PWD
bins=$(mktemp -d)
tar xJf .dev/bins.tar.xz -C "$bins"
cp .dev/corpus.txt /tmp/corpus.txt
W=$OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$W/gpu.txt" 2>&1
git -C "$root" rev-parse --short HEAD > "$W/commit.txt" 2>/dev/null || cp .dev/commit "$W/commit.txt"
cp "$0" "$W/run.sh"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 100 > "$W/clocks.csv" 2>&1 &
stamp() { echo "$(date +%H:%M:%S.%3N) $*" >> "$W/phases.log"; }
DEADLINE=${DEADLINE:-560}
left() { [ $((DEADLINE - SECONDS)) -gt "$1" ]; }
cd "$bins"
stamp stats
O="A_T=0,B_T=1,G_BM=128,G_BN=256,G_BK=32,G_TM=4,G_TN=4,G_PF=1,G_GROUP=4,M_C=4096,N_C=4096,K_C=4096,G_PARTS=1,G_CHUNK=4096"
for k in linear::gemm16_tc linear::gemm16_swiglu_tc linear::gemm16; do
  echo "== $k" >> "$W/stats.log"
  x=""; [ "$k" = linear::gemm16 ] && x=",G_EXACT=1"; [ "$k" = linear::gemm16_swiglu_tc ] && x=",G_NMAP=16"
  timeout -k 5 30 ./pipeline-stats -o "$O$x" $k 2>&1 | grep -E "Register|error" >> "$W/stats.log"
done
stamp tests
for t in gemm gemm_fused linear16 mixed; do
  left 200 || break
  timeout -k 10 90 tests/$t > "$W/test-$t.log" 2>&1; echo "$t: exit $?" >> "$W/tests.log"
  grep -E "test result|FAILED|panicked" "$W/test-$t.log" | sort | uniq -c >> "$W/tests.log"
done
grep -h "exact" "$W"/test-gemm.log | grep -o "^[a-z ]*f16 [a-z ()]*" | sort | uniq -c >> "$W/tests.log"
left 60 && { stamp profile-new; timeout -k 10 25 ./train --preset gpt2-small --precision mixed --profile --checkpoint /tmp/ck/pn.safetensors > "$W/profile-new.log" 2>&1; }
left 60 && { stamp profile-old; KERNELS_GEMM_EXACT_TC=0 timeout -k 10 25 ./train --preset gpt2-small --precision mixed --profile --checkpoint /tmp/ck/po.safetensors > "$W/profile-old.log" 2>&1; }
left 100 && {
stamp bench-new; KERNELS_BENCH_JSON="$W/gemm-new.jsonl" timeout -k 10 45 ./gemm --configs "" > "$W/gemm-new.log" 2>&1
stamp bench-old; KERNELS_GEMM_EXACT_TC=0 KERNELS_BENCH_JSON="$W/gemm-old.jsonl" timeout -k 10 45 ./gemm --configs "" > "$W/gemm-old.log" 2>&1
}
left 60 && { stamp train; timeout -k 10 50 ./train --preset gpt2-small --precision mixed --steps 300 --log-every 50 --eval-every 100000 --sample-bytes 0 --data /tmp/corpus.txt --checkpoint /tmp/ck/n.safetensors > "$W/train-new.log" 2>&1; }
left 130 && { stamp torch; (cd "$root" && PYTHONUNBUFFERED=1 timeout -k 10 150 python3 scripts/device/torch_baselines.py --out "$W/torch.jsonl" --only train --models gpt2-small > "$W/torch.log" 2>&1); }
stamp end
cat "$W/gpu.txt" "$W/stats.log" "$W/tests.log"
grep -E "^\|" "$W/gemm-new.log" | head -30; grep -E "^\|" "$W/gemm-old.log" | head -30
grep -E "one step|products|attention  |memory-bound" "$W/profile-new.log" "$W/profile-old.log"; grep -E "gemm16" "$W/profile-new.log"
grep -E "tokens/s" "$W/train-new.log" | tail -2
grep -o '"impl": "[^"]*".*"model": "[^"]*".*"tokens_per_s": [0-9.]*' "$W/torch.jsonl" | sed 's/"dim".*"tokens_per_s"/ tokens_per_s/'
