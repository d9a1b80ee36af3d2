#!/usr/bin/env bash
# Builds the release binaries of the H200 comparison here and packs them (stripped, xz) into
# .dev/bins.tar.xz for the device machine, which has no Rust. Run from the repository root.
set -euo pipefail
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
stage=$(mktemp -d)
mkdir -p "$stage/tests"
# Exact executables from cargo's own report: KIND NAME PATH lines.
here=$(cd "$(dirname "$0")" && pwd)
executables() { python3 "$here/cargo_executables.py"; }
# A shorter device run packs less: PACK_BENCHES="memory gemm" (default: every bench) and
# PACK_TESTS="linear16 mixed" (default: every GPU test binary); PACK_TOOLS_ONLY=1 packs only
# pipeline-stats (with its test) and coop-ceiling, for the phases `ceiling stats`.
tools_only=${PACK_TOOLS_ONLY:-0}
bench_args=(--benches)
if [ -n "${PACK_BENCHES:-}" ]; then
    bench_args=()
    for b in $PACK_BENCHES; do bench_args+=(--bench "$b"); done
fi
if [ "$tools_only" != 1 ]; then
    cargo build --release --example train --example quickstart "${bench_args[@]}" --message-format=json \
        | executables | while read -r kind name exe; do
            case $kind in bench | example) cp "$exe" "$stage/$name" ;; esac
        done
fi
test_args=(--workspace)
if [ -n "${PACK_TESTS:-}" ]; then
    test_args=(--workspace)
    for t in $PACK_TESTS; do test_args+=(--test "$t"); done
fi
[ "$tools_only" = 1 ] && test_args=(-p pipeline-stats --test cli)
cargo test --release --no-run "${test_args[@]}" --message-format=json \
    | executables | while read -r kind name exe; do
        case $name in compile_fail | golden | properties | browser | browser_train | kernels_codegen | kernels_macro | kernels_runtime | kernels_train | kernels) continue ;; esac
        if [ "$kind" = test ]; then cp "$exe" "$stage/tests/$name"; fi
    done
# The pipeline inspector (stats phase) and the tensor-core ceiling probe (ceiling phase). The
# probe is its own crate (../shared/tools/coop-ceiling), built from a copy in .dev/ (ignored by
# git) with its own lock file and target folder; COOP_CEILING_SRC points elsewhere.
cargo build --release -p pipeline-stats
cp target/release/pipeline-stats "$stage/"
ceiling_src=${COOP_CEILING_SRC:-../shared/tools/coop-ceiling}
if [ ! -d .dev/coop-ceiling ] && [ -d "$ceiling_src" ]; then
    mkdir -p .dev
    cp -r "$ceiling_src" .dev/coop-ceiling
    chmod -R u+w .dev/coop-ceiling
fi
if [ -d .dev/coop-ceiling ]; then
    (cd .dev/coop-ceiling && cargo build --release)
    cp .dev/coop-ceiling/target/release/coop-ceiling "$stage/"
else
    echo "pack.sh: no coop-ceiling source ($ceiling_src): the ceiling phase will have no binary" >&2
fi
strip "$stage"/* "$stage"/tests/* 2>/dev/null || true
mkdir -p .dev
tar cJf .dev/bins.tar.xz -C "$stage" .
git rev-parse --short HEAD > .dev/commit
ls -la .dev "$stage" "$stage/tests"
