#!/usr/bin/env bash
# GEMM bisect 5: u7 (lean entry), u8 (and plain tile stores), u12 (u8, folded counts), lean with
# and without the shared preamble; driver register counts of each. 4096^3 X·Wt.
set -uo pipefail
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json CI=true XDG_RUNTIME_DIR=/tmp
cd .dev/g2
W=$OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$W/gpu.txt" 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 100 > "$W/clocks.csv" 2>&1 &
TK=./time_kernel
BASE="m=4096 n=4096 k=4096 parts=1 chunk=4096 tiles=512 A_T=0 B_T=1 M_C=4096 N_C=4096 K_C=4096 G_BM=128 G_BN=256 G_BK=32 G_TM=4 G_TN=4 G_GROUP=4 G_EXACT=1 --flops 2*m*n*k"
O="A_T=0,B_T=1,G_BM=128,G_BN=256,G_BK=32,G_TM=4,G_TN=4,G_PF=1,G_GROUP=4,M_C=4096,N_C=4096,K_C=4096,G_EXACT=1"
for v in u7 u8 u12; do echo "== $v" >> "$W/stats.log"; timeout 60 ./pipeline-stats -o $O $v/g16e.wgsl gemm16 2>&1 | grep -E "Register|Shared|Spill|Local|error" >> "$W/stats.log"; done
echo "== lean" >> "$W/stats.log"; timeout 60 ./pipeline-stats -o L_PF=1 leanE.wgsl lean 2>&1 | grep -E "Register|Shared|Spill|Local|error" >> "$W/stats.log"
run() { local name=$1; shift
  echo "== $name: $*" >> "$W/tk.log"
  timeout 40 $TK "$@" >> "$W/tk.log" 2>&1
  grep -E "^time|FLOP" "$W/tk.log" | tail -2 | tr '\n' ' ' | sed "s/^/$name: /" >> "$W/summary.log"; echo >> "$W/summary.log"
}
run warm lean_rt.wgsl:lean m=4096 n=4096 k=4096 --shared none --grid 512 --flops 2*m*n*k L_PF=1 --warmup-ms 2500
run lean-pf1 gemm_lab.wgsl:lean m=4096 n=4096 k=4096 --shared none --grid 512 --flops 2*m*n*k L_PF=1 --warmup-ms 400
run lean-shared u8/lean.wgsl:lean m=4096 n=4096 k=4096 --grid 512 --flops 2*m*n*k L_PF=1 --warmup-ms 400
for v in u7 u8 u12; do run $v-pf1 $v/g16.wgsl:gemm16 $BASE G_PF=1 --warmup-ms 400; done
run lean-pf1b gemm_lab.wgsl:lean m=4096 n=4096 k=4096 --shared none --grid 512 --flops 2*m*n*k L_PF=1 --warmup-ms 400
run u8-pf1b u8/g16.wgsl:gemm16 $BASE G_PF=1 --warmup-ms 400
cat "$W/stats.log" "$W/summary.log"
grep -iE "error|panic" "$W/tk.log" | head -5
