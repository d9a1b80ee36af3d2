#!/usr/bin/env bash
# The f16 core with its split and exact cover compiled in: time_kernel ablation at 4096^3, the
# tensor-core tests, prefetch shapes at every bench shape (a table), the mixed step with that table.
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
cp .dev/run_h3.sh "$W/run.sh"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 100 > "$W/clocks.csv" 2>&1 &
stamp() { echo "$(date +%H:%M:%S.%3N) $*" >> "$W/phases.log"; }
save() { tar czf "$FINAL/results.tar.gz" -C "$W" .; }
TK=$root/.dev/g/time_kernel
LIB="linear::gemm16 m=4096 n=4096 k=4096 parts=1 chunk=4096 tiles=512 A_T=0 B_T=1 M_C=4096 N_C=4096 K_C=4096 G_BM=128 G_BN=256 G_BK=32 G_TM=4 G_TN=4 G_GROUP=4 --flops 2*m*n*k"
run() { local name=$1; shift
  echo "== $name: $*" >> "$W/tk.log"
  timeout 60 $TK "$@" >> "$W/tk.log" 2>&1
  grep -E "^time|FLOP" "$W/tk.log" | tail -2 | tr '\n' ' ' | sed "s/^/$name: /" >> "$W/tk-summary.log"; echo >> "$W/tk-summary.log"
}
stamp tk
run warm $LIB G_PF=0 --warmup-ms 3000
LEAN="$root/.dev/g/gemm_lab.wgsl:lean m=4096 n=4096 k=4096 --shared none --grid 512 --flops 2*m*n*k"
LEANU="$root/.dev/g/gemm_lab_unrolled.wgsl:lean m=4096 n=4096 k=4096 --shared none --grid 512 --flops 2*m*n*k"
for rep in 1 2; do
  run lib-pf0 $LIB G_PF=0 G_EXACT=1 G_PARTS=1 G_CHUNK=4096 --warmup-ms 1000
  run lib-pf1 $LIB G_PF=1 G_EXACT=1 G_PARTS=1 G_CHUNK=4096 --warmup-ms 1000
  run lib-pf1-g8 $LIB G_PF=1 G_GROUP=8 G_EXACT=1 G_PARTS=1 G_CHUNK=4096 --warmup-ms 1000
  run lean-pf1 $LEAN L_PF=1 --warmup-ms 1000
  run lean-unrolled-pf1 $LEANU L_PF=1 --warmup-ms 1000
  run lean-unrolled-pf0 $LEANU L_PF=0 --warmup-ms 1000
  for v in a b c; do
    G="$root/.dev/g/g16$v/g16.wgsl:gemm16 m=4096 n=4096 k=4096 parts=1 chunk=4096 tiles=512 A_T=0 B_T=1 M_C=4096 N_C=4096 K_C=4096 G_BM=128 G_BN=256 G_BK=32 G_TM=4 G_TN=4 G_GROUP=4 G_EXACT=1 G_PARTS=1 G_CHUNK=4096 --flops 2*m*n*k"
    run g16$v-pf1 $G G_PF=1 --warmup-ms 1000
    run g16$v-pf0 $G G_PF=0 --warmup-ms 1000
  done
done
save
cd "$bins"
for t in gemm gemm_fused; do
  stamp "test $t"
  timeout 120 "tests/$t" --nocapture > "$W/test-$t.log" 2>&1
  echo "$t: exit $?" >> "$W/tests.log"
  grep -E "test result|FAILED|panicked" "$W/test-$t.log" | sort | uniq -c >> "$W/tests.log"
done
save
stamp configs
KERNELS_BENCH_JSON="$W/configs.jsonl" timeout 240 ./gemm --configs "128,256,32,4,4,1,4,256 128,256,32,4,4,1,8,256 256,128,32,4,4,1,4,256 128,256,32,4,4,0,8,256" --table "$W/table.txt" > "$W/configs.log" 2>&1
echo "configs exit $?" >> "$W/tests.log"
save
stamp profile-mixed
KERNELS_GEMM_TABLE="$W/table.txt" timeout 60 ./train --preset gpt2-small --precision mixed --profile --checkpoint /tmp/ck/p.safetensors > "$W/profile-mixed.log" 2>&1
save
stamp train-mixed
KERNELS_GEMM_TABLE="$W/table.txt" timeout 90 ./train --preset gpt2-small --precision mixed --steps 300 --log-every 50 --eval-every 100000 --sample-bytes 0 --data /tmp/corpus.txt --checkpoint /tmp/ck/ln.safetensors > "$W/loss-new.log" 2>&1
stamp end
save
cat "$W/gpu.txt" "$W/tk-summary.log" "$W/tests.log"; grep "^|" "$W/configs.log" | head -80; cat "$W/table.txt"
grep -E "one step|products|attention |memory-bound|idle|gemm16" "$W/profile-mixed.log"
grep -E "step +300 |tokens/s" "$W/loss-new.log" | tail -n 2
