#!/usr/bin/env bash
# The H200 comparison in one go, on the device machine: correctness tests at subgroup size 32
# (tensor-core variants where they exist), our benchmarks, gpt2-small training in both precisions
# with a profiled step of each, and the PyTorch baselines of the same session; then the
# comparison table. Expects .gl/ (Vulkan loader debs) and .dev/bins.tar.xz (from scripts/device/pack.sh);
# writes report.md and results.tar.gz (every log and JSON file; the device tool returns at most
# 8 files) to ${OUT:-/tmp/out}.
#
# A shorter run picks phases and sizes: PHASES (default "tests train torch sdpa bench", run in
# that order; sdpa: scripts/device/sdpa_baseline.py, PyTorch's fused attention beside benches/attention.rs), BENCHES (default "gemm memory attention reductions host_overhead"), MIXED_STEPS / TRAIN_STEPS,
# MEDIUM_STEPS (gpt2-medium's mixed run, 0 to skip), TORCH_ONLY (scripts/device/torch_baselines.py
# --only), TORCH_MODELS (its --models), NOCOOP_TESTS=1 (the tests again with
# KERNELS_COOPERATIVE_MATRIX=0). Three more phases, not in the default: `gemm` (the products'
# tests on tensor cores, the tuner and the products' bench with its table: GEMM_TESTS,
# TUNE_BUDGET seconds), `ceiling` (what
# coopMultiplyAdd issues through naga and wgpu: coop-ceiling, 20 warm-up dispatches per kernel)
# and `stats` (the driver's register counts and other statistics of every kernel and variant,
# and of the GEMM kernels at the trainer's shapes: pipeline-stats --all --json, then
# tools/pipeline-stats/sass.sh for machine code from the driver's cache). The SM clock and power are logged every 100 ms for the whole
# run (clocks.csv) and every phase's start is stamped (phases.log), so each number can be tied
# to the clock it ran at.
set -uo pipefail
FINAL="${OUT:-/tmp/out}"
mkdir -p "$FINAL"
OUT=$(mktemp -d)
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json CI=true XDG_RUNTIME_DIR=/tmp
PHASES=" ${PHASES:-tests train torch sdpa bench} "
root=$PWD
bins=$(mktemp -d)
tar xJf .dev/bins.tar.xz -C "$bins"
cd "$bins"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
cp "$root/.dev/commit" "$OUT/commit.txt" 2>/dev/null
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 100 > "$OUT/clocks.csv" 2>&1 &
clocks=$!
stamp() { echo "$(date +%Y/%m/%d\ %H:%M:%S.%3N) $*" >> "$OUT/phases.log"; }
# What is done so far, packed after every phase: a run stopped at its time limit still returns it.
save() { tar czf "$FINAL/results.tar.gz" -C "$OUT" .; }

if [[ $PHASES == *" ceiling "* ]]; then
    stamp ceiling
    (./coop-ceiling --validate && timeout 240 ./coop-ceiling) > "$OUT/ceiling.log" 2>&1
    echo "exit $?" >> "$OUT/ceiling.log"
    stamp ceiling-end
fi
save
if [[ $PHASES == *" stats "* ]]; then
    # Every kernel and variant at its defaults, then the products with the trainer's shapes
    # compiled in (M×K×N: 8192×768×{768, 2304, 3072}, 8192×3072×768, 4096³). The weight
    # gradients' M_C/N_C/K_C mean their own dimensions: the same numbers give their registers
    # at a like size.
    stamp stats
    timeout 300 ./pipeline-stats --all --json > "$OUT/stats.jsonl" 2> "$OUT/stats.log"
    echo "all: exit $?" >> "$OUT/stats.log"
    # The f16 core at the tuner's structures (X·Wᵀ at 4096³; the block shape decides the
    # registers, the shape only folds constants), then the scaled split at the trainer's shapes.
    for cfg in ${GEMM_CONFIGS:-128,128,32,4,2 128,128,32,4,4 128,256,32,4,4 256,128,32,4,4 128,128,64,4,4 128,128,16,4,2 128,256,16,4,4 256,128,16,4,4 128,64,32,2,2 128,128,32,2,2}; do
        IFS=, read -r bm bn bk tm tn <<< "$cfg"
        for pf in 1 0; do
            timeout 60 ./pipeline-stats linear::gemm16 --json \
                -o "A_T=0,B_T=1,M_C=4096,N_C=4096,K_C=4096,G_BM=$bm,G_BN=$bn,G_BK=$bk,G_TM=$tm,G_TN=$tn,G_PF=$pf" \
                >> "$OUT/stats-gemm16.jsonl" 2>> "$OUT/stats.log"
        done
    done
    for shape in 8192,768,768 8192,768,2304 8192,768,3072 8192,3072,768 4096,4096,4096; do
        IFS=, read -r m k n <<< "$shape"
        timeout 120 ./pipeline-stats --all --json --filter linear::precise_,_pres -o "M_C=$m,K_C=$k,N_C=$n" \
            > "$OUT/stats-${m}x${k}x${n}.jsonl" 2>> "$OUT/stats.log"
        echo "${m}x${k}x${n}: exit $?" >> "$OUT/stats.log"
    done
    # The text form of the default f16 product, with its internal representations.
    timeout 60 ./pipeline-stats linear::gemm16 -o A_T=0,B_T=1,M_C=8192,N_C=2304,K_C=768 --dump "$OUT/stats-dump" > "$OUT/stats-gemm16.txt" 2>&1
    stamp sass
    PIPELINE_STATS="$bins/pipeline-stats" timeout 300 "$root/tools/pipeline-stats/sass.sh" "$OUT/sass" linear::gemm16 \
        -o A_T=0,B_T=1,M_C=4096,N_C=4096,K_C=4096,G_BM=128,G_BN=256,G_BK=32,G_TM=4,G_TN=4 > "$OUT/sass.log" 2>&1
    echo "sass.sh: exit $?" >> "$OUT/sass.log"
    # The cache copy and the cubins can be large: the report and disassembly come back.
    rm -rf "$OUT/sass/cache"
fi
save
if [[ $PHASES == *" gemm "* ]]; then
    # The products: their tests on tensor cores, the tuner (a table in tuning.txt), then every
    # core at the trainer's shapes and 4096³ with that table (KERNELS_GEMM_TABLE).
    for t in ${GEMM_TESTS:-gemm precise linear16}; do
        stamp "gemm test $t"
        timeout 240 "tests/$t" > "$OUT/test-$t.log" 2>&1
        echo "$t: exit $?" >> "$OUT/gemm-tests.log"
        grep -E "test result|FAILED|panicked" "$OUT/test-$t.log" >> "$OUT/gemm-tests.log"
    done
    save
    stamp gemm-tune
    KERNELS_BENCH_JSON="$OUT/tune.jsonl" timeout "${TUNE_TIMEOUT:-300}" ./gemm --tune --budget-s "${TUNE_BUDGET:-200}" \
        --table "$OUT/tuning.txt" > "$OUT/tune.log" 2>&1
    echo "tune: exit $?" >> "$OUT/tune.log"
    save
    [ "${GEMM_BENCH:-1}" = 1 ] || { save; GEMM_SKIP_BENCH=1; }
fi
if [[ $PHASES == *" gemm "* || $PHASES == *" gemm-bench "* ]] && [ "${GEMM_SKIP_BENCH:-0}" != 1 ]; then
    stamp gemm-bench
    table=()
    [ -s "$OUT/tuning.txt" ] && table=(env "KERNELS_GEMM_TABLE=$OUT/tuning.txt")
    [ -n "${KERNELS_GEMM_TABLE:-}" ] && table=(env "KERNELS_GEMM_TABLE=$KERNELS_GEMM_TABLE")
    "${table[@]}" env KERNELS_BENCH_JSON="$OUT/gemm.jsonl" timeout 240 ./gemm > "$OUT/gemm.log" 2>&1
    echo "bench: exit $?" >> "$OUT/gemm.log"
fi
save
if [[ $PHASES == *" tests "* ]]; then
    for t in tests/*; do
        stamp "test $t"
        echo "== $t"
        timeout 180 "$t" > "$OUT/test-$(basename "$t").log" 2>&1
        echo "exit $?"
        grep -E "test result|FAILED|panicked|variant on" "$OUT/test-$(basename "$t").log" | sort | uniq -c
    done > "$OUT/tests.log" 2>&1
    if [ "${NOCOOP_TESTS:-0}" = 1 ]; then
        for t in tests/*; do
            stamp "test (no tensor cores) $t"
            echo "== $t"
            KERNELS_COOPERATIVE_MATRIX=0 timeout 180 "$t" 2>&1 | grep -E "test result|FAILED|panicked"
        done > "$OUT/tests_nocoop.log" 2>&1
    fi
fi
save
if [[ $PHASES == *" train "* ]]; then
    # gpt2-small: --precision mixed and f32 (fewer steps: it is slower), then one profiled step
    # of each.
    (stamp train-mixed; echo "== train-mixed"
     timeout 240 ./train --preset gpt2-small --precision mixed --steps "${MIXED_STEPS:-300}" --log-every 50 --eval-every 100000 --sample-bytes 0 --checkpoint /tmp/ck/mixed.safetensors
     stamp train-f32; echo "== train-f32"
     timeout 200 ./train --preset gpt2-small --precision f32 --steps "${TRAIN_STEPS:-100}" --log-every 50 --eval-every 100000 --sample-bytes 0 --checkpoint /tmp/ck/f32.safetensors
     stamp profile-mixed; echo "== profile-mixed"
     timeout 120 ./train --preset gpt2-small --precision mixed --profile --checkpoint /tmp/ck/profile-mixed.safetensors
     stamp profile-f32; echo "== profile-f32"
     timeout 120 ./train --preset gpt2-small --precision f32 --profile --checkpoint /tmp/ck/profile-f32.safetensors
     # The other attention path of each precision (auto takes flash in mixed precision, fast
     # in f32) at context 1024, and training at context 8192 (flash: the fast path's workspaces
     # do not fit there).
     stamp profile-mixed-fast; echo "== profile-mixed-fast"
     timeout 120 ./train --preset gpt2-small --precision mixed --attention fast --profile --checkpoint /tmp/ck/profile-mixed-fast.safetensors
     stamp profile-f32-flash; echo "== profile-f32-flash"
     timeout 120 ./train --preset gpt2-small --precision f32 --attention flash --profile --checkpoint /tmp/ck/profile-f32-flash.safetensors
     stamp train-mixed-8192; echo "== train-mixed-8192"
     timeout 300 ./train --preset gpt2-small --precision mixed --seq-len 8192 --batch 2 --steps "${LONG_STEPS:-30}" --log-every 10 --eval-every 100000 --sample-bytes 0 --checkpoint /tmp/ck/mixed-8192.safetensors
     stamp profile-mixed-8192; echo "== profile-mixed-8192"
     timeout 180 ./train --preset gpt2-small --precision mixed --seq-len 8192 --batch 2 --profile --checkpoint /tmp/ck/profile-mixed-8192.safetensors
     # gpt2-medium in mixed precision (MEDIUM_STEPS, 0 to skip): whether bigger products move
     # the ratio to PyTorch.
     if [ "${MEDIUM_STEPS:-60}" != 0 ]; then
         stamp train-medium-mixed; echo "== train-medium-mixed"
         timeout 300 ./train --preset gpt2-medium --precision mixed --steps "${MEDIUM_STEPS:-60}" --log-every 20 --eval-every 100000 --sample-bytes 0 --checkpoint /tmp/ck/medium.safetensors
         stamp profile-medium-mixed; echo "== profile-medium-mixed"
         timeout 180 ./train --preset gpt2-medium --precision mixed --profile --checkpoint /tmp/ck/profile-medium.safetensors
     fi) > "$OUT/train.log" 2>&1
fi
save
cd "$root"
if [[ $PHASES == *" torch "* ]]; then
    stamp torch
    only=()
    [ -n "${TORCH_ONLY:-}" ] && only=(--only "$TORCH_ONLY")
    [ -n "${TORCH_MODELS:-}" ] && only+=(--models "$TORCH_MODELS")
    PYTHONUNBUFFERED=1 timeout 400 python3 scripts/device/torch_baselines.py --out "$OUT/torch.jsonl" "${only[@]}" > "$OUT/torch.log" 2>&1
fi
save
if [[ $PHASES == *" sdpa "* ]]; then
    stamp sdpa
    PYTHONUNBUFFERED=1 timeout 300 python3 scripts/device/sdpa_baseline.py --out "$OUT/sdpa.jsonl" > "$OUT/sdpa.log" 2>&1
fi
save
if [[ $PHASES == *" bench "* ]]; then
    cd "$bins"
    for b in ${BENCHES:-gemm memory attention reductions host_overhead}; do
        stamp "bench $b"
        KERNELS_BENCH_JSON="$OUT/$b.jsonl" timeout 300 "./$b"
    done > "$OUT/bench.log" 2>&1
fi
save
cd "$root"
stamp end
kill "$clocks" 2>/dev/null
python3 scripts/device/report.py "$OUT" | tee "$OUT/report.md"
cp "$OUT/report.md" "$OUT/tests.log" "$FINAL/" 2>/dev/null
tar czf "$FINAL/results.tar.gz" -C "$OUT" .
