"""PyTorch baselines for the H200 comparison, run in the same session as our benchmarks.

Writes one JSON object per line to the file given by --out: the device-to-device copy
bandwidth, cuBLAS SGEMM with TF32 off on the benchmark shapes, PyTorch eager versions of the
memory-bound ops, and the training throughput of the same LLaMA-style model as
`cargo run --release --example train` (the `gpt2-small` and `gpt2-medium` presets, bytes) in the
four ways a PyTorch user would train it: eager fp32, eager AMP bf16 with the fused AdamW, eager
AMP fp16 with GradScaler, and `torch.compile` bf16 (a way that fails is reported with the reason in
`failed`, and the others still run). Timing: CUDA events around each op, warm-up first, median of
the repeats; a training step is timed over 10 back-to-back steps after 3 warm-up ones; inputs are
random, never zeros.

Section `gemm_tc` (not run by default: `--only gemm_tc`) is the cuBLAS side of the tensor-core
sweep (`benches/coop_sweep.rs`): the same problems and layouts (xwt = A·Bᵀ with B stored [N,K],
dyw = A·B, xtb = Aᵀ·B with A stored [K,M]), fp16 in / fp32 out (`torch.mm(..., out_dtype=
torch.float32)`), fp16 in / fp16 out, and fp32 with TF32 off; the same error metric
(max |c − Σab| / Σ|a||b| over 4096 sampled outputs against float64 of the f32 inputs, uniform in
[-1, 1)); sustained warm-up (≥ 0.3 s of back-to-back products) before back-to-back timed repeats,
so the SM clock is up; the SM clock and power read right after each timing.
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--only", default="", help="comma-separated sections: copy,gemm,eager,train,gemm_tc (default: all but gemm_tc)")
p.add_argument("--dim", type=int, default=768)
p.add_argument("--layers", type=int, default=12)
p.add_argument("--heads", type=int, default=12)
p.add_argument("--kv-heads", type=int, default=12)
p.add_argument("--seq-len", type=int, default=1024)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--ffn", type=int, default=0)
p.add_argument("--models", default="gpt2-small,gpt2-medium",
               help="comma-separated training models: gpt2-small, gpt2-medium, custom (--dim, --layers, ... )")
args = p.parse_args()
sections = set(filter(None, args.only.split(","))) or {"copy", "gemm", "eager", "train"}

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = torch.device("cuda")
out = open(args.out, "w")


def emit(**kw):
    kw["device"] = torch.cuda.get_device_name(0)
    out.write(json.dumps(kw) + "\n")
    out.flush()
    print(json.dumps(kw), flush=True)


def timed(fn, warmup=3, repeats=20):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e6)  # ns
    return statistics.median(times)


if "copy" in sections:
    n = 1 << 28  # 1 GiB of f32
    src = torch.rand(n, device=dev)
    dst = torch.empty_like(src)
    t = timed(lambda: dst.copy_(src))
    emit(bench="copy", bytes=2 * 4 * n, ns=t, gbps=2 * 4 * n / t)

if "gemm" in sections:
    shapes = [(4096, 4096, 4096), (8192, 768, 768), (8192, 768, 2304), (8192, 768, 3072), (8192, 3072, 768), (8192, 768, 50304),
              (8192, 256, 768), (8192, 768, 2048), (8192, 2048, 768)]  # the last three: weight-gradient shapes of the trainer
    for (m, k, n) in shapes:
        x = torch.randn(m, k, device=dev)
        w = torch.randn(k, n, device=dev)
        wt = torch.randn(n, k, device=dev)
        b = torch.randn(m, n, device=dev)
        flops = 2.0 * m * n * k
        for layout, fn in [
            ("matmul", lambda: torch.matmul(x, w)),
            ("matmul_t", lambda: torch.matmul(x, wt.t())),
            ("matmul_at", lambda: torch.matmul(x.t(), b)),
        ]:
            t = timed(fn)
            emit(bench="gemm", layout=layout, m=m, n=n, k=k, ns=t, tflops=flops / t / 1e3)


def timed_sustained(fn, warm_s=0.3, repeats=30):
    """Median ns of `fn` after `warm_s` of back-to-back warm-up; the repeats run back to back
    (events between them, one synchronisation at the end), so the clock never idles."""
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


def gpu_state():
    """SM clock (MHz) and power (W) now, where PyTorch can read them."""
    out = {}
    for key, f in (("sm_mhz", "clock_rate"), ("power_w", "power_draw")):
        try:
            v = getattr(torch.cuda, f)()
            out[key] = v / 1000.0 if key == "power_w" else v  # power_draw is in mW
        except Exception as e:  # noqa: BLE001 - informational only
            out[key + "_error"] = str(e)[:200]
    return out


if "gemm_tc" in sections:
    # (M, K, N, layout): the sweep's problems (benches/coop/plan.rs), the edge problem last.
    tc_cases = []
    for lay in ("xwt", "dyw"):
        tc_cases += [(4096, 4096, 4096, lay), (8192, 768, 2304, lay), (8192, 768, 3072, lay), (8192, 3072, 768, lay)]
    tc_cases += [(4096, 4096, 4096, "xtb"), (768, 8192, 768, "xtb"), (768, 8192, 3072, "xtb"), (8192, 8192, 8192, "xwt")]
    tc_cases += [(1000, 770, 1030, lay) for lay in ("xwt", "dyw", "xtb")]
    gen = torch.Generator(device=dev)
    gen.manual_seed(12345)
    for (m, k, n, lay) in tc_cases:
        def uni(*shape):
            return torch.rand(*shape, device=dev, generator=gen) * 2 - 1

        # Stored operands and the logical A [M,K], B [K,N] as views.
        a_st = uni(k, m) if lay == "xtb" else uni(m, k)
        b_st = uni(n, k) if lay == "xwt" else uni(k, n)

        def logical(x_st, transposed):
            return x_st.t() if transposed else x_st

        a_t, b_t = lay == "xtb", lay == "xwt"
        # Sampled outputs and their float64 reference (from the f32 inputs).
        ns = 4096
        ii = torch.randint(0, m, (ns,), device=dev, generator=gen)
        jj = torch.randint(0, n, (ns,), device=dev, generator=gen)
        a64 = logical(a_st, a_t).double()[ii]            # [ns, K]
        b64 = logical(b_st, b_t).double()[:, jj].t()     # [ns, K]
        ref = (a64 * b64).sum(-1)
        den = (a64.abs() * b64.abs()).sum(-1)
        del a64, b64
        flops = 2.0 * m * n * k
        a16, b16 = a_st.half(), b_st.half()
        variants = [
            ("fp16_fp32out", lambda: torch.mm(logical(a16, a_t), logical(b16, b_t), out_dtype=torch.float32)),
            ("fp16", lambda: torch.mm(logical(a16, a_t), logical(b16, b_t))),
            ("fp32", lambda: torch.mm(logical(a_st, a_t), logical(b_st, b_t))),
        ]
        for name, fn in variants:
            rec = dict(bench="gemm_tc", impl="cublas", variant=name, layout=lay, m=m, k=k, n=n)
            try:
                c = fn()
                err = ((c[ii, jj].double() - ref).abs() / den).max().item()
                del c
                t = timed_sustained(fn)
                rec.update(ns=t, tflops=flops / t / 1e3, error=err, **gpu_state())
            except Exception as e:  # noqa: BLE001 - e.g. out_dtype missing in an old PyTorch
                rec.update(failed=str(e)[:300])
            emit(**rec)
        del a_st, b_st, a16, b16
        torch.cuda.empty_cache()

if "eager" in sections:
    big = torch.rand(1 << 28, device=dev) - 0.5
    t = timed(lambda: big.sum())
    emit(bench="eager", op="reduce_sum", n=big.numel(), bytes=4 * big.numel(), ns=t)
    for length in [256, 768, 4096, 50304]:
        rows = (1 << 26) // length
        x = torch.rand(rows, length, device=dev)
        t = timed(lambda: x.sum(-1))
        emit(bench="eager", op="row_sum", len=length, rows=rows, bytes=4 * rows * length + 4 * rows, ns=t)
    rows, d = 8192, 768
    x = torch.randn(rows, d, device=dev)
    g = torch.rand(d, device=dev) + 0.5
    t = timed(lambda: F.rms_norm(x, (d,), g, 1e-5))
    emit(bench="eager", op="rmsnorm_forward", rows=rows, dim=d, bytes=8 * rows * d, ns=t)
    for v in [256, 50304]:
        logits = torch.randn(8192, v, device=dev, requires_grad=True)
        tgt = torch.randint(0, v, (8192,), device=dev)

        def ce():
            loss = F.cross_entropy(logits, tgt)
            loss.backward()
            logits.grad = None

        t = timed(ce)
        emit(bench="eager", op="cross_entropy_fwd_bwd", rows=8192, vocab=v, bytes=8 * 8192 * v, ns=t)
    n = 124_000_000  # about GPT-2 small's parameter count, one tensor
    p_ = torch.nn.Parameter(torch.randn(n, device=dev) * 0.02)
    p_.grad = torch.randn(n, device=dev) * 1e-3
    for impl, kw in [("foreach", {"foreach": True}), ("fused", {"fused": True})]:
        opt = torch.optim.AdamW([p_], lr=1e-4, **kw)
        t = timed(lambda: opt.step())
        emit(bench="eager", op="adamw", impl=impl, n=n, bytes=4 * n * 7, ns=t)
    table = torch.randn(50304, 768, device=dev)
    ids = torch.randint(0, 50304, (8192,), device=dev)
    t = timed(lambda: F.embedding(ids, table))
    emit(bench="eager", op="embedding", rows=8192, dim=768, bytes=8 * 8192 * 768, ns=t)
    x = torch.randn(1 << 26, device=dev)
    t = timed(lambda: x.half())
    emit(bench="eager", op="cast_f32_to_f16", n=x.numel(), bytes=6 * x.numel(), ns=t)
    h = x.half()
    t = timed(lambda: h.float())
    emit(bench="eager", op="cast_f16_to_f32", n=x.numel(), bytes=6 * x.numel(), ns=t)


class Block(torch.nn.Module):
    def __init__(s, d, h, hkv, f):
        super().__init__()
        s.h, s.hkv, s.dh = h, hkv, d // h
        s.attention_norm = torch.nn.RMSNorm(d, eps=1e-5)
        s.wq = torch.nn.Linear(d, h * s.dh, bias=False)
        s.wk = torch.nn.Linear(d, hkv * s.dh, bias=False)
        s.wv = torch.nn.Linear(d, hkv * s.dh, bias=False)
        s.wo = torch.nn.Linear(h * s.dh, d, bias=False)
        s.ffn_norm = torch.nn.RMSNorm(d, eps=1e-5)
        s.w1 = torch.nn.Linear(d, f, bias=False)
        s.w3 = torch.nn.Linear(d, f, bias=False)
        s.w2 = torch.nn.Linear(f, d, bias=False)

    def forward(s, x, cos, sin):
        b, t, _ = x.shape
        hn = s.attention_norm(x)
        q = s.wq(hn).view(b, t, s.h, s.dh)
        k = s.wk(hn).view(b, t, s.hkv, s.dh)
        v = s.wv(hn).view(b, t, s.hkv, s.dh)

        def rope(z):  # interleaved pairs (2i, 2i+1)
            z0, z1 = z[..., 0::2], z[..., 1::2]
            return torch.stack((z0 * cos - z1 * sin, z0 * sin + z1 * cos), dim=-1).flatten(-2)

        q, k = rope(q), rope(k)
        rep = s.h // s.hkv
        k = k.repeat_interleave(rep, dim=2)
        v = v.repeat_interleave(rep, dim=2)
        # PyTorch's own choice of fp32 attention kernel (TF32 off).
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + s.wo(a.transpose(1, 2).reshape(b, t, -1))
        h2 = s.ffn_norm(x)
        return x + s.w2(F.silu(s.w1(h2)) * s.w3(h2))


# (layers, dim, heads, kv heads) of the trainer's presets (`--preset gpt2-small`, `gpt2-medium`).
PRESETS = {"gpt2-small": (12, 768, 12, 12), "gpt2-medium": (24, 1024, 16, 16)}


def train_model(name, L, d, h, hkv, T, B):
    """Training throughput of one model shape in each of the four ways a PyTorch user would run it:
    eager fp32 (TF32 off), eager AMP bf16 with the fused AdamW, eager AMP fp16 with GradScaler (the
    fused AdamW too), torch.compile bf16. Each: 3 warm-up steps, then 10 timed ones. A way that
    fails (torch.compile missing or broken on the machine, out of memory) is reported with the
    reason and the others still run."""
    f = args.ffn or ((8 * d + 2) // 3 + 31) // 32 * 32
    dh = d // h
    pos = torch.arange(T, device=dev, dtype=torch.float32)[:, None]
    inv = 10000.0 ** (-torch.arange(0, dh, 2, device=dev, dtype=torch.float32) / dh)
    ang = pos * inv
    cos, sin = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    data = torch.randint(0, 256, (16, B, T + 1), device=dev)

    class Model(torch.nn.Module):
        def __init__(s):
            super().__init__()
            s.emb = torch.nn.Embedding(256, d)
            s.blocks = torch.nn.ModuleList([Block(d, h, hkv, f) for _ in range(L)])
            s.norm = torch.nn.RMSNorm(d, eps=1e-5)

        def forward(s, ids, tgt):
            x = s.emb(ids)
            for blk in s.blocks:
                x = blk(x, cos, sin)
            logits = s.norm(x) @ s.emb.weight.t()
            return F.cross_entropy(logits.view(-1, 256).float(), tgt.reshape(-1))

    ways = [
        ("pytorch-eager-fp32", None, False, False),
        ("pytorch-eager-amp-bf16-fused-adamw", torch.bfloat16, False, False),
        ("pytorch-eager-amp-fp16-gradscaler", torch.float16, True, False),
        ("pytorch-compile-bf16", torch.bfloat16, False, True),
    ]
    for impl, dtype, scaled, compiled in ways:
        rec = dict(bench="train", impl=impl, model=name, dim=d, layers=L, heads=h, kv_heads=hkv, ffn=f,
                   seq_len=T, batch=B)
        model = fwd = opt = None
        try:
            torch.manual_seed(0)
            model = Model().to(dev)
            params = list(model.parameters())
            rec["params"] = sum(p.numel() for p in params)
            # The fused AdamW wherever the step runs in reduced precision (what such a user picks);
            # eager fp32 keeps PyTorch's default (foreach) implementation.
            kw = {"fused": True} if dtype is not None else {}
            opt = torch.optim.AdamW(params, lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, **kw)
            scaler = torch.amp.GradScaler("cuda") if scaled else None
            fwd = model
            if compiled:
                if not hasattr(torch, "compile"):
                    raise RuntimeError("this PyTorch has no torch.compile")
                fwd = torch.compile(model)

            def step(i):
                batch = data[i % data.shape[0]]
                with torch.autocast("cuda", dtype=dtype, enabled=dtype is not None):
                    loss = fwd(batch[:, :-1], batch[:, 1:])
                opt.zero_grad(set_to_none=True)
                if scaler is not None:
                    scaler.scale(loss).backward()
                    scaler.unscale_(opt)
                    torch.nn.utils.clip_grad_norm_(params, 1.0)
                    scaler.step(opt)
                    scaler.update()
                else:
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(params, 1.0)
                    opt.step()
                return loss

            t0 = time.perf_counter()
            for i in range(3):
                step(i)
            torch.cuda.synchronize()
            rec["warmup_s"] = time.perf_counter() - t0
            steps = 10
            t0 = time.perf_counter()
            for i in range(steps):
                loss = step(i)
            torch.cuda.synchronize()
            dt = (time.perf_counter() - t0) / steps
            rec.update(step_s=dt, tokens_per_s=B * T / dt, loss=float(loss.item()), **gpu_state())
        except Exception as e:  # noqa: BLE001 - reported, the other ways still run
            rec.update(failed=f"{type(e).__name__}: {str(e)[:400]}")
        emit(**rec)
        del model, fwd, opt
        torch.cuda.empty_cache()


if "train" in sections:
    T, B = args.seq_len, args.batch
    names = [m for m in args.models.split(",") if m]
    for name in names:
        if name == "custom":
            train_model(name, args.layers, args.dim, args.heads, args.kv_heads, T, B)
        elif name in PRESETS:
            train_model(name, *PRESETS[name], T, B)
        else:
            emit(bench="train", model=name, failed=f"unknown model; one of {sorted(PRESETS)} or custom")
