#!/usr/bin/env bash
# The attention lab (make_attn.py's variants) at the trainer's shape (B 8, S 1024, H 12, Dh 64),
# each variant and the library's kernel timed twice with time_kernel, the driver's register
# counts from pipeline-stats. Prepare (rust machine, checkout root):
#   python3 results/2026-12-07-h28/lab/make_attn.py . .dev/h28/lab
#   (flatten each kernel: results/2026-12-07-h27/lab/flatten.py FILE KERNEL > .dev/h28/lab/KERNEL.E.wgsl)
#   time_kernel and pipeline-stats (release), stripped and xz'd into .dev/h28/bin
# Call: run(command="bash .dev/h28/run-lab.sh", carry=[".gl", ".dev/h28"]).
set -uo pipefail
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json CI=true XDG_RUNTIME_DIR=/tmp
N=$PWD/.dev/h28
for b in time_kernel pipeline-stats; do xz -dc $N/bin/$b.xz > /tmp/$b; chmod +x /tmp/$b; done
W=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$W/gpu.txt" 2>&1
cp "$0" "$W/run.sh"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 100 > "$W/clocks.csv" 2>&1 &
stamp() { echo "$(date +%H:%M:%S.%3N) $*" >> "$W/phases.log"; }
save() { tar czf "$OUT/results.tar.gz" -C "$W" .; }
trap save EXIT
run() { local name=$1; shift
  echo "== $name: $*" >> "$W/tk.log"
  (cd $N/lab && timeout -k 5 40 /tmp/time_kernel "$@") > "$W/one.log" 2>&1; cat "$W/one.log" >> "$W/tk.log"
  echo "$name: $(grep -E "^time|rror" "$W/one.log" | tr "\n" " ")" >> "$W/summary.log"
}
S="batch=8 seq=1024 heads=12 kv_heads=12 head_dim=64 scale=0.125 FL_DH=64 len(q)=1600000 len(k)=1600000 len(v)=1600000 len(lse)=98304"
FW="$S len(o)=6291456 len(o16)=1572864"
BW="$S len(d_o)=1600000 len(delta)=98304 len(dk)=6291456 len(dv)=6291456 len(flag)=1"
BQ="$S len(d_o)=1600000 len(delta)=98304 len(dq)=6291456"
FWD="L C E N D EN DE DEN CDEN DENU DU"
DKDV="L C E U CE EU"
DQ="L C E U EU"
stamp stats
for t in $FWD; do k=flash_forward16_tc_$t; echo "== $k" >> "$W/stats.log"; (cd $N/lab && timeout -k 5 30 /tmp/pipeline-stats -o FL_DH=64 $([[ $t == *C* ]] && echo -o FW_CONST_STEPS=32) $k.E.wgsl $k 2>&1 | grep -E "egister|rror" | head -3) >> "$W/stats.log"; done
for t in $DKDV; do k=flash_backward_dkdv16_tc_$t; echo "== $k" >> "$W/stats.log"; (cd $N/lab && timeout -k 5 30 /tmp/pipeline-stats -o FL_DH=64 $([[ $t == *C* ]] && echo -o FS_CONST_STEPS=32) $k.E.wgsl $k 2>&1 | grep -E "egister|rror" | head -3) >> "$W/stats.log"; done
for t in $DQ; do k=flash_backward_dq16_tc_$t; echo "== $k" >> "$W/stats.log"; (cd $N/lab && timeout -k 5 30 /tmp/pipeline-stats -o FL_DH=64 $([[ $t == *C* ]] && echo -o FS_CONST_STEPS=32) $k.E.wgsl $k 2>&1 | grep -E "egister|rror" | head -3) >> "$W/stats.log"; done
stamp lab
run warm attention::flash_forward16_tc $FW --warmup-ms 2500
for rep in a b; do
  run fwd-lib-$rep attention::flash_forward16_tc $FW
  for t in $FWD; do run fwd-$t-$rep fwd.wgsl:flash_forward16_tc_$t $FW $([[ $t == *C* ]] && echo FW_CONST_STEPS=32); done
  run dkdv-lib-$rep backward_attention::flash_backward_dkdv16_tc $BW
  for t in $DKDV; do run dkdv-$t-$rep dkdv.wgsl:flash_backward_dkdv16_tc_$t $BW $([[ $t == *C* ]] && echo FS_CONST_STEPS=32); done
  run dq-lib-$rep backward_attention::flash_backward_dq16_tc $BQ
  for t in $DQ; do run dq-$t-$rep dq.wgsl:flash_backward_dq16_tc_$t $BQ $([[ $t == *C* ]] && echo FS_CONST_STEPS=32); done
done
stamp end
cat "$W/gpu.txt" "$W/stats.log"; cut -c1-160 "$W/summary.log"
