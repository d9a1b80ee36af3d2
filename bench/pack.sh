#!/usr/bin/env bash
# Builds the release binaries of the H200 comparison here and packs them (stripped, xz) into
# .dev/bins.tar.xz for the device machine, which has no Rust. Run from the repository root.
set -euo pipefail
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
cargo build --release --example train --example quickstart --bench gemm --bench memory --bench attention --bench reductions --bench host_overhead
tests=$(cargo test --release --no-run --workspace 2>&1 | sed -n 's/.*Executable .*(\(.*\))/\1/p')
stage=$(mktemp -d)
mkdir -p "$stage/tests"
for b in gemm memory attention reductions host_overhead; do
    cp "$(ls -t target/release/deps/$b-* | grep -v '\.d$' | head -1)" "$stage/$b"
done
cp target/release/examples/train target/release/examples/quickstart "$stage/"
for t in $tests; do
    n=$(basename "$t" | sed 's/-[0-9a-f]*$//')
    case $n in compile_fail|golden|properties|kernels_codegen|kernels_macro) continue ;; esac
    cp "$t" "$stage/tests/$n"
done
strip "$stage"/* "$stage"/tests/* 2>/dev/null || true
mkdir -p .dev
tar cJf .dev/bins.tar.xz -C "$stage" .
git rev-parse --short HEAD > .dev/commit
ls -la .dev
