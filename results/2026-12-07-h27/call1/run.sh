#!/usr/bin/env bash
# One call: does writing the hot function into the entry point move the f16 core (-h25's cut-down
# core u8, and u8o with the stride overrides) to the lean kernel's rate, and the attention
# kernels with it? Register counts, then time_kernel of each pair against the library's kernel.
# Carry: .gl .dev/h27 (make_inline.py's output, bin/ with time_kernel and pipeline-stats, and
# g/gemm_lab.wgsl, -h17's lean kernel).
set -uo pipefail
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json CI=true XDG_RUNTIME_DIR=/tmp
H=$PWD/.dev/h27
for b in time_kernel pipeline-stats; do xz -dc $H/bin/$b.xz > /tmp/$b; chmod +x /tmp/$b; done
W=$OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$W/gpu.txt" 2>&1
git rev-parse --short HEAD > "$W/commit.txt" 2>/dev/null; cp "$0" "$W/run.sh"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 100 > "$W/clocks.csv" 2>&1 &
stamp() { echo "$(date +%H:%M:%S.%3N) $*" >> "$W/phases.log"; }
PS=/tmp/pipeline-stats
TK=/tmp/time_kernel
stamp stats
O="A_T=0,B_T=1,G_BM=128,G_BN=256,G_BK=32,G_TM=4,G_TN=4,G_PF=1,G_GROUP=4,M_C=4096,N_C=4096,K_C=4096,G_EXACT=1"
for v in u8 u8o u8i u8oi; do echo "== $v" >> "$W/stats.log"; (cd $H/g && timeout -k 5 30 $PS -o $O $v/g16e.wgsl gemm16 2>&1 | grep -E "Register|error") >> "$W/stats.log"; done
for k in flash_forward16_tc flash_forward16_tci flash_backward_dkdv16_tc flash_backward_dkdv16_tci flash_backward_dq16_tc flash_backward_dq16_tci; do
  echo "== $k" >> "$W/stats.log"; (cd $H/f && timeout -k 5 30 $PS -o FL_DH=64 $k.E.wgsl $k 2>&1 | grep -E "Register|error") >> "$W/stats.log"
done
run() { local name=$1 dir=$2; shift 2
  echo "== $name: $*" >> "$W/tk.log"
  (cd $dir && timeout -k 5 40 $TK "$@") > "$W/one.log" 2>&1; cat "$W/one.log" >> "$W/tk.log"
  echo "$name: $(grep -E "^time|FLOP|error" "$W/one.log" | tr "\n" " ")" >> "$W/summary.log"
}
stamp gemm
BASE="m=4096 n=4096 k=4096 parts=1 chunk=4096 tiles=512 A_T=0 B_T=1 M_C=4096 N_C=4096 K_C=4096 G_BM=128 G_BN=256 G_BK=32 G_TM=4 G_TN=4 G_GROUP=4 G_EXACT=1 G_PF=1 --flops 2*m*n*k"
L="m=4096 n=4096 k=4096 --shared none --grid 512 --flops 2*m*n*k L_PF=1"
run warm $H/g gemm_lab.wgsl:lean $L --warmup-ms 2500
for rep in a b; do
  run lean-$rep $H/g gemm_lab.wgsl:lean $L --warmup-ms 300
  for v in u8 u8i u8o u8oi; do run $v-$rep $H/g $v/g16.wgsl:gemm16 $BASE --warmup-ms 300; done
  run lib-$rep $H/g linear::gemm16 $BASE G_PARTS=1 G_CHUNK=4096 --warmup-ms 300
done
stamp attention
S="batch=8 seq=1024 heads=12 kv_heads=12 head_dim=64 scale=0.125 FL_DH=64 len(q)=1572864 len(k)=1572864 len(v)=1572864 len(lse)=98304"
FW="$S len(o)=6291456 len(o16)=1572864 --flops 12884901888"
BW="$S len(d_o)=1572864 len(delta)=98304"
for rep in a b; do
  run fwd-lib-$rep $H/f attention::flash_forward16_tc $FW --warmup-ms 300
  run fwd-tc-$rep $H/f fwd.wgsl:flash_forward16_tc $FW --warmup-ms 300
  run fwd-tci-$rep $H/f fwd.wgsl:flash_forward16_tci $FW --warmup-ms 300
  run dkdv-lib-$rep $H/f backward_attention::flash_backward_dkdv16_tc $BW "len(dk)=6291456" "len(dv)=6291456" "len(flag)=1" --warmup-ms 300
  run dkdv-tc-$rep $H/f bwd.wgsl:flash_backward_dkdv16_tc $BW "len(dk)=6291456" "len(dv)=6291456" "len(flag)=1" --warmup-ms 300
  run dkdv-tci-$rep $H/f bwd.wgsl:flash_backward_dkdv16_tci $BW "len(dk)=6291456" "len(dv)=6291456" "len(flag)=1" --warmup-ms 300
  run dq-lib-$rep $H/f backward_attention::flash_backward_dq16_tc $BW "len(dq)=6291456" --warmup-ms 300
  run dq-tc-$rep $H/f bwd.wgsl:flash_backward_dq16_tc $BW "len(dq)=6291456" --warmup-ms 300
  run dq-tci-$rep $H/f bwd.wgsl:flash_backward_dq16_tci $BW "len(dq)=6291456" --warmup-ms 300
done
stamp end
cat "$W/gpu.txt" "$W/stats.log"; cut -c1-170 "$W/summary.log"
