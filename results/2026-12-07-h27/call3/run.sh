#!/usr/bin/env bash
# The S series (make_s.py): which form of the operand loads keeps R6's rate with the edge path in.
# Carry: .gl .dev/h27.
set -uo pipefail
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json CI=true XDG_RUNTIME_DIR=/tmp
H=$PWD/.dev/h27
for b in time_kernel pipeline-stats; do xz -dc $H/bin/$b.xz > /tmp/$b; chmod +x /tmp/$b; done
W=$OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$W/gpu.txt" 2>&1
cp "$0" "$W/run.sh"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 100 > "$W/clocks.csv" 2>&1 &
stamp() { echo "$(date +%H:%M:%S.%3N) $*" >> "$W/phases.log"; }
PS=/tmp/pipeline-stats
TK=/tmp/time_kernel
stamp stats
O="A_T=0,B_T=1,G_BM=128,G_BN=256,G_BK=32,G_TM=4,G_TN=4,G_PF=1,G_GROUP=4,M_C=4096,N_C=4096,K_C=4096,G_EXACT=1"
for r in S1 S2 S3 S4; do echo "== $r" >> "$W/stats.log"; (cd $H/g/S && timeout -k 5 30 $PS -o $O $r.E.wgsl gemm16 2>&1 | grep -E "Register|error") >> "$W/stats.log"; done
run() { local name=$1; shift
  echo "== $name: $*" >> "$W/tk.log"
  (cd $H/g && timeout -k 5 40 $TK "$@") > "$W/one.log" 2>&1; cat "$W/one.log" >> "$W/tk.log"
  echo "$name: $(grep -E "^time|FLOP|error" "$W/one.log" | tr "\n" " ")" >> "$W/summary.log"
}
stamp gemm
OV="A_T=0 B_T=1 M_C=4096 N_C=4096 K_C=4096 G_BM=128 G_BN=256 G_BK=32 G_TM=4 G_TN=4 G_GROUP=4 G_EXACT=1 G_PF=1 --flops 2*m*n*k --shared none"
L="m=4096 n=4096 k=4096 --shared none --grid 512 --flops 2*m*n*k L_PF=1"
run warm gemm_lab.wgsl:lean $L --warmup-ms 2500
for rep in a b; do
  run lean-$rep gemm_lab.wgsl:lean $L --warmup-ms 300
  run R1-$rep R/R1.wgsl:gemm16 m=4096 n=4096 k=4096 parts=1 chunk=4096 tiles=512 $OV --warmup-ms 300
  run R6-$rep R/R6.wgsl:gemm16 m=4096 n=4096 k=4096 --grid 512 $OV --warmup-ms 300
  for r in S1 S2 S3 S4; do run $r-$rep S/$r.wgsl:gemm16 m=4096 n=4096 k=4096 parts=1 chunk=4096 tiles=512 $OV --warmup-ms 300; done
done
stamp end
cat "$W/gpu.txt" "$W/stats.log"; cut -c1-150 "$W/summary.log"
