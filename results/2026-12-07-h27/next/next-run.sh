#!/usr/bin/env bash
# Prepared, not run: does a constant trip count speed the tensor-core attention loops per step?
# The forward and dK/dV as the library writes them (lab copies, and the library's own through
# time_kernel) against copies whose walk is a compile-time constant (make_const.py), at the
# trainer's shape (B 8, S 1024, H 12, Dh 64), with the driver's register counts.
# Prepare (on the rust machine, from the checkout's root):
#   python3 results/2026-12-07-h27/next/make_const.py . .dev/next/fc
#   for k in flash_forward16_tc flash_forward16_tcs; do python3 results/2026-12-07-h27/lab/flatten.py .dev/next/fc/fwd.wgsl $k > .dev/next/fc/$k.E.wgsl; done
#   for k in flash_backward_dkdv16_tc flash_backward_dkdv16_tcs; do python3 results/2026-12-07-h27/lab/flatten.py .dev/next/fc/bwd.wgsl $k > .dev/next/fc/$k.E.wgsl; done
#   cargo build --release --example time_kernel -p kernels && cargo build --release -p pipeline-stats
#   mkdir -p .dev/next/bin; for b in target/release/examples/time_kernel target/release/pipeline-stats; do strip -o .dev/next/bin/$(basename $b) $b; xz -9 -f .dev/next/bin/$(basename $b); done
#   cp results/2026-12-07-h27/next/next-run.sh .dev/next/
# Call: run(command="bash .dev/next/next-run.sh", carry=[".gl", ".dev/next"]) (about a minute).
# Reading it: steps per workgroup are 2(qb + 1) (forward, query block qb of 16) and
# (S - 64·kb)/32 (dK/dV, key block kb) in the library, 32 in the constant copies: 26,112 against
# 49,152 steps in all, for each (1.88×). A constant copy taking less than 1.88× the library's
# time means its time per step is lower: the trip count costs the loop; then a causal walk with
# a constant count (two query blocks a workgroup, qb and 15 − qb: 34 steps of 32 keys together)
# is the change to try.
set -uo pipefail
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json CI=true XDG_RUNTIME_DIR=/tmp
N=$PWD/.dev/next
for b in time_kernel pipeline-stats; do xz -dc $N/bin/$b.xz > /tmp/$b; chmod +x /tmp/$b; done
W=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$W/gpu.txt" 2>&1
cp "$0" "$W/run.sh"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 100 > "$W/clocks.csv" 2>&1 &
stamp() { echo "$(date +%H:%M:%S.%3N) $*" >> "$W/phases.log"; }
save() { tar czf "$OUT/results.tar.gz" -C "$W" .; }
stamp stats
for k in flash_forward16_tc flash_forward16_tcs flash_backward_dkdv16_tc flash_backward_dkdv16_tcs; do
  case $k in
    flash_forward16_tcs) o="FL_DH=64,FW_CONST_STEPS=32" ;;
    flash_backward_dkdv16_tcs) o="FL_DH=64,FS_CONST_STEPS=32" ;;
    *) o="FL_DH=64" ;;
  esac
  echo "== $k" >> "$W/stats.log"; (cd $N/fc && timeout -k 5 30 /tmp/pipeline-stats -o $o $k.E.wgsl $k 2>&1 | grep -E "Register|rror") >> "$W/stats.log"
done
run() { local name=$1; shift
  echo "== $name: $*" >> "$W/tk.log"
  (cd $N/fc && timeout -k 5 40 /tmp/time_kernel "$@") > "$W/one.log" 2>&1; cat "$W/one.log" >> "$W/tk.log"
  echo "$name: $(grep -E "^time|rror" "$W/one.log" | tr "\n" " ")" >> "$W/summary.log"
}
stamp lab
S="batch=8 seq=1024 heads=12 kv_heads=12 head_dim=64 scale=0.125 FL_DH=64 len(q)=1572864 len(k)=1572864 len(v)=1572864 len(lse)=98304"
FW="$S len(o)=6291456 len(o16)=1572864"
BW="$S len(d_o)=1572864 len(delta)=98304 len(dk)=6291456 len(dv)=6291456 len(flag)=1"
run warm attention::flash_forward16_tc $FW --warmup-ms 2500
for rep in a b; do
  run fwd-lib-$rep attention::flash_forward16_tc $FW --warmup-ms 300
  run fwd-tc-$rep fwd.wgsl:flash_forward16_tc $FW --warmup-ms 300
  run fwd-tcs-$rep fwd.wgsl:flash_forward16_tcs $FW FW_CONST_STEPS=32 --warmup-ms 300
  run dkdv-lib-$rep backward_attention::flash_backward_dkdv16_tc $BW --warmup-ms 300
  run dkdv-tc-$rep bwd.wgsl:flash_backward_dkdv16_tc $BW --warmup-ms 300
  run dkdv-tcs-$rep bwd.wgsl:flash_backward_dkdv16_tcs $BW FS_CONST_STEPS=32 --warmup-ms 300
done
stamp end
save
cat "$W/gpu.txt" "$W/stats.log"; cut -c1-150 "$W/summary.log"
