"""PyTorch's fused attention on the same problems as `benches/attention.rs`, the reference for
our flash kernels: `torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)` at
batch 8, 12 heads, head dim 64, sequence 1024 and 4096, in bf16 and fp16, forward and forward +
backward. Q, K, V are laid out as the trainer's ([B, S, H, Dh], viewed as [B, H, S, Dh]).

FLOPs as `benches/attention.rs` counts them: forward 2·B·H·S²·Dh (causal), forward + backward
3.5× that. Each case is timed after 0.3 s of back-to-back warm-up, its repeats back to back
(CUDA events between them, one synchronisation at the end), median; the SM clock and power are
read before and after each case (`nvidia-smi`, or PyTorch where it can). JSON lines go to --out
and stdout:
  {"bench": "sdpa", "dtype": "bf16", "pass": "fwd" | "fwd_bwd", "batch", "seq", "heads",
   "head_dim", "ns", "flops", "tflops", "backend", "clock_before"/"clock_after": {...}}

    python3 scripts/device/sdpa_baseline.py --out sdpa.jsonl
"""
import argparse
import json
import statistics
import subprocess
import time

import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--heads", type=int, default=12)
p.add_argument("--head-dim", type=int, default=64)
p.add_argument("--seqs", default="1024,4096")
p.add_argument("--repeats", type=int, default=30)
args = p.parse_args()

dev = torch.device("cuda")
out = open(args.out, "w")


def clock():
    """SM clock (MHz) and power (W) now."""
    try:
        r = subprocess.run(
            ["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10,
        )
        sm, power = (float(x) for x in r.stdout.strip().splitlines()[0].split(","))
        return {"sm_mhz": sm, "power_w": power}
    except Exception as e:  # noqa: BLE001 - informational only
        state = {"nvidia_smi_error": str(e)[:200]}
        try:
            state["sm_mhz"] = torch.cuda.clock_rate()
        except Exception:  # noqa: BLE001
            pass
        return state


def sustained(fn, warm_s=0.3, repeats=30):
    """Median ns of `fn` after `warm_s` of back-to-back warm-up, the repeats back to back."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    n = 0
    while True:
        for _ in range(4):
            fn()
        n += 4
        torch.cuda.synchronize()
        if time.perf_counter() - t0 >= warm_s and n >= 8:
            break
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
    for a, b in ev:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) * 1e6 for a, b in ev)


def backend():
    """The SDPA kernels PyTorch may pick (it takes the first that supports the inputs)."""
    b = torch.backends.cuda
    names = [("flash", b.flash_sdp_enabled()), ("mem_efficient", b.mem_efficient_sdp_enabled()),
             ("cudnn", getattr(b, "cudnn_sdp_enabled", lambda: False)()), ("math", b.math_sdp_enabled())]
    return ",".join(n for n, on in names if on)


for s in (int(x) for x in args.seqs.split(",")):
    B, H, Dh = args.batch, args.heads, args.head_dim
    fwd_flops = 2.0 * B * H * s * s * Dh
    for name, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        def tensor():
            return torch.randn(B, s, H, Dh, device=dev, dtype=dtype).transpose(1, 2)

        q, k, v = tensor(), tensor(), tensor()
        g = torch.randn(B, H, s, Dh, device=dev, dtype=dtype)

        def fwd():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))

        def fwd_bwd():
            o = F.scaled_dot_product_attention(qg, kg, vg, is_causal=True)
            o.backward(g)

        cases = [("fwd", fwd, fwd_flops), ("fwd_bwd", fwd_bwd, 3.5 * fwd_flops)]
        for pass_name, fn, flops in cases:
            before = clock()
            if pass_name == "fwd":
                with torch.no_grad():
                    ns = sustained(fn, repeats=args.repeats)
            else:
                ns = sustained(fn, repeats=args.repeats)
            after = clock()
            row = dict(bench="sdpa", dtype=name, **{"pass": pass_name}, batch=B, seq=s, heads=H, head_dim=Dh,
                       ns=ns, flops=flops, tflops=flops / ns / 1e3, backend=backend(),
                       device=torch.cuda.get_device_name(0), torch=torch.__version__,
                       clock_before=before, clock_after=after)
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(json.dumps(row), flush=True)
        del q, k, v, g, qg, kg, vg
        torch.cuda.empty_cache()
