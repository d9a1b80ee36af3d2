#!/usr/bin/env bash
# The exact tensor-core kernels for X·Wᵀ products whole, as they land: register counts, lab
# timings of the exact kernel's other orientations with and without register prefetch,
# the products' tests on tensor cores, every bench shape and the mixed step's profile with them
# and without (KERNELS_GEMM_EXACT_TC=0, the same binaries), 300 mixed steps, PyTorch's rates.
# Carry: .gl .dev/bins.tar.xz .dev/corpus.txt .dev/commit .dev/h27 (run8.sh, z/, g/gemm_lab.wgsl,
# bin2/time_kernel.xz)
set -uo pipefail
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json CI=true XDG_RUNTIME_DIR=/tmp
root=$PWD
H=$root/.dev/h27
bins=$(mktemp -d)
tar xJf .dev/bins.tar.xz -C "$bins"
xz -dc $H/bin2/time_kernel.xz > $bins/time_kernel; chmod +x $bins/time_kernel
cp .dev/corpus.txt /tmp/corpus.txt
W=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$W/gpu.txt" 2>&1
cp .dev/commit "$W/commit.txt"; cp "$0" "$W/run.sh"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 100 > "$W/clocks.csv" 2>&1 &
stamp() { echo "$(date +%H:%M:%S.%3N) $*" >> "$W/phases.log"; }
save() { tar czf "$OUT/results.tar.gz" -C "$W" .; }
DEADLINE=${DEADLINE:-560}
left() { [ $((DEADLINE - SECONDS)) -gt "$1" ]; }
cd "$bins"
stamp stats
O="A_T=0,B_T=1,G_BM=128,G_BN=256,G_BK=32,G_TM=4,G_TN=4,G_PF=1,G_GROUP=4,M_C=4096,N_C=4096,K_C=4096,G_PARTS=1,G_CHUNK=4096"
for k in linear::gemm16_tc linear::gemm16_rope_qkv_tc linear::gemm16; do
  echo "== $k" >> "$W/stats.log"
  x=""; [ "$k" = linear::gemm16 ] && x=",G_EXACT=1"
  timeout -k 5 30 ./pipeline-stats -o "$O$x" $k 2>&1 | grep -E "Register|rror" >> "$W/stats.log"
done
run() { local name=$1; shift
  echo "== $name: $*" >> "$W/tk.log"
  (cd $H && timeout -k 5 40 $bins/time_kernel "$@") > "$W/one.log" 2>&1; cat "$W/one.log" >> "$W/tk.log"
  echo "$name: $(grep -E "^time|FLOP|rror" "$W/one.log" | tr "\n" " ")" >> "$W/summary.log"
}
stamp lab
L="m=4096 n=4096 k=4096 --shared none --grid 512 --flops 2*m*n*k L_PF=1"
sh() { local m=$1 n=$2 k=$3 g=$4 pf=$5
  echo "m=$m n=$n k=$k parts=1 chunk=$k tiles=$(( (m / 128) * (n / 256) )) A_T=0 B_T=1 M_C=$m N_C=$n K_C=$k G_PARTS=1 G_CHUNK=$k G_BM=128 G_BN=256 G_BK=32 G_TM=4 G_TN=4 G_GROUP=$g G_PF=$pf --flops 2*m*n*k"; }
run warm g/gemm_lab.wgsl:lean $L --warmup-ms 2500
shp() { local at=$1 bt=$2 pf=$3
  echo "m=4096 n=4096 k=4096 parts=1 chunk=4096 tiles=512 A_T=$at B_T=$bt M_C=4096 N_C=4096 K_C=4096 G_PARTS=1 G_CHUNK=4096 G_BM=128 G_BN=256 G_BK=32 G_TM=4 G_TN=4 G_GROUP=4 G_PF=$pf --flops 2*m*n*k"; }
for rep in a b; do
  run lean-$rep g/gemm_lab.wgsl:lean $L --warmup-ms 300
  for o in "0 1" "0 0" "1 0"; do for pf in 1 0; do
    run "tc-${o/ /}-pf$pf-$rep" linear::gemm16_tc $(shp $o $pf) --warmup-ms 300
  done; done
done
save
stamp tests
for t in gemm gemm_fused linear16 mixed pipeline_cache misuse; do
  left 240 || break
  timeout -k 10 90 tests/$t > "$W/test-$t.log" 2>&1; echo "$t: exit $?" >> "$W/tests.log"
  grep -E "test result|FAILED|panicked" "$W/test-$t.log" | sort | uniq -c >> "$W/tests.log"
done
save
left 60 && { stamp profile-new; timeout -k 10 30 ./train --preset gpt2-small --precision mixed --profile --checkpoint /tmp/ck/pn.safetensors > "$W/profile-new.log" 2>&1; }
left 60 && { stamp profile-old; KERNELS_GEMM_EXACT_TC=0 timeout -k 10 30 ./train --preset gpt2-small --precision mixed --profile --checkpoint /tmp/ck/po.safetensors > "$W/profile-old.log" 2>&1; }
save
left 100 && {
stamp bench-new; KERNELS_BENCH_JSON="$W/gemm-new.jsonl" timeout -k 10 45 ./gemm --configs "" > "$W/gemm-new.log" 2>&1
stamp bench-old; KERNELS_GEMM_EXACT_TC=0 KERNELS_BENCH_JSON="$W/gemm-old.jsonl" timeout -k 10 45 ./gemm --configs "" > "$W/gemm-old.log" 2>&1
}
save
left 70 && { stamp train; timeout -k 10 55 ./train --preset gpt2-small --precision mixed --steps 300 --log-every 50 --eval-every 100000 --sample-bytes 0 --data /tmp/corpus.txt --checkpoint /tmp/ck/n.safetensors > "$W/train-new.log" 2>&1; }
save
left 130 && { stamp torch; (cd "$root" && PYTHONUNBUFFERED=1 timeout -k 10 150 python3 scripts/device/torch_baselines.py --out "$W/torch.jsonl" --only train --models gpt2-small > "$W/torch.log" 2>&1); }
stamp end
save
cat "$W/gpu.txt" "$W/stats.log"; cut -c1-160 "$W/summary.log"; cat "$W/tests.log"
grep -E "^\|" "$W/gemm-new.log" | cut -c1-120 | head -26; grep -E "^\|" "$W/gemm-old.log" | cut -c1-120 | head -26
grep -E "one step|products  |attention  |memory-bound|rror" "$W/profile-new.log" "$W/profile-old.log"; grep -E "gemm16" "$W/profile-new.log"
grep -E "tokens/s|rror" "$W/train-new.log" | tail -2
grep -o '"impl": "[^"]*".*"model": "[^"]*".*"tokens_per_s": [0-9.]*' "$W/torch.jsonl" | sed 's/"dim".*"tokens_per_s"/ tokens_per_s/'
