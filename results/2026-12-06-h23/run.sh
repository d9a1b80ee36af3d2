#!/usr/bin/env bash
# GEMM bisect + flash forward loads (time_kernel), the f16 core's tests with the new binaries,
# the mixed step profiled with the committed table and with prefetch everywhere, 300 steps with
# the better, PyTorch's baselines.
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
cp .dev/commit "$W/commit.txt"; cp .dev/run_h5.sh "$W/run.sh"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 100 > "$W/clocks.csv" 2>&1 &
stamp() { echo "$(date +%H:%M:%S.%3N) $*" >> "$W/phases.log"; }
save() { tar czf "$FINAL/results.tar.gz" -C "$W" .; }
G=$root/.dev/g2
TK=$G/time_kernel
BASE="m=4096 n=4096 k=4096 parts=1 chunk=4096 tiles=512 A_T=0 B_T=1 M_C=4096 N_C=4096 K_C=4096 G_BM=128 G_BN=256 G_BK=32 G_TM=4 G_TN=4 G_GROUP=4 G_EXACT=1 --flops 2*m*n*k"
ARGS="$BASE G_PARTS=1 G_CHUNK=4096"
FA="batch=8 seq=1024 heads=12 kv_heads=12 head_dim=64 scale=0.125 FL_DH=64 len(q)=1572864 len(k)=1572864 len(v)=1572864 len(o)=6291456 len(lse)=98304 len(o16)=1572864"
run() { local name=$1; shift
  echo "== $name: $*" >> "$W/tk.log"
  (cd $G && timeout 60 $TK "$@") >> "$W/tk.log" 2>&1
  grep -E "^time|FLOP" "$W/tk.log" | tail -2 | tr '\n' ' ' | sed "s/^/$name: /" >> "$W/tk-summary.log"; echo >> "$W/tk-summary.log"
}
stamp lab
run warm linear::gemm16 $ARGS G_PF=0 --warmup-ms 2000
for rep in 1; do
  run u6-pf1 u6/g16.wgsl:gemm16 $ARGS G_PF=1 --warmup-ms 500
  run u11-pf1 u11/g16.wgsl:gemm16 $BASE G_PF=1 --warmup-ms 500
  
  
  
  run lean-pf1 gemm_lab.wgsl:lean m=4096 n=4096 k=4096 --shared none --grid 512 --flops 2*m*n*k L_PF=1 --warmup-ms 500
  run fwd-lib attention::flash_forward16_tc $FA --warmup-ms 500
  run fwd-v0 f1/v0/fwd.wgsl:flash_forward16_tc $FA --warmup-ms 500
  run fwd-v1 f1/v1/fwd.wgsl:flash_forward16_tc $FA --warmup-ms 500
done
save
cd "$bins"
stamp "test gemm"
for t in gemm gemm_fused flash_attention; do
  timeout 90 tests/$t --nocapture > "$W/test-$t.log" 2>&1; echo "$t: exit $?" >> "$W/tests.log"
  grep -E "test result|FAILED|panicked" "$W/test-$t.log" | sort | uniq -c >> "$W/tests.log"
done
stamp profile-mixed
timeout 40 ./train --preset gpt2-small --precision mixed --profile --checkpoint /tmp/ck/p.safetensors > "$W/profile-mixed.log" 2>&1
stamp profile-mixed-pf1
KERNELS_GEMM_TABLE=$G/table_pf1.txt timeout 40 ./train --preset gpt2-small --precision mixed --profile --checkpoint /tmp/ck/p1.safetensors > "$W/profile-mixed-pf1.log" 2>&1
save
t0=$(grep -oE "[0-9.]+ ms of GPU time" "$W/profile-mixed.log" | head -1 | cut -d' ' -f1)
t1=$(grep -oE "[0-9.]+ ms of GPU time" "$W/profile-mixed-pf1.log" | head -1 | cut -d' ' -f1)
echo "step committed=$t0 pf1=$t1" >> "$W/tests.log"
TAB=""
if [ -n "$t1" ] && [ -n "$t0" ] && awk "BEGIN{exit !($t1 < $t0)}"; then TAB=$G/table_pf1.txt; fi
echo "train with table: ${TAB:-committed}" >> "$W/tests.log"
stamp train-mixed
env ${TAB:+KERNELS_GEMM_TABLE=$TAB} timeout 70 ./train --preset gpt2-small --precision mixed --steps 300 --log-every 50 --eval-every 100000 --sample-bytes 0 --data /tmp/corpus.txt --checkpoint /tmp/ck/ln.safetensors > "$W/loss-new.log" 2>&1
save
stamp torch
(cd "$root" && PYTHONUNBUFFERED=1 timeout 100 python3 scripts/device/torch_baselines.py --out "$W/torch.jsonl" --only train --models gpt2-small > "$W/torch.log" 2>&1)
stamp end
save
cat "$W/gpu.txt" "$W/tk-summary.log" "$W/tests.log"
grep -E "one step|products|attention |memory-bound|gemm16" "$W/profile-mixed.log" "$W/profile-mixed-pf1.log" | head -20
grep -E "step +300 |tokens/s" "$W/loss-new.log" | tail -n 2
grep -o '"impl": "[^"]*".*"model": "[^"]*".*"tokens_per_s": [0-9.]*' "$W/torch.jsonl" | sed 's/"dim".*"tokens_per_s"/ tokens_per_s/'
