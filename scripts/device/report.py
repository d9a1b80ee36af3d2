"""Prints the comparison table of an H200 run (the files scripts/device/run_h200.sh writes)."""
import json
import re
import sys
from pathlib import Path

out = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/out")


def lines(name):
    p = out / name
    return [json.loads(l) for l in p.read_text().splitlines() if l.strip()] if p.exists() else []


torch = lines("torch.jsonl")
copy = next((t["gbps"] for t in torch if t["bench"] == "copy"), None)
print(f"# H200 comparison ({(out / 'gpu.txt').read_text().strip() if (out / 'gpu.txt').exists() else '?'})\n")
print((out / "tests.log").read_text() if (out / "tests.log").exists() else "")

print("## SGEMM vs torch.matmul (TF32 off), goal ≥ 0.70\n")
print("| kernel | M×K×N | ours TFLOP/s | cuBLAS TFLOP/s | ratio |")
print("|---|---|---|---|---|")
ours_best = 0.0
for g in lines("gemm.jsonl"):
    if g["bench"] != "gemm":
        continue
    t = next((x for x in torch if x["bench"] == "gemm" and x["layout"] == g["layout"].removesuffix("_split") and x["m"] == g["m"] and x["n"] == g["n"] and x["k"] == g["k"]), None)
    ours_best = max(ours_best, g["tflops"])
    ref = t["tflops"] if t else float("nan")
    print(f"| {g['layout']} | {g['m']}×{g['k']}×{g['n']} | {g['tflops']:.1f} | {ref:.1f} | {g['tflops'] / ref:.2f} |")

print("\n| weight gradient M×K×N | parts | chosen | TFLOP/s | cuBLAS `x.t() @ b` TFLOP/s | ratio |")
print("|---|---|---|---|---|---|")
for g in lines("gemm.jsonl"):
    if g["bench"] == "gemm_parts":
        t = next((x for x in torch if x["bench"] == "gemm" and x["layout"] == "matmul_at" and x["m"] == g["m"] and x["n"] == g["n"] and x["k"] == g["k"]), None)
        ref = t["tflops"] if t else float("nan")
        print(f"| {g['m']}×{g['k']}×{g['n']} | {g['parts']} | {'yes' if g['parts'] == g['chosen'] else ''} | {g['tflops']:.1f} | {ref:.1f} | {g['tflops'] / ref:.2f} |")

eager = {
    "reduce_sum": ("reduce_sum", None),
    "cross_entropy V=256": ("cross_entropy_fwd_bwd", 256),
    "cross_entropy V=50304": ("cross_entropy_fwd_bwd", 50304),
    "rmsnorm_forward 8192×768": ("rmsnorm_forward", None),
    "adamw_update 124M": ("adamw", None),
    "embed_lookup 8192×768": ("embedding", None),
    "cast_f32_to_f16 64M": ("cast_f32_to_f16", None),
    "cast_f16_to_f32 64M": ("cast_f16_to_f32", None),
}
print(f"\n## Memory-bound kernels, goal ≥ 0.85 of copy ({copy or float('nan'):.0f} GB/s) and faster than eager\n")
print("| kernel | ours µs | GB/s | of copy | eager µs | ours/eager time |")
print("|---|---|---|---|---|---|")
for m in lines("memory.jsonl"):
    op, v = eager.get(m["op"], (None, None))
    cands = [t for t in torch if t["bench"] == "eager" and t.get("op") == op and (v is None or t.get("vocab") == v)]
    e = min((t["ns"] for t in cands), default=float("nan"))
    gbps = m["bytes"] / m["ns"]
    print(f"| {m['op']} | {m['ns'] / 1e3:.1f} | {gbps:.0f} | {gbps / copy if copy else float('nan'):.2f} | {e / 1e3:.1f} | {m['ns'] / e:.2f} |")

print("\n## Subgroup vs tree reduction\n")
print("| case | subgroup µs | tree µs | tree/subgroup |")
print("|---|---|---|---|")
for r in lines("reductions.jsonl"):
    print(f"| {r['case']} | {r['subgroup_ns'] / 1e3:.1f} | {r['tree_ns'] / 1e3:.1f} | {r['tree_ns'] / r['subgroup_ns']:.2f} |")

for a in lines("attention.jsonl"):
    total = a["fwd_ns"] + a["bwd_ns"]
    tf = a["flops"] / total / 1e3
    print(f"\n## Attention fwd+bwd, {a['path']} (B={a['batch']}, S={a['seq']}, H={a['heads']}, Dh={a['head_dim']}): {total / 1e6:.2f} ms, {tf:.2f} TFLOP/s = {tf / ours_best if ours_best else float('nan'):.2f} of our best SGEMM rate (goal ≥ 0.5)")

sdpa = lines("sdpa.jsonl")
if sdpa:
    print("\n## Attention against PyTorch SDPA (is_causal=True), goal: forward + backward ≥ 0.5× SDPA's speed\n")
    print("| S | ours | ours fwd ms | ours fwd+bwd ms | SDPA | SDPA fwd ms | SDPA fwd+bwd ms | speed vs SDPA fwd | fwd+bwd |")
    print("|---|---|---|---|---|---|---|---|---|")
    for a in lines("attention.jsonl"):
        if a["path"] not in ("flash16", "flash", "fast16"):
            continue
        for dtype in ("fp16", "bf16"):
            f = next((x for x in sdpa if x["dtype"] == dtype and x["pass"] == "fwd" and x["seq"] == a["seq"] and x["batch"] == a["batch"]), None)
            fb = next((x for x in sdpa if x["dtype"] == dtype and x["pass"] == "fwd_bwd" and x["seq"] == a["seq"] and x["batch"] == a["batch"]), None)
            if not f or not fb:
                continue
            ours = a["fwd_ns"] + a["bwd_ns"]
            print(f"| {a['seq']} | {a['path']}{' (tensor cores)' if a.get('tensor_cores') else ''} | {a['fwd_ns'] / 1e6:.3f} | {ours / 1e6:.3f} "
                  f"| {dtype} | {f['ns'] / 1e6:.3f} | {fb['ns'] / 1e6:.3f} | {f['ns'] / a['fwd_ns']:.2f} | {fb['ns'] / ours:.2f} |")
    print("\nSDPA clocks (MHz before → after): " + "; ".join(
        f"{x['dtype']} {x['pass']} S={x['seq']}: {x['clock_before'].get('sm_mhz')} → {x['clock_after'].get('sm_mhz')}" for x in sdpa))

log = (out / "bench.log").read_text() if (out / "bench.log").exists() else ""
print("\n## Host side\n")
print("\n".join(l for l in log.splitlines() if "calls in one batch" in l or "one call, one submission" in l))
tlog = (out / "train.log").read_text() if (out / "train.log").exists() else ""
# train.log holds the f32 run, the mixed run and their profiles, each after a `== name` line.
runs = dict(re.findall(r"^== (\S+)\n(.*?)(?=^== |\Z)", tlog, re.M | re.S))
torch_train = {t["impl"]: t for t in torch if t["bench"] == "train"}
print("\n## Training (GPT-2-small shape)\n")
goals = [("f32", "pytorch-eager-fp32"), ("mixed", "pytorch-eager-amp-bf16-fused-adamw"), ("mixed-8192", "none"),
         ("medium-mixed", "pytorch-eager-amp-bf16-fused-adamw")]
for name, goal in goals:
    text = runs.get(f"train-{name}", "")
    # The trainer's last line: the whole run's rate, then the steps' own (first logged step to
    # last, without validation and saves), the one comparable with PyTorch's timed steps.
    whole = re.findall(r"s, ([\d.]+) tokens/s", text)
    steady = re.findall(r"steps (\d+)–(\d+): ([\d.]+) tokens/s", text)
    model = "gpt2-medium" if name.startswith("medium") else "gpt2-small"
    ref = next((t for t in torch if t["bench"] == "train" and t["impl"] == goal and t.get("model") == model), None)
    base = ref["tokens_per_s"] if ref else float("nan")
    if whole:
        print(f"- ours {name}: {float(whole[-1]):.0f} tokens/s (wall, whole run); {goal} ({model}): {base:.0f}; "
              f"ratio {float(whole[-1]) / base:.2f}")
    if steady:
        a, b, tps = steady[-1]
        print(f"  steps {a}–{b}: {float(tps):.0f} tokens/s; ratio {float(tps) / base:.2f} (goal ≥ 1.0)")
    skipped = re.findall(r"(\d+) steps skipped", text)
    if skipped:
        print(f"  loss-scaling skips: {skipped[-1]}")
    losses = re.findall(r"train loss\s+([\d.]+)", text)
    if losses:
        print(f"  last logged training loss: {losses[-1]}")
for t in torch:
    if t["bench"] == "train":
        print(f"- {t['impl']} ({t.get('model')}): {t['tokens_per_s']:.0f} tokens/s")
for name in ["f32", "mixed", "f32-flash", "mixed-fast", "mixed-8192", "medium-mixed"]:
    text = runs.get(f"profile-{name}", "")
    prof = re.search(r"one step \((\w+) precision\): (\d+) dispatches, ([\d.]+) ms .*?, ([\d.]+)% idle", text)
    if prof:
        print(f"\n### Profile, --precision {name}: {prof.group(2)} dispatches, {prof.group(3)} ms GPU span, {prof.group(4)}% idle\n")
        print("\n".join(l for l in text.splitlines() if l.startswith("  ") and " ms" in l))

ceiling = (out / "ceiling.log").read_text() if (out / "ceiling.log").exists() else ""
if ceiling:
    print("\n## Tensor-core ceiling (coop-ceiling: coopMultiplyAdd through naga and wgpu)\n")
    print("\n".join(l for l in ceiling.splitlines() if "TFLOP/s" in l or l.startswith(("adapter", "exit"))))

# pipeline-stats: one row per built variant, the driver's statistics as columns.
stat_files = sorted(out.glob("stats*.jsonl"))
rows = [r for p in stat_files for r in lines(p.name) if r.get("status") == "built"]
if rows:
    names = []
    for r in rows:
        for e in r.get("executables", []):
            names += [n for n in e["statistics"] if n not in names]
    print(f"\n## Pipeline statistics ({rows[0].get('device', '?')}, {rows[0].get('driver', '?')})\n")
    print("| kernel | variant | overrides | " + " | ".join(names) + " |")
    print("|---|---|---|" + "---|" * len(names))
    for r in rows:
        for e in r.get("executables", []):
            shape = " ".join(f"{k}={v:g}" for k, v in r["overrides"].items())
            cells = [str(e["statistics"].get(n, "")) for n in names]
            print(f"| {r['kernel']} | {r['variant']} {r['form']} | {shape} | " + " | ".join(cells) + " |")
    failed = [r for p in stat_files for r in lines(p.name) if r.get("status") == "failed"]
    for r in failed:
        print(f"- FAILED {r['kernel']} v{r['variant']}: {r.get('reason')}")
sass = (out / "sass" / "sass-report.txt")
if sass.exists():
    print("\n## SASS from the driver's cache (tools/pipeline-stats/sass.sh)\n")
    text = sass.read_text().splitlines()
    print("\n".join(l for l in text if l.startswith(("pipeline-stats", "ELF images", "no ELF")) or ": cuobjdump" in l or ": nvdisasm" in l))
