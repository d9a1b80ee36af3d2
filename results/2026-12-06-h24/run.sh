#!/usr/bin/env bash
# GEMM bisect (v1..v7 from u8 toward lean), flash forward: the library's resident form against
# the subgroup-row form (lab copies + the new library kernel), the tensor-core tests, the attention
# bench with SDPA, and the mixed step's profile.
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
cp .dev/commit "$W/commit.txt"; cp .dev/run_s1.sh "$W/run.sh"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 100 > "$W/clocks.csv" 2>&1 &
stamp() { echo "$(date +%H:%M:%S.%3N) $*" >> "$W/phases.log"; }
save() { tar czf "$FINAL/results.tar.gz" -C "$W" .; }
G=$root/.dev/g2
TK=$G/time_kernel
BASE="m=4096 n=4096 k=4096 parts=1 chunk=4096 tiles=512 A_T=0 B_T=1 M_C=4096 N_C=4096 K_C=4096 G_BM=128 G_BN=256 G_BK=32 G_TM=4 G_TN=4 G_GROUP=4 --flops 2*m*n*k"
O="A_T=0,B_T=1,G_BM=128,G_BN=256,G_BK=32,G_TM=4,G_TN=4,G_PF=1,G_GROUP=4,M_C=4096,N_C=4096,K_C=4096,G_EXACT=1"
FA="batch=8 seq=1024 heads=12 kv_heads=12 head_dim=64 scale=0.125 FL_DH=64 len(q)=1572864 len(k)=1572864 len(v)=1572864 len(o)=6291456 len(lse)=98304 len(o16)=1572864"
stamp stats
for v in v1 v2 v3 v5 v6 v7; do echo "== $v" >> "$W/stats.log"; (cd $G && timeout 60 ./pipeline-stats -o $O $v/g16e.wgsl gemm16 2>&1 | grep -E "Register|error") >> "$W/stats.log"; done
for k in flash_forward16_sg flash_forward16_tc; do echo "== $k" >> "$W/stats.log"; (cd $root/.dev/f3 && timeout 60 $G/pipeline-stats -o FL_DH=64 $k.E.wgsl $k 2>&1 | grep -E "Register|Shared|error") >> "$W/stats.log"; done
run() { local name=$1; shift
  echo "== $name: $*" >> "$W/tk.log"
  (cd $G && timeout 60 $TK "$@") >> "$W/tk.log" 2>&1
  grep -E "^time|FLOP" "$W/tk.log" | tail -2 | tr '\n' ' ' | sed "s/^/$name: /" >> "$W/tk-summary.log"; echo >> "$W/tk-summary.log"
}
stamp lab
run warm lean_rt.wgsl:lean m=4096 n=4096 k=4096 --shared none --grid 512 --flops 2*m*n*k L_PF=1 --warmup-ms 2500
run lean gemm_lab.wgsl:lean m=4096 n=4096 k=4096 --shared none --grid 512 --flops 2*m*n*k L_PF=1 --warmup-ms 400
run u8 u8/g16.wgsl:gemm16 $BASE G_EXACT=1 G_PF=1 --warmup-ms 400
for v in v1 v5; do run $v $v/g16.wgsl:gemm16 $BASE G_EXACT=1 G_PF=1 --warmup-ms 400; done
for v in v2 v3 v6 v7; do run $v $v/g16.wgsl:gemm16 $BASE G_PF=1 --warmup-ms 400; done
run fwd-lib-resident attention::flash_forward16_tc $FA --warmup-ms 400
run fwd-lab-resident ../f3/fwd.wgsl:flash_forward16_tc $FA --warmup-ms 400
run fwd-lab-sg ../f3/fwd.wgsl:flash_forward16_sg $FA --warmup-ms 400
run fwd-lib-resident-b attention::flash_forward16_tc $FA --warmup-ms 400
run fwd-lab-sg-b ../f3/fwd.wgsl:flash_forward16_sg $FA --warmup-ms 400
BA="batch=8 seq=1024 heads=12 kv_heads=12 head_dim=64 scale=0.125 FL_DH=64 len(q)=1572864 len(k)=1572864 len(v)=1572864 len(d_o)=1572864 len(lse)=98304 len(delta)=98304"
for rep in a b; do
  run dq-lab-$rep ../f3/bwd.wgsl:flash_backward_dq16_tc $BA "len(dq)=6291456" --warmup-ms 300
  run dq-merged-$rep ../f3/bwd.wgsl:flash_backward_dq16_m $BA "len(dq)=6291456" --warmup-ms 300
  run dkdv-lab-$rep ../f3/bwd.wgsl:flash_backward_dkdv16_tc $BA "len(dk)=6291456" "len(dv)=6291456" "len(flag)=1" --warmup-ms 300
  run dkdv-merged-$rep ../f3/bwd.wgsl:flash_backward_dkdv16_m $BA "len(dk)=6291456" "len(dv)=6291456" "len(flag)=1" --warmup-ms 300
done
save
cd "$bins"
stamp tests
for t in flash_attention kernels-train.flash; do
  timeout 150 tests/$t --nocapture > "$W/test-$t.log" 2>&1; echo "$t: exit $?" >> "$W/tests.log"
  grep -E "test result|FAILED|panicked" "$W/test-$t.log" | sort | uniq -c >> "$W/tests.log"
done
save
stamp bench-attention
KERNELS_BENCH_JSON="$W/attention.jsonl" timeout 120 ./attention > "$W/bench.log" 2>&1
save
stamp profile-mixed
timeout 40 ./train --preset gpt2-small --precision mixed --profile --checkpoint /tmp/ck/p.safetensors > "$W/profile-mixed.log" 2>&1
save
stamp sdpa
(cd "$root" && PYTHONUNBUFFERED=1 timeout 100 python3 scripts/device/sdpa_baseline.py --out "$W/sdpa.jsonl" > "$W/sdpa.log" 2>&1)
stamp end
save
cat "$W/gpu.txt" "$W/stats.log" "$W/tk-summary.log" "$W/tests.log"
grep -E "^\|" "$W/bench.log" | head -14
grep -E "one step|products|attention |memory-bound|flash" "$W/profile-mixed.log" | head -12
grep -E "fwd_bwd" "$W/sdpa.jsonl" | cut -c1-200
