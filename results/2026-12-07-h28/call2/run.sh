#!/usr/bin/env bash
# The tensor-core flash kernels' exact walk (FL_SEQ compiled in: two blocks a workgroup, a
# compile-time step count, loads without bounds tests, prefetch without guards) as it lands:
# register counts; time_kernel at the trainer's shape (B 8, S 1024, H 12, Dh 64) of the library's
# kernels with FL_SEQ=1024 and without (the general walk) beside the lab copies of the kernels
# before the change (`../lab/make_attn.py`'s `_L`); the flash tests on tensor cores; the mixed
# step's profile with and without (KERNELS_FLASH_EXACT=0, the same binaries); the attention bench
# both ways beside PyTorch's SDPA; 300 mixed steps; PyTorch's training rates.
# Carry: .gl .dev/bins.tar.xz .dev/corpus.txt .dev/commit .dev/h28 (lab/, bin2/time_kernel.xz,
# bin/pipeline-stats.xz)
set -uo pipefail
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json CI=true XDG_RUNTIME_DIR=/tmp
root=$PWD
H=$root/.dev/h28
bins=$(mktemp -d)
tar xJf .dev/bins.tar.xz -C "$bins"
xz -dc $H/bin2/time_kernel.xz > $bins/time_kernel; chmod +x $bins/time_kernel
cp .dev/corpus.txt /tmp/corpus.txt
W=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$W/gpu.txt" 2>&1
cp .dev/commit "$W/commit.txt"; cp "$0" "$W/run.sh"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 100 > "$W/clocks.csv" 2>&1 &
stamp() { echo "$(date +%H:%M:%S.%3N) $*" >> "$W/phases.log"; }
save() { tar czf "$OUT/results.tar.gz" -C "$W" .; }
trap save EXIT
DEADLINE=${DEADLINE:-570}
left() { [ $((DEADLINE - SECONDS)) -gt "$1" ]; }
cd "$bins"
stamp stats
for k in attention::flash_forward16_tc backward_attention::flash_backward_dkdv16_tc backward_attention::flash_backward_dq16_tc; do
  for s in 0 1024; do
    echo "== $k FL_SEQ=$s" >> "$W/stats.log"
    timeout -k 5 30 ./pipeline-stats -o FL_DH=64,FL_SEQ=$s $k 2>&1 | grep -E "Register|rror" >> "$W/stats.log"
  done
done
run() { local name=$1; shift
  echo "== $name: $*" >> "$W/tk.log"
  (cd $H/lab && timeout -k 5 40 $bins/time_kernel "$@") > "$W/one.log" 2>&1; cat "$W/one.log" >> "$W/tk.log"
  echo "$name: $(grep -E "^time|rror" "$W/one.log" | tr "\n" " ")" >> "$W/summary.log"
}
stamp lab
S="batch=8 seq=1024 heads=12 kv_heads=12 head_dim=64 scale=0.125 FL_DH=64 len(q)=1600000 len(k)=1600000 len(v)=1600000 len(lse)=98304"
FW="$S len(o)=6291456 len(o16)=1572864"
BW="$S len(d_o)=1600000 len(delta)=98304 len(dk)=6291456 len(dv)=6291456 len(flag)=1"
BQ="$S len(d_o)=1600000 len(delta)=98304 len(dq)=6291456"
run warm attention::flash_forward16_tc $FW FL_SEQ=1024 --warmup-ms 2500
for rep in a b; do
  run fwd-exact-$rep attention::flash_forward16_tc $FW FL_SEQ=1024
  run fwd-general-$rep attention::flash_forward16_tc $FW
  run fwd-before-$rep fwd.wgsl:flash_forward16_tc_L $FW
  run dkdv-exact-$rep backward_attention::flash_backward_dkdv16_tc $BW FL_SEQ=1024
  run dkdv-general-$rep backward_attention::flash_backward_dkdv16_tc $BW
  run dkdv-before-$rep dkdv.wgsl:flash_backward_dkdv16_tc_L $BW
  run dq-exact-$rep backward_attention::flash_backward_dq16_tc $BQ FL_SEQ=1024
  run dq-general-$rep backward_attention::flash_backward_dq16_tc $BQ
  run dq-before-$rep dq.wgsl:flash_backward_dq16_tc_L $BQ
done
save
stamp tests
for t in flash_attention kernels-train.flash kernels-train.mixed mixed; do
  left 300 || break
  timeout -k 10 120 tests/$t > "$W/test-$t.log" 2>&1; echo "$t: exit $?" >> "$W/tests.log"
  grep -E "test result|FAILED|panicked" "$W/test-$t.log" | sort | uniq -c >> "$W/tests.log"
done
save
left 60 && { stamp profile-new; timeout -k 10 30 ./train --preset gpt2-small --precision mixed --profile --checkpoint /tmp/ck/pn.safetensors > "$W/profile-new.log" 2>&1; }
left 60 && { stamp profile-old; KERNELS_FLASH_EXACT=0 timeout -k 10 30 ./train --preset gpt2-small --precision mixed --profile --checkpoint /tmp/ck/po.safetensors > "$W/profile-old.log" 2>&1; }
save
left 150 && {
stamp bench-new; KERNELS_BENCH_JSON="$W/attention-new.jsonl" timeout -k 10 60 ./attention > "$W/attention-new.log" 2>&1
stamp sdpa; (cd "$root" && PYTHONUNBUFFERED=1 timeout -k 10 60 python3 scripts/device/sdpa_baseline.py --out "$W/sdpa.jsonl" > "$W/sdpa.log" 2>&1)
stamp bench-old; KERNELS_FLASH_EXACT=0 KERNELS_BENCH_JSON="$W/attention-old.jsonl" timeout -k 10 60 ./attention > "$W/attention-old.log" 2>&1
}
save
left 70 && { stamp train; timeout -k 10 55 ./train --preset gpt2-small --precision mixed --steps 300 --log-every 50 --eval-every 100000 --sample-bytes 0 --data /tmp/corpus.txt --checkpoint /tmp/ck/n.safetensors > "$W/train-new.log" 2>&1; }
save
left 130 && { stamp torch; (cd "$root" && PYTHONUNBUFFERED=1 timeout -k 10 150 python3 scripts/device/torch_baselines.py --out "$W/torch.jsonl" --only train --models gpt2-small > "$W/torch.log" 2>&1); }
stamp end
save
cat "$W/gpu.txt" "$W/stats.log"; cut -c1-130 "$W/summary.log"; cat "$W/tests.log"
grep -E "flash|fast" "$W/attention-new.log" | cut -c1-150 | head -14; grep -E "flash" "$W/attention-old.log" | cut -c1-150 | head -8
grep -E "fwd|ms" "$W/sdpa.log" | tail -8
grep -E "one step|products  |attention  |memory-bound|rror|flash" "$W/profile-new.log" "$W/profile-old.log" | cut -c1-150
grep -E "tokens/s|rror" "$W/train-new.log" | tail -2
grep -o '"impl": "[^"]*".*"model": "[^"]*".*"tokens_per_s": [0-9.]*' "$W/torch.jsonl" | sed 's/"dim".*"tokens_per_s"/ tokens_per_s/'
