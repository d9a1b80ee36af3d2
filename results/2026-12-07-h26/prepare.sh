#!/usr/bin/env bash
# Builds everything next-run.sh carries, under .dev/ and .gl/ of this checkout (both ignored by
# git), from the checkout's HEAD, the two patches beside this script and the lab patches of
# -h17, -h22 and -h25. Run from anywhere inside the checkout; then make the call as NOTES.md
# says.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(git -C "$here" rev-parse --show-toplevel)
cd "$root"
R=$root/results
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
# next-run.sh has no phase for the tensor-core ceiling probe: pack.sh skips it without a source.
export COOP_CEILING_SRC=/nonexistent
rm -rf .dev/g3 .dev/f4
mkdir -p .dev/g3 .dev/f4 .gl

# The executable cargo built for one target name, from its JSON messages on stdin.
built() {
    python3 "$root/scripts/device/cargo_executables.py" | awk -v n="$1" '$2 == n { e = $3 } END { print e }'
}
# A release binary, stripped and compressed (the carry limit counts the tracked tree too).
pack_one() { # NAME EXECUTABLE
    strip -o ".dev/g3/$1" "$2"
    xz -9 -f ".dev/g3/$1"
}

echo "== main's train and gemm (the same-run baseline)"
cargo build --release --example train --bench gemm --message-format=json > .dev/g3/cargo.json
pack_one train "$(built train < .dev/g3/cargo.json)"
pack_one gemm "$(built gemm < .dev/g3/cargo.json)"

# The patched builds happen in this checkout, not in a worktree elsewhere: a library kernel's
# source path is compiled into the binaries (time_kernel reads the kernel's annotations from it),
# and the device's copy of the tree sits at this checkout's path.
patched=(shaders/lib/gemm16.wgsl shaders/lib/flash_fwd_tc.wgsl src/flash_attention.rs)
git diff --quiet HEAD -- "${patched[@]}" || { echo "prepare.sh: ${patched[*]} have changes; commit or stash them" >&2; exit 1; }
trap 'git checkout HEAD -- "${patched[@]}"' EXIT
git apply "$here/gemm16-stride-overrides.patch"

echo "== the stride overrides: products' tests and benches, time_kernel"
PACK_BENCHES="gemm" PACK_TESTS="gemm linear16 mixed" scripts/device/pack.sh > /dev/null
mv .dev/bins.tar.xz .dev/bins_s.tar.xz
cargo build --release --example time_kernel --message-format=json > .dev/g3/cargo.json
pack_one time_kernel "$(built time_kernel < .dev/g3/cargo.json)"

echo "== with the staged Q as well: attention's tests and bench"
git apply "$here/flash-fwd-q-staged.patch"
PACK_BENCHES="attention" PACK_TESTS="flash_attention flash" scripts/device/pack.sh > /dev/null
mv .dev/bins.tar.xz .dev/bins_q.tar.xz
mv .dev/bins_s.tar.xz .dev/bins.tar.xz
rm -f .dev/g3/cargo.json
mkdir -p .dev/f4/lib
cp shaders/lib/flash_fwd_tc.wgsl .dev/f4/lib/flash_fwd_tcq.wgsl
git checkout HEAD -- "${patched[@]}"

echo "== the forward's lab copies (.dev/f4)"
F=.dev/f4
cp shaders/00_shared.wgsl "$F/"
cp -r shaders/lib/. "$F/lib/"
patch -s -o "$F/lib/flash_fwd_tcqn.wgsl" shaders/lib/flash_fwd_tc.wgsl < "$here/lab/flash_fwd_tcqn.patch"
(cd "$F" && python3 "$here/lab/make_fwd.py" "$root/shaders/05_attention.wgsl")
for k in flash_forward16_tc flash_forward16_tcq flash_forward16_tcqn; do
    (cd "$F" && python3 "$here/lab/flatten.py" fwd.wgsl "$k" > "$k.E.wgsl")
done

echo "== the GEMM lab copies (.dev/g3)"
G=.dev/g3
cp "$R/2026-12-06-h17/lab/gemm_lab.wgsl" "$G/"
patch -s -o "$G/lean_rt.wgsl" "$G/gemm_lab.wgsl" < "$R/2026-12-06-h22/lean_rt.patch"
# -h25's cut-down core: its patch has two parts, against lib/gemm16.wgsl and against the gemm16
# section of shaders/03_linear.wgsl (marker to the first closing brace), both at e8555df.
base=e8555df
mkdir -p "$G/u8/lib"
git show "$base:shaders/00_shared.wgsl" > "$G/u8/00_shared.wgsl"
git show "$base:shaders/lib/gemm16.wgsl" > "$G/u8/lib/gemm16.wgsl"
git show "$base:shaders/03_linear.wgsl" |
    awk '/^\/\/ --- KERNEL: gemm16 ---$/ && !done { on = 1 } on { print } on && /^}$/ { on = 0; done = 1 }' > "$G/u8/g16.wgsl"
split_at=$(grep -n '^--- a/gemm16 section' "$R/2026-12-06-h25/lab/u8.patch" | cut -d: -f1)
head -n $((split_at - 1)) "$R/2026-12-06-h25/lab/u8.patch" | patch -s "$G/u8/lib/gemm16.wgsl"
tail -n +"$split_at" "$R/2026-12-06-h25/lab/u8.patch" | patch -s "$G/u8/g16.wgsl"
cp -r "$G/u8" "$G/u8o"
patch -s "$G/u8o/lib/gemm16.wgsl" < "$R/2026-12-06-h25/lab/u8o.patch"
for v in u8 u8o; do python3 "$here/lab/flatten.py" "$G/$v/g16.wgsl" gemm16 > "$G/$v/g16e.wgsl"; done

echo "== corpus, commit, the Vulkan loader's packages"
git ls-files '*.md' '*.rs' '*.wgsl' | xargs cat > .dev/corpus.txt
echo "$(git rev-parse --short HEAD) with gemm16-stride-overrides.patch (bins_q: and flash-fwd-q-staged.patch)" > .dev/commit
cp "$here/next-run.sh" .dev/run_h26.sh
if ! compgen -G ".gl/*.deb" > /dev/null; then
    (cd .gl && apt-get download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
fi

carry=(.gl .dev/bins.tar.xz .dev/bins_q.tar.xz .dev/g3 .dev/f4 .dev/corpus.txt .dev/commit .dev/run_h26.sh)
tracked=$(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)
extra=$(du -cb "${carry[@]}" | tail -1 | cut -f1)
echo "carry: ${carry[*]}"
echo "bytes: $extra carried + $tracked tracked = $(((extra + tracked) / 1048576)) MiB of 64"
[ $((extra + tracked)) -lt $((64 * 1048576)) ] || { echo "prepare.sh: over the carry limit" >&2; exit 1; }
