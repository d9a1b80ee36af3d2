#!/usr/bin/env bash
# The f16 core with its staging strides as derived overrides: lab copies (u8: the library's core
# cut down; u8o: that with the overrides) and the library's gemm16 at 4096^3 against the lean
# kernel; every bench shape with the old and new binaries; the products' tests on tensor cores;
# the mixed step profiled with old and new binaries; 300 mixed and 300 f32 steps with the new; with
# the staged Q chosen, the attention bench and PyTorch's SDPA beside it.
set -uo pipefail
# Every timeout ends in a kill (-k): train answers SIGTERM by finishing its step and saving.
FINAL="$OUT"
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json CI=true XDG_RUNTIME_DIR=/tmp
root=$PWD
bins=$(mktemp -d)
tar xJf .dev/bins.tar.xz -C "$bins"
qb=$(mktemp -d)
tar xJf .dev/bins_q.tar.xz -C "$qb"
old=$(mktemp -d)
xz -dc .dev/g3/gemm.xz > $old/gemm; xz -dc .dev/g3/train.xz > $old/train; chmod +x $old/*
cp .dev/corpus.txt /tmp/corpus.txt
W=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$W/gpu.txt" 2>&1
cp .dev/commit "$W/commit.txt"; cp "$0" "$W/run.sh"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 100 > "$W/clocks.csv" 2>&1 &
stamp() { echo "$(date +%H:%M:%S.%3N) $*" >> "$W/phases.log"; }
save() { tar czf "$FINAL/results.tar.gz" -C "$W" .; }
DEADLINE=${DEADLINE:-540}
left() { [ $((DEADLINE - SECONDS)) -gt "$1" ]; }
G=$root/.dev/g3
xz -dk $G/time_kernel.xz 2>/dev/null; chmod +x $G/time_kernel
O="A_T=0,B_T=1,G_BM=128,G_BN=256,G_BK=32,G_TM=4,G_TN=4,G_PF=1,G_GROUP=4,M_C=4096,N_C=4096,K_C=4096,G_EXACT=1"
stamp stats
for v in u8 u8o; do echo "== $v" >> "$W/stats.log"; (cd $G && timeout -k 10 30 $bins/pipeline-stats -o $O $v/g16e.wgsl gemm16 2>&1 | grep -E "Register|error") >> "$W/stats.log"; done
echo "== library" >> "$W/stats.log"; timeout -k 10 30 $bins/pipeline-stats -o $O,G_PARTS=1,G_CHUNK=4096 linear::gemm16 2>&1 | grep -E "Register|error" >> "$W/stats.log"
run() { local name=$1; shift
  echo "== $name: $*" >> "$W/tk.log"
  (cd $G && timeout -k 10 40 ./time_kernel "$@") > "$W/one.log" 2>&1; cat "$W/one.log" >> "$W/tk.log"
  echo "$name: $(grep -E "^time|FLOP|error" "$W/one.log" | tr "\n" " ")" >> "$W/summary.log"
}
stamp lab
# QUICK=1 keeps what decides the changes (the warm-up, the library at 4096^3, tests, profiles) and
# drops the lab copies.
lab() { [ -n "${QUICK:-}" ] || run "$@"; }
BASE="m=4096 n=4096 k=4096 parts=1 chunk=4096 tiles=512 A_T=0 B_T=1 M_C=4096 N_C=4096 K_C=4096 G_BM=128 G_BN=256 G_BK=32 G_TM=4 G_TN=4 G_GROUP=4 G_EXACT=1 G_PF=1 --flops 2*m*n*k"
L="m=4096 n=4096 k=4096 --shared none --grid 512 --flops 2*m*n*k L_PF=1"
run warm lean_rt.wgsl:lean $L --warmup-ms 2500
lab lean gemm_lab.wgsl:lean $L --warmup-ms 400
lab u8 u8/g16.wgsl:gemm16 $BASE --warmup-ms 400
lab u8o u8o/g16.wgsl:gemm16 $BASE --warmup-ms 400
run lib linear::gemm16 $BASE G_PARTS=1 G_CHUNK=4096 --warmup-ms 400
lab u8-b u8/g16.wgsl:gemm16 $BASE --warmup-ms 400
lab u8o-b u8o/g16.wgsl:gemm16 $BASE --warmup-ms 400
save
cd "$bins"
stamp tests
for t in gemm linear16 mixed; do
  left 60 || break
  timeout -k 10 60 tests/$t > "$W/test-$t.log" 2>&1; echo "$t: exit $?" >> "$W/tests.log"
  grep -E "test result|FAILED|panicked" "$W/test-$t.log" | sort | uniq -c >> "$W/tests.log"
done
left 30 && { stamp profile-new; timeout -k 10 25 ./train --preset gpt2-small --precision mixed --profile --checkpoint /tmp/ck/pn.safetensors > "$W/profile-new.log" 2>&1; }
left 30 && { stamp profile-old; (cd $old && timeout -k 10 25 ./train --preset gpt2-small --precision mixed --profile --checkpoint /tmp/ck/po.safetensors) > "$W/profile-old.log" 2>&1; }
save
left 60 && {
stamp flash
F=$root/.dev/f4
for k in flash_forward16_tc flash_forward16_tcq flash_forward16_tcqn; do echo "== $k" >> "$W/stats.log"; (cd $F && timeout -k 10 30 $bins/pipeline-stats -o FL_DH=64 $k.E.wgsl $k 2>&1 | grep -E "Register|Shared|error") >> "$W/stats.log"; done
timeout -k 10 60 $bins/pipeline-stats -o FL_DH=64 --all --filter flash_backward,flash_forward >> "$W/stats-all.log" 2>&1
FA="batch=8 seq=1024 heads=12 kv_heads=12 head_dim=64 scale=0.125 FL_DH=64 len(q)=1572864 len(k)=1572864 len(v)=1572864 len(o)=6291456 len(lse)=98304 len(o16)=1572864"
reps="a b"; [ -n "${QUICK:-}" ] && reps=""
for rep in $reps; do
  run fwd-lib-$rep attention::flash_forward16_tc $FA --warmup-ms 300
  for k in tc tcq tcqn; do run fwd-$k-$rep $F/fwd.wgsl:flash_forward16_$k $FA --warmup-ms 300; done
done
}
save
left 40 && {
stamp tests-q
(cd $qb && timeout -k 10 30 tests/flash_attention > "$W/test-q-flash_attention.log" 2>&1; echo "q flash_attention: exit $?" >> "$W/tests.log")
grep -h -E "test result|FAILED|panicked" "$W"/test-q-*.log | sort | uniq -c >> "$W/tests.log"
}
save
left 30 && { stamp profile-q; (cd $qb && timeout -k 10 25 ./train --preset gpt2-small --precision mixed --profile --checkpoint /tmp/ck/pq.safetensors) > "$W/profile-q.log" 2>&1; }
save
T=$bins
stp() { grep -o "dispatches, [0-9.]* ms" "$1" 2>/dev/null | grep -o "[0-9.]* ms" | cut -d" " -f1; }
qs=$(stp "$W/profile-q.log"); ns=$(stp "$W/profile-new.log")
if grep -q "q flash_attention: exit 0" "$W/tests.log" && [ -n "$qs" ] && [ -n "$ns" ] && python3 -c "import sys; sys.exit(0 if $qs < $ns else 1)"; then T=$qb; echo "train with q ($qs < $ns)" >> "$W/tests.log"; else echo "train with stride ($qs, $ns)" >> "$W/tests.log"; fi
left 45 && { stamp train-new; timeout -k 10 45 $T/train --preset gpt2-small --precision mixed --steps 300 --log-every 50 --eval-every 100000 --sample-bytes 0 --data /tmp/corpus.txt --checkpoint /tmp/ck/n.safetensors > "$W/train-new.log" 2>&1; }
save
left 70 && { stamp tests-q2; (cd $qb && timeout -k 10 60 tests/kernels-train.flash flash_tracks trains_at_context > "$W/test-q-train-flash.log" 2>&1; echo "q kernels-train.flash: exit $?" >> "$W/tests.log"); }
save
left 80 && { stamp torch; (cd "$root" && PYTHONUNBUFFERED=1 timeout -k 10 150 python3 scripts/device/torch_baselines.py --out "$W/torch.jsonl" --only train --models gpt2-small > "$W/torch.log" 2>&1); }
save
left 30 && {
stamp bench-old
(cd $old && KERNELS_BENCH_JSON="$W/gemm-old.jsonl" timeout -k 10 40 ./gemm --configs "") > "$W/gemm-old.log" 2>&1
stamp bench-new
(cd $bins && KERNELS_BENCH_JSON="$W/gemm-new.jsonl" timeout -k 10 40 ./gemm --configs "") > "$W/gemm-new.log" 2>&1
save
}
left 45 && { stamp train-f32; timeout -k 10 40 $T/train --preset gpt2-small --precision f32 --steps 300 --log-every 50 --eval-every 100000 --sample-bytes 0 --data /tmp/corpus.txt --checkpoint /tmp/ck/f.safetensors > "$W/train-f32.log" 2>&1; }
save
[ "$T" = "$qb" ] && left 60 && {
stamp bench-attention; (cd $qb && KERNELS_BENCH_JSON="$W/attention.jsonl" timeout -k 10 30 ./attention) > "$W/bench-attention.log" 2>&1
stamp sdpa; (cd "$root" && PYTHONUNBUFFERED=1 timeout -k 10 30 python3 scripts/device/sdpa_baseline.py --out "$W/sdpa.jsonl") > "$W/sdpa.log" 2>&1
save
}
left 60 && { stamp train-medium; timeout -k 10 60 $T/train --preset gpt2-medium --precision mixed --steps 60 --log-every 20 --eval-every 100000 --sample-bytes 0 --data /tmp/corpus.txt --checkpoint /tmp/ck/m.safetensors > "$W/train-medium.log" 2>&1; }
stamp end
save
cat "$W/gpu.txt" "$W/stats.log"; cut -c1-150 "$W/summary.log"; cat "$W/tests.log"
grep -E "^\|" "$W/gemm-old.log" | head -14; grep -E "^\|" "$W/gemm-new.log" | head -14
grep -E "one step|products|attention  " "$W/profile-new.log" "$W/profile-q.log" "$W/profile-old.log"; grep flash_forward "$W"/profile-*.log
grep -E "tokens/s" "$W/train-new.log" "$W/train-f32.log" "$W/train-medium.log" | tail -3
grep -o '"impl": "[^"]*".*"model": "[^"]*".*"tokens_per_s": [0-9.]*' "$W/torch.jsonl" | sed 's/"dim".*"tokens_per_s"/ tokens_per_s/'
