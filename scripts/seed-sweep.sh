#!/usr/bin/env bash
# Runs test binaries under fresh seeds and reports every failure with the seed that replays it.
# Not part of CI: CI runs each test once, with a seed from the clock; this repeats that many
# times, so that a bound that only holds for most inputs shows up before it fails a landing.
#
#   scripts/seed-sweep.sh [-n SEEDS] [-p PACKAGE]... [-x REGEX] [BINARY]...
#
#   -n SEEDS    seeds per binary (default 20)
#   -p PACKAGE  only this package's test binaries (repeatable; default: every package)
#   -x REGEX    leave out binaries whose name matches (default: compile_fail, trybuild's, which
#               draws nothing at random)
#   BINARY      only these binaries: a test target's name (fused, kernels_train), or
#               PACKAGE/NAME where two packages have one of that name (kernels-train/mixed)
#
# Binaries are built once as CI builds them (debug, `cargo test --workspace --no-run`: building
# one package alone would unify features differently and rebuild), copied aside (a
# rebuild during the sweep does not change what is swept), and run one at a time from their
# package's directory, as `cargo test` runs them, with CI=true (a missing adapter fails).
# A failing run is run again with the same seed: a failure that does not reproduce is a race,
# and the report says so. Logs of failures are kept in the directory printed at the end.
set -uo pipefail
cd "$(dirname "$0")/.."

seeds=20
packages=()
exclude='^compile_fail$'
while getopts "n:p:x:" opt; do
    case $opt in
        n) seeds=$OPTARG ;;
        p) packages+=("$OPTARG") ;;
        x) exclude=$OPTARG ;;
        *) sed -n '5,12p' "$0" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
only=("$@")

export CI=true
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
out=$(mktemp -d "${TMPDIR:-/tmp}/seed-sweep.XXXXXX")
mkdir -p "$out/bin" "$out/fail"

# package/name <TAB> package directory <TAB> executable, for every test binary cargo builds.
list=$(cargo test --workspace --no-run --message-format=json 2>"$out/build.log" | python3 -c '
import json, os, sys
wanted = set(sys.argv[1:])
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        # path+file:///dir#name@version, or path+file:///dir/name#version
        where, _, fragment = m["package_id"].partition("#")
        package = fragment.split("@")[0] if "@" in fragment else os.path.basename(where)
        if not wanted or package in wanted:
            print(package + "/" + m["target"]["name"], os.path.dirname(m["manifest_path"]), m["executable"], sep="\t")
' "${packages[@]}") || { cat "$out/build.log" >&2; exit 2; }
[ -n "$list" ] || { echo "no test binaries built:" >&2; tail -20 "$out/build.log" >&2; exit 2; }

fresh_seed() { od -An -N8 -tu8 /dev/urandom | tr -d ' '; }

total_runs=0
total_fail=0
summary=()
while IFS=$'\t' read -r name dir exe; do
    target=${name#*/}
    [[ "$target" =~ $exclude ]] && continue
    if [ ${#only[@]} -gt 0 ] && ! printf '%s\n' "${only[@]}" | grep -qx -e "$target" -e "$name"; then
        continue
    fi
    copy="$out/bin/$(basename "$exe")"
    cp "$exe" "$copy"
    fails=0
    started=$(date +%s)
    for ((i = 0; i < seeds; i++)); do
        seed=$(fresh_seed)
        log="$out/run.log"
        if (cd "$dir" && KERNELS_TEST_SEED=$seed "$copy") >"$log" 2>&1; then
            continue
        fi
        fails=$((fails + 1))
        kept="$out/fail/${name/\//-}-$seed.log"
        mv "$log" "$kept"
        failed=$(grep -E '^    [a-zA-Z_:0-9]+$' "$kept" | sed 's/^ *//' | paste -sd' ' -)
        again="$out/fail/${name/\//-}-$seed.again.log"
        if (cd "$dir" && KERNELS_TEST_SEED=$seed "$copy") >"$again" 2>&1; then
            verdict="does NOT reproduce with its seed (a race?)"
        else
            verdict="reproduces"
        fi
        echo "FAIL $name KERNELS_TEST_SEED=$seed: ${failed:-see log}; $verdict; log $kept"
    done
    took=$(($(date +%s) - started))
    summary+=("$(printf '%-36s %3d runs %3d failed %6d s' "$name" "$seeds" "$fails" "$took")")
    echo "${summary[-1]}"
    total_runs=$((total_runs + seeds))
    total_fail=$((total_fail + fails))
done <<<"$list"

echo
echo "== seed sweep: $seeds seeds per binary =="
printf '%s\n' "${summary[@]}"
echo "$total_runs runs, $total_fail failed; logs of failures in $out/fail"
[ "$total_fail" -eq 0 ]
