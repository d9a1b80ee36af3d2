#!/usr/bin/env bash
# On a machine with the NVIDIA driver: points the driver's shader disk cache at a fresh folder,
# builds the library's pipelines into it with pipeline-stats, and looks for machine code (SASS)
# in what the driver wrote: cubin ELF images are cut out and disassembled with cuobjdump and
# nvdisasm where those exist. Whether the Vulkan cache holds cubins at all is not known: this
# reports what it finds (files, sizes, first bytes, ELF images, disassembler results) rather than
# assuming a format.
#
# usage: tools/pipeline-stats/sass.sh OUTDIR [pipeline-stats arguments]   (default: --all)
#   PIPELINE_STATS: the binary (default: pipeline-stats on PATH, ./pipeline-stats,
#   target/release/pipeline-stats).
# Writes OUTDIR/sass-report.txt, the cache copy (OUTDIR/cache), the statistics run with its
# --dump files (OUTDIR/stats.txt, OUTDIR/dump), and OUTDIR/sass/*.cubin and *.sass if any.
set -uo pipefail
out=${1:?usage: sass.sh OUTDIR [pipeline-stats arguments]}
shift
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--all)
mkdir -p "$out"
out=$(cd "$out" && pwd)
report="$out/sass-report.txt"
: > "$report"
say() { echo "$*" | tee -a "$report"; }

bin=${PIPELINE_STATS:-}
if [ -z "$bin" ]; then
    for c in "$(command -v pipeline-stats 2>/dev/null)" ./pipeline-stats target/release/pipeline-stats; do
        if [ -n "$c" ] && [ -x "$c" ]; then bin=$c; break; fi
    done
fi
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
    say "no pipeline-stats binary (set PIPELINE_STATS)"
    exit 1
fi
tool() {
    command -v "$1" 2>/dev/null && return
    for d in /usr/local/cuda/bin /usr/local/cuda-*/bin /opt/nvidia/*/bin; do
        if [ -x "$d/$1" ]; then echo "$d/$1"; return; fi
    done
}
nvdisasm=$(tool nvdisasm)
cuobjdump=$(tool cuobjdump)
say "pipeline-stats: $bin; nvdisasm: ${nvdisasm:-none}; cuobjdump: ${cuobjdump:-none}"
say "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"

cache="$out/cache"
rm -rf "$cache" "$out/sass"
mkdir -p "$cache" "$out/sass"
export __GL_SHADER_DISK_CACHE=1 __GL_SHADER_DISK_CACHE_PATH="$cache" __GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1
# Files the driver writes anywhere else are found by their time.
marker="$out/.started"
touch "$marker"
sleep 1

# First the pipelines as wgpu creates them (no capture flags, which a driver may keep out of its
# cache), then the statistics run with its internal representations.
"$bin" "${args[@]}" --build-only > "$out/build.txt" 2>&1
say "pipeline-stats --build-only: exit $?, $(grep -c 'built' "$out/build.txt") pipelines built"
"$bin" "${args[@]}" --dump "$out/dump" > "$out/stats.txt" 2>&1
say "pipeline-stats (statistics): exit $?; its internal representations: $(ls "$out/dump" 2>/dev/null | grep -c '\.e[0-9]*\.') files in dump/"

say ""
say "== files in the cache folder"
find "$cache" -type f -printf '%10s %p\n' 2>/dev/null | sort -k2 | tee -a "$report"
say "== other driver files written since the start (home, /tmp, /var/tmp)"
find "$HOME" /tmp /var/tmp -newer "$marker" -type f -not -path "$out/*" \( -ipath '*nv*' -o -ipath '*glcache*' -o -ipath '*shader*' \) \
    2>/dev/null | head -50 | tee -a "$report"

say ""
say "== looking for ELF (cubin) images"
python3 - "$cache" "$out/sass" "$HOME/.nv" "$HOME/.cache/nvidia" <<'EOF' | tee -a "$report"
import os, struct, sys

cache, dest, *others = sys.argv[1:]
EM_CUDA = 190


def elf_end(data, at):
    """The end of the ELF64 image starting at `at`: the furthest section, segment or header table."""
    if data[at + 4] != 2 or data[at + 5] != 1:  # 64-bit, little-endian
        return None
    phoff, shoff = struct.unpack_from("<QQ", data, at + 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, at + 0x36)
    end = max(0x40, phoff + phentsize * phnum, shoff + shentsize * shnum)
    for i in range(shnum):
        sh = at + shoff + i * shentsize
        if sh + 0x28 > len(data):
            return None
        sh_type, = struct.unpack_from("<I", data, sh + 4)
        off, size = struct.unpack_from("<QQ", data, sh + 0x18)
        if sh_type != 8:  # SHT_NOBITS takes no room
            end = max(end, off + size)
    return end if at + end <= len(data) else None


found = 0
roots = [cache] + [o for o in others if os.path.isdir(o)]
for root in roots:
    for base, _, names in os.walk(root):
        for name in sorted(names):
            path = os.path.join(base, name)
            data = open(path, "rb").read()
            elves = []
            at = data.find(b"\x7fELF")
            while at >= 0:
                machine = struct.unpack_from("<H", data, at + 0x12)[0] if at + 0x14 <= len(data) else 0
                end = elf_end(data, at) if at + 0x40 <= len(data) else None
                elves.append((at, machine, end))
                at = data.find(b"\x7fELF", at + 4)
            text = [w for w in (b"sm_90", b"SM90", b"nvidia", b"NVIDIA", b"cubin", b"SASS", b".nv.info") if w in data]
            print(f"{path}: {len(data)} bytes, starts {data[:16].hex()}, ELF headers {len(elves)}, "
                  f"strings {[w.decode() for w in text]}")
            for i, (at, machine, end) in enumerate(elves):
                kind = "CUDA" if machine == EM_CUDA else f"e_machine {machine}"
                if end is None:
                    print(f"  ELF at {at}: {kind}, extent unreadable")
                    continue
                out = os.path.join(dest, f"{name}.{i}.cubin")
                open(out, "wb").write(data[at:at + end])
                found += 1
                print(f"  ELF at {at}: {kind}, {end} bytes -> {out}")
print(f"ELF images cut out: {found}")
EOF

say ""
say "== disassembly"
shopt -s nullglob
cubins=("$out"/sass/*.cubin)
if [ ${#cubins[@]} -eq 0 ]; then
    say "no ELF images in the cache: nothing to disassemble (the cache format is not a plain cubin here;"
    say "see the first bytes above, and the internal representations in dump/ if the driver returned any)"
fi
for c in "${cubins[@]}"; do
    done_one=0
    if [ -n "$cuobjdump" ] && "$cuobjdump" -sass "$c" > "$c.cuobjdump.sass" 2> "$c.cuobjdump.err" && [ -s "$c.cuobjdump.sass" ]; then
        say "$(basename "$c"): cuobjdump -sass: $(wc -l < "$c.cuobjdump.sass") lines"
        done_one=1
    fi
    if [ -n "$nvdisasm" ] && "$nvdisasm" -c "$c" > "$c.nvdisasm.sass" 2> "$c.nvdisasm.err" && [ -s "$c.nvdisasm.sass" ]; then
        say "$(basename "$c"): nvdisasm: $(wc -l < "$c.nvdisasm.sass") lines"
        done_one=1
    fi
    [ $done_one = 1 ] || say "$(basename "$c"): neither disassembler read it ($(head -c 200 "$c.cuobjdump.err" "$c.nvdisasm.err" 2>/dev/null | tr '\n' ' '))"
done
rm -f "$marker"
say "report: $report"
