#!/usr/bin/env bash
# Call 3: the tensor-core flash kernels with rows
# read without bounds tests (FL_EXACT, S a multiple of 64, head dim 64) and the backward's
# prefetch without guards (`../lab/exact-rows.diff`), to land if their tests pass: the flash
# tests on tensor cores; time_kernel at the trainer's shape (B 8, S 1024, H 12, Dh 64) of the
# patched library's kernels with FL_EXACT=1 and 0 beside lab copies of main's kernels (`_L`) and
# the forward without its prefetch guard (`lab2`); the mixed step's profile with and without
# (KERNELS_FLASH_EXACT=0); the attention bench both ways beside PyTorch's SDPA; 300 mixed steps;
# PyTorch's training rates.
# Prepare (rust machine, checkout root, on the commit the diff is against):
#   python3 results/2026-12-07-h28/lab/make_attn.py . .dev/h28/lab     (main's kernels as `_L`)
#   git apply results/2026-12-07-h28/lab/exact-rows.diff
#   python3 results/2026-12-07-h28/lab/make_fwd_u.py . .dev/h28/lab2
#   for each lab kernel K of FILE: python3 results/2026-12-07-h27/lab/flatten.py FILE K > K.E.wgsl (beside FILE)
#   COOP_CEILING_SRC=/nonexistent PACK_BENCHES="attention" PACK_TESTS="flash_attention flash mixed" scripts/device/pack.sh
#   cargo build --release --example time_kernel -p kernels; strip and xz it into .dev/h28/bin2/time_kernel.xz
#   cp results/2026-12-07-h28/call3/run.sh .dev/h28/run.sh
# Call: run(command="bash .dev/h28/run.sh", carry=[".gl", ".dev/bins.tar.xz", ".dev/corpus.txt",
# ".dev/commit", ".dev/h28"]) (about 6 minutes).
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
  for s in 0 1; do
    echo "== $k FL_EXACT=$s" >> "$W/stats.log"
    timeout -k 5 30 ./pipeline-stats -o FL_DH=64,FL_EXACT=$s $k 2>&1 | grep -E "Register|rror" >> "$W/stats.log"
  done
done
run() { local name=$1; shift
  echo "== $name: $*" >> "$W/tk.log"
  (cd $H/lab && timeout -k 5 40 $bins/time_kernel "$@") > "$W/one.log" 2>&1; cat "$W/one.log" >> "$W/tk.log"
  echo "$name: $(grep -E "^time|rror" "$W/one.log" | tr "\n" " ")" >> "$W/summary.log"
}
stamp tests
for t in flash_attention kernels-train.flash kernels-train.mixed mixed; do
  left 300 || break
  timeout -k 10 120 tests/$t > "$W/test-$t.log" 2>&1; echo "$t: exit $?" >> "$W/tests.log"
  grep -E "test result|FAILED|panicked" "$W/test-$t.log" | sort | uniq -c >> "$W/tests.log"
done
save
stamp lab
S="batch=8 seq=1024 heads=12 kv_heads=12 head_dim=64 scale=0.125 FL_DH=64 len(q)=1600000 len(k)=1600000 len(v)=1600000 len(lse)=98304"
FW="$S len(o)=6291456 len(o16)=1572864"
BW="$S len(d_o)=1600000 len(delta)=98304 len(dk)=6291456 len(dv)=6291456 len(flag)=1"
BQ="$S len(d_o)=1600000 len(delta)=98304 len(dq)=6291456"
run warm attention::flash_forward16_tc $FW FL_EXACT=1 --warmup-ms 2500
for rep in a b; do
  run fwd-exact-$rep attention::flash_forward16_tc $FW FL_EXACT=1
  run fwd-tested-$rep attention::flash_forward16_tc $FW FL_EXACT=0
  run fwd-before-$rep fwd.wgsl:flash_forward16_tc_L $FW
  run dkdv-exact-$rep backward_attention::flash_backward_dkdv16_tc $BW FL_EXACT=1
  run dkdv-tested-$rep backward_attention::flash_backward_dkdv16_tc $BW FL_EXACT=0
  run dkdv-before-$rep dkdv.wgsl:flash_backward_dkdv16_tc_L $BW
  run dq-exact-$rep backward_attention::flash_backward_dq16_tc $BQ FL_EXACT=1
  run dq-tested-$rep backward_attention::flash_backward_dq16_tc $BQ FL_EXACT=0
  run dq-before-$rep dq.wgsl:flash_backward_dq16_tc_L $BQ
done
# The forward's next-step loads and stores without the guard (../lab/make_fwd_u.py), beside the
# library's forward as a lab copy.
for rep in a b; do
  run fwdU-$rep ../lab2/fwd.wgsl:flash_forward16_tc_U $FW FL_EXACT=1
  run fwdL2-$rep ../lab2/fwd.wgsl:flash_forward16_tc_L $FW FL_EXACT=1
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
stamp end
save
cat "$W/gpu.txt" "$W/stats.log"; cut -c1-130 "$W/summary.log"; cat "$W/tests.log"
grep -E "flash|fast" "$W/attention-new.log" | cut -c1-150 | head -14; grep -E "flash" "$W/attention-old.log" | cut -c1-150 | head -8
grep -E "fwd|ms" "$W/sdpa.log" | tail -8
grep -E "one step|products  |attention  |memory-bound|rror|flash" "$W/profile-new.log" "$W/profile-old.log" | cut -c1-150
grep -E "tokens/s|rror" "$W/train-new.log" | tail -2
grep -o '"impl": "[^"]*".*"model": "[^"]*".*"tokens_per_s": [0-9.]*' "$W/torch.jsonl" | sed 's/"dim".*"tokens_per_s"/ tokens_per_s/'
