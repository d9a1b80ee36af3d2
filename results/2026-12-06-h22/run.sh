#!/usr/bin/env bash
# GEMM bisect 2: u3 plus constant addressing (u4), constant loop bounds (u5), direct stores (u6);
# the lean kernel with runtime K (lean_rt). 4096^3 X·Wt.
set -uo pipefail
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json CI=true XDG_RUNTIME_DIR=/tmp
cd .dev/g2
W=$OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$W/gpu.txt" 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 100 > "$W/clocks.csv" 2>&1 &
TK=./time_kernel
ARGS="m=4096 n=4096 k=4096 parts=1 chunk=4096 tiles=512 A_T=0 B_T=1 M_C=4096 N_C=4096 K_C=4096 G_BM=128 G_BN=256 G_BK=32 G_TM=4 G_TN=4 G_GROUP=4 G_EXACT=1 G_PARTS=1 G_CHUNK=4096 --flops 2*m*n*k"
run() { local name=$1; shift
  echo "== $name: $*" >> "$W/tk.log"
  timeout 60 $TK "$@" >> "$W/tk.log" 2>&1
  grep -E "^time|FLOP" "$W/tk.log" | tail -2 | tr '\n' ' ' | sed "s/^/$name: /" >> "$W/summary.log"; echo >> "$W/summary.log"
}
run warm linear::gemm16 $ARGS G_PF=0 --warmup-ms 3000
for rep in 1 2; do
  for v in u3 u4 u5 u6; do
    run $v-pf1 $v/g16.wgsl:gemm16 $ARGS G_PF=1 --warmup-ms 800
  done
  run u6-pf0 u6/g16.wgsl:gemm16 $ARGS G_PF=0 --warmup-ms 800
  run lean-pf1 gemm_lab.wgsl:lean m=4096 n=4096 k=4096 --shared none --grid 512 --flops 2*m*n*k L_PF=1 --warmup-ms 800
  run leanrt-pf1 lean_rt.wgsl:lean m=4096 n=4096 k=4096 --shared none --grid 512 --flops 2*m*n*k L_PF=1 --warmup-ms 800
done
cat "$W/summary.log"
