#!/usr/bin/env python3
"""Writes fwd.wgsl for the lab (run from the folder that holds 00_shared.wgsl and lib/): the
library's flash_forward16_tc section of shaders/05_attention.wgsl three times, as
flash_forward16_tc, _tcq and _tcqn, each including its own body file (lib/flash_fwd_tc.wgsl,
lib/flash_fwd_tcq.wgsl, lib/flash_fwd_tcqn.wgsl) and lib/flash.wgsl, which the file's preamble
brings in the library."""
import sys
src = open(sys.argv[1] if len(sys.argv) > 1 else "shaders/05_attention.wgsl").read()
i = src.index("// --- KERNEL: flash_forward16_tc ---")
j = src.index("\n}\n", i) + 3
sec = src[i:j].replace('//#include "lib/flash_fwd16_io.wgsl"',
                       '//#include "lib/flash.wgsl"\n//#include "lib/flash_fwd16_io.wgsl"')
out = sec
for name in ("tcq", "tcqn"):
    out += "\n" + sec.replace("flash_forward16_tc", "flash_forward16_" + name).replace(
        "lib/flash_fwd_tc.wgsl", "lib/flash_fwd_" + name + ".wgsl")
open("fwd.wgsl", "w").write(out)
