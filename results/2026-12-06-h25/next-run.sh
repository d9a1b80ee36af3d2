#!/usr/bin/env bash
# The f16 core with its staging strides as derived overrides: lab copies (u8: the library's core
# cut down; u8o: that with the overrides) and the library's gemm16 at 4096^3 against the lean
# kernel; every bench shape with the old and new binaries; the products' tests on tensor cores;
# the mixed step profiled with old and new binaries; 300 mixed steps with the new.
set -uo pipefail
FINAL="$OUT"
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json CI=true XDG_RUNTIME_DIR=/tmp
root=$PWD
bins=$(mktemp -d)
tar xJf .dev/bins.tar.xz -C "$bins"
old=$(mktemp -d)
xz -dc .dev/g3/gemm.xz > $old/gemm; xz -dc .dev/g3/train.xz > $old/train; chmod +x $old/*
cp .dev/corpus.txt /tmp/corpus.txt
W=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$W/gpu.txt" 2>&1
cp .dev/commit "$W/commit.txt"; cp .dev/run_h26.sh "$W/run.sh"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 100 > "$W/clocks.csv" 2>&1 &
stamp() { echo "$(date +%H:%M:%S.%3N) $*" >> "$W/phases.log"; }
save() { tar czf "$FINAL/results.tar.gz" -C "$W" .; }
DEADLINE=${DEADLINE:-300}
left() { [ $((DEADLINE - SECONDS)) -gt "$1" ]; }
G=$root/.dev/g3
O="A_T=0,B_T=1,G_BM=128,G_BN=256,G_BK=32,G_TM=4,G_TN=4,G_PF=1,G_GROUP=4,M_C=4096,N_C=4096,K_C=4096,G_EXACT=1"
stamp stats
for v in u8 u8o; do echo "== $v" >> "$W/stats.log"; (cd $G && timeout 30 $bins/pipeline-stats -o $O $v/g16e.wgsl gemm16 2>&1 | grep -E "Register|error") >> "$W/stats.log"; done
echo "== library" >> "$W/stats.log"; timeout 30 $bins/pipeline-stats -o $O,G_PARTS=1,G_CHUNK=4096 linear::gemm16 2>&1 | grep -E "Register|error" >> "$W/stats.log"
run() { local name=$1; shift
  echo "== $name: $*" >> "$W/tk.log"
  (cd $G && timeout 40 ./time_kernel "$@") > "$W/one.log" 2>&1; cat "$W/one.log" >> "$W/tk.log"
  echo "$name: $(grep -E "^time|FLOP|error" "$W/one.log" | tr "\n" " ")" >> "$W/summary.log"
}
stamp lab
BASE="m=4096 n=4096 k=4096 parts=1 chunk=4096 tiles=512 A_T=0 B_T=1 M_C=4096 N_C=4096 K_C=4096 G_BM=128 G_BN=256 G_BK=32 G_TM=4 G_TN=4 G_GROUP=4 G_EXACT=1 G_PF=1 --flops 2*m*n*k"
L="m=4096 n=4096 k=4096 --shared none --grid 512 --flops 2*m*n*k L_PF=1"
run warm lean_rt.wgsl:lean $L --warmup-ms 2500
run lean gemm_lab.wgsl:lean $L --warmup-ms 400
run u8 u8/g16.wgsl:gemm16 $BASE --warmup-ms 400
run u8o u8o/g16.wgsl:gemm16 $BASE --warmup-ms 400
run lib linear::gemm16 $BASE G_PARTS=1 G_CHUNK=4096 --warmup-ms 400
run u8-b u8/g16.wgsl:gemm16 $BASE --warmup-ms 400
run u8o-b u8o/g16.wgsl:gemm16 $BASE --warmup-ms 400
save
cd "$bins"
stamp tests
for t in gemm; do
  left 60 || break
  timeout 60 tests/$t > "$W/test-$t.log" 2>&1; echo "$t: exit $?" >> "$W/tests.log"
  grep -E "test result|FAILED|panicked" "$W/test-$t.log" | sort | uniq -c >> "$W/tests.log"
done
save
left 30 && { stamp profile-new; timeout 25 ./train --preset gpt2-small --precision mixed --profile --checkpoint /tmp/ck/pn.safetensors > "$W/profile-new.log" 2>&1; }
left 30 && { stamp profile-old; (cd $old && timeout 25 ./train --preset gpt2-small --precision mixed --profile --checkpoint /tmp/ck/po.safetensors) > "$W/profile-old.log" 2>&1; }
save
left 30 && {
stamp bench-old
(cd $old && KERNELS_BENCH_JSON="$W/gemm-old.jsonl" timeout 40 ./gemm --configs "") > "$W/gemm-old.log" 2>&1
stamp bench-new
(cd $bins && KERNELS_BENCH_JSON="$W/gemm-new.jsonl" timeout 40 ./gemm --configs "") > "$W/gemm-new.log" 2>&1
save
}
left 45 && { stamp train-new; timeout 45 ./train --preset gpt2-small --precision mixed --steps 300 --log-every 50 --eval-every 100000 --sample-bytes 0 --data /tmp/corpus.txt --checkpoint /tmp/ck/n.safetensors > "$W/train-new.log" 2>&1; }
stamp end
save
cat "$W/gpu.txt" "$W/stats.log"; cut -c1-150 "$W/summary.log"; cat "$W/tests.log"
grep -E "^\|" "$W/gemm-old.log" | head -14; grep -E "^\|" "$W/gemm-new.log" | head -14
grep -E "one step|products" "$W/profile-new.log" "$W/profile-old.log"
grep -E "tokens/s" "$W/train-new.log" | tail -1
