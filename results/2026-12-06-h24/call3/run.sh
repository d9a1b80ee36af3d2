#!/usr/bin/env bash
# GEMM bisect 7: v8 (v6 with g_group's body in the entry point), lean_fn (the lean kernel with
# its body in a function called by the entry point). 4096^3 X·Wt.
set -uo pipefail
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json CI=true XDG_RUNTIME_DIR=/tmp
cd .dev/g2
W=$OUT
cp run9.sh "$W/run.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$W/gpu.txt" 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 100 > "$W/clocks.csv" 2>&1 &
TK=./time_kernel
BASE="m=4096 n=4096 k=4096 parts=1 chunk=4096 tiles=512 A_T=0 B_T=1 M_C=4096 N_C=4096 K_C=4096 G_BM=128 G_BN=256 G_BK=32 G_TM=4 G_TN=4 G_GROUP=4 --flops 2*m*n*k"
O="A_T=0,B_T=1,G_BM=128,G_BN=256,G_BK=32,G_TM=4,G_TN=4,G_PF=1,G_GROUP=4,M_C=4096,N_C=4096,K_C=4096"
echo "== v8" >> "$W/stats.log"; timeout 60 ./pipeline-stats -o $O v8/g16e.wgsl gemm16 2>&1 | grep -E "Register|error" >> "$W/stats.log"
echo "== lean_fn" >> "$W/stats.log"; timeout 60 ./pipeline-stats -o L_PF=1 lean_fnE.wgsl lean 2>&1 | grep -E "Register|error" >> "$W/stats.log"
run() { local name=$1; shift
  echo "== $name: $*" >> "$W/tk.log"
  timeout 40 $TK "$@" > "$W/one.log" 2>&1; cat "$W/one.log" >> "$W/tk.log"
  echo "$name: $(grep -E "^time|FLOP|error" "$W/one.log" | tr '\n' ' ')" >> "$W/summary.log"
}
run warm lean_rt.wgsl:lean m=4096 n=4096 k=4096 --shared none --grid 512 --flops 2*m*n*k L_PF=1 --warmup-ms 2500
run lean gemm_lab.wgsl:lean m=4096 n=4096 k=4096 --shared none --grid 512 --flops 2*m*n*k L_PF=1 --warmup-ms 400
run lean_fn lean_fn.wgsl:lean m=4096 n=4096 k=4096 --shared none --grid 512 --flops 2*m*n*k L_PF=1 --warmup-ms 400
run v6 v6/g16.wgsl:gemm16 $BASE G_PF=1 --warmup-ms 400
run v8 v8/g16.wgsl:gemm16 $BASE G_PF=1 --warmup-ms 400
run v8-pf0 v8/g16.wgsl:gemm16 $BASE G_PF=0 --warmup-ms 400
run lean_fn-pf0 lean_fn.wgsl:lean m=4096 n=4096 k=4096 --shared none --grid 512 --flops 2*m*n*k L_PF=0 --warmup-ms 400
run lean-b gemm_lab.wgsl:lean m=4096 n=4096 k=4096 --shared none --grid 512 --flops 2*m*n*k L_PF=1 --warmup-ms 400
run v8-b v8/g16.wgsl:gemm16 $BASE G_PF=1 --warmup-ms 400
cat "$W/stats.log" "$W/summary.log"
