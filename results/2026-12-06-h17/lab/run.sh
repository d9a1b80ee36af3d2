#!/usr/bin/env bash
# GEMM lab: the library's gemm16 against a lean kernel and its ablations, 4096^3 X·Wt.
set -uo pipefail
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json CI=true XDG_RUNTIME_DIR=/tmp
cd .dev/g
W=$OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$W/gpu.txt" 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 100 > "$W/clocks.csv" 2>&1 &
cp run.sh gemm_lab.wgsl "$W/"
TK=./time_kernel
LIB="linear::gemm16 m=4096 n=4096 k=4096 parts=1 tiles=512 A_T=0 B_T=1 M_C=4096 N_C=4096 K_C=4096 G_BM=128 G_BN=256 G_BK=32 G_TM=4 G_TN=4 G_GROUP=4 --flops 2*m*n*k"
LEAN="gemm_lab.wgsl:lean m=4096 n=4096 k=4096 --shared none --flops 2*m*n*k"
run() { # name, args...
  local name=$1; shift
  echo "== $name: $*" >> "$W/lab.log"
  timeout 60 $TK "$@" >> "$W/lab.log" 2>&1
  grep -E "^time|FLOP" "$W/lab.log" | tail -2 | tr '\n' ' ' | sed "s/^/$name: /" >> "$W/summary.log"; echo >> "$W/summary.log"
}
run warm $LIB G_PF=0 --warmup-ms 3000
for rep in 1 2; do
run lib-pf0 $LIB G_PF=0 --warmup-ms 1000
run lib-pf1 $LIB G_PF=1 --warmup-ms 1000
run lean-pf0 $LEAN --grid 512 L_PF=0 --warmup-ms 1000
run lean-pf1 $LEAN --grid 512 L_PF=1 --warmup-ms 1000
run lean-noglobal $LEAN --grid 512 AB=1 --warmup-ms 1000
run lean-nocompute $LEAN --grid 512 AB=2 --warmup-ms 1000
run lean-nobarrier $LEAN --grid 512 AB=4 --warmup-ms 1000
run lean-compute+bar $LEAN --grid 512 AB=9 --warmup-ms 1000
run lean-compute $LEAN --grid 512 AB=13 --warmup-ms 1000
run lean-staging-only $LEAN --grid 512 AB=2 L_PF=1 --warmup-ms 1000
run lean512-pf1 $LEAN --grid 512 L_WG=512 L_TN=2 L_PF=1 --warmup-ms 1000
run lean512-pf0 $LEAN --grid 512 L_WG=512 L_TN=2 L_PF=0 --warmup-ms 1000
run lean128-t4x2 $LEAN --grid 1024 L_BN=128 L_TN=2 L_PF=0 --warmup-ms 1000
run lean128-t4x2-pf $LEAN --grid 1024 L_BN=128 L_TN=2 L_PF=1 --warmup-ms 1000
done
for o in "L_PF=0" "L_PF=1" "L_WG=512,L_TN=2,L_PF=1" "L_BN=128,L_TN=2,L_PF=0"; do
  ./pipeline-stats lean.wgsl lean -o $o 2>&1 | grep -E "overrides|Register|Shared" >> "$W/stats.log"
done
./pipeline-stats linear::gemm16 -o A_T=0,B_T=1,M_C=4096,N_C=4096,K_C=4096,G_BM=128,G_BN=256,G_BK=32,G_TM=4,G_TN=4,G_PF=0,G_GROUP=4 2>&1 | grep -E "overrides|Register|Shared" >> "$W/stats.log"
kill %1
cat "$W/summary.log" "$W/stats.log"
