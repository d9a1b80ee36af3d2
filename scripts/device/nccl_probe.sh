#!/usr/bin/env bash
# The NCCL probe on one NVIDIA GPU of the device machine (no Rust there): the Vulkan loader from
# .gl/*.deb (as run_h200.sh), the driver's Vulkan ICD, NCCL from PyTorch's wheel, then the
# carried release binaries .dev/nccl_probe and, when present, .dev/interop (the exportable-buffer
# test of kernels-runtime). Build and carry them from the repository root here:
#
#   cargo build --release -p kernels-train --features nccl --example nccl_probe
#   cargo test --release -p kernels-runtime --features external-memory --test interop --no-run
#   mkdir -p .dev && strip -o .dev/nccl_probe target/release/examples/nccl_probe \
#     && strip -o .dev/interop "$(ls -t target/release/deps/interop-* | grep -v '\.d$' | head -1)"
#
# (stripped: about 6 MB, against 70 MB with debug info; the device run carries .dev and .gl.)
#
# Then on the device, from the repository root: bash scripts/device/nccl_probe.sh [probe arguments, e.g.
# --mb 500 --iters 5 --seed N]. Writes nccl_probe.log (and interop.log) to ${OUT:-/tmp/out};
# exits non-zero if a check failed.
set -uo pipefail
out="${OUT:-/tmp/out}"
mkdir -p "$out"
if compgen -G ".gl/*.deb" >/dev/null; then
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
fi
export VK_DRIVER_FILES="${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}" CI=true
# NCCL: PyTorch's libnccl.so.2, unless KERNELS_NCCL_LIB names another.
nccl_dir=$(python3 -c "import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))" 2>/dev/null)/lib
if [ -d "$nccl_dir" ]; then
    export LD_LIBRARY_PATH="$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
{
    nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader
    echo "NCCL directory: $nccl_dir ($(ls "$nccl_dir" 2>/dev/null | tr '\n' ' '))"
    echo "NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-unset}"
} > "$out/env.log" 2>&1
cat "$out/env.log"
status=0
if [ -x .dev/interop ]; then
    timeout 300 .dev/interop --test-threads=1 > "$out/interop.log" 2>&1
    rc=$?
    echo "interop test: exit $rc" | tee -a "$out/interop.log"
    tail -5 "$out/interop.log"
    [ $rc -eq 0 ] || status=1
fi
timeout 420 .dev/nccl_probe "$@" > "$out/nccl_probe.log" 2>&1
rc=$?
echo "nccl_probe: exit $rc" >> "$out/nccl_probe.log"
cat "$out/nccl_probe.log"
[ $rc -eq 0 ] || status=1
exit $status
