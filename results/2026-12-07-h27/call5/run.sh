#!/usr/bin/env bash
# The X series (make_x.py): the library's own core with exact-only operand loads, at 4096^3 and at
# two of the trainer's X·Wᵀ shapes, beside the lean kernel. Carry: .gl .dev/h27.
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
O="A_T=0,B_T=1,G_BM=128,G_BN=256,G_BK=32,G_TM=4,G_TN=4,G_PF=1,G_GROUP=4,M_C=4096,N_C=4096,K_C=4096,G_EXACT=1,G_PARTS=1,G_CHUNK=4096"
for v in x0 x1 x2 x3 x4; do echo "== $v" >> "$W/stats.log"; (cd $H/x && timeout -k 5 30 $PS -o $O $v/g16e.wgsl gemm16 2>&1 | grep -E "Register|error") >> "$W/stats.log"; done
run() { local name=$1; shift
  echo "== $name: $*" >> "$W/tk.log"
  (cd $H/x && timeout -k 5 40 $TK "$@") > "$W/one.log" 2>&1; cat "$W/one.log" >> "$W/tk.log"
  echo "$name: $(grep -E "^time|FLOP|error" "$W/one.log" | tr "\n" " ")" >> "$W/summary.log"
}
stamp gemm
L="m=4096 n=4096 k=4096 --shared none --grid 512 --flops 2*m*n*k L_PF=1"
run warm ../g/gemm_lab.wgsl:lean $L --warmup-ms 2500
shape() { # NAME M N K GROUP
  local m=$2 n=$3 k=$4 g=$5
  echo "m=$m n=$n k=$k parts=1 chunk=$k tiles=$(( (m / 128) * (n / 256) )) A_T=0 B_T=1 M_C=$m N_C=$n K_C=$k G_PARTS=1 G_CHUNK=$k G_BM=128 G_BN=256 G_BK=32 G_TM=4 G_TN=4 G_GROUP=$g G_EXACT=1 G_PF=1 --flops 2*m*n*k"
}
for rep in a b; do
  run lean-$rep ../g/gemm_lab.wgsl:lean $L --warmup-ms 300
  for v in x0 x1 x2 x3 x4; do run $v-4096-$rep $v/g16.wgsl:gemm16 $(shape x 4096 4096 4096 4) --warmup-ms 300; done
  for v in x0 x1 x4; do run $v-qkv-$rep $v/g16.wgsl:gemm16 $(shape x 8192 3072 768 8) --warmup-ms 300; done
  for v in x0 x1 x4; do run $v-down-$rep $v/g16.wgsl:gemm16 $(shape x 8192 768 3072 4) --warmup-ms 300; done
done
stamp end
cat "$W/gpu.txt" "$W/stats.log"; cut -c1-150 "$W/summary.log"
