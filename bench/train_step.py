"""Forward + backward of the shipped training kernels (specs/training.toml) against eager autograd, timed with
the project's paired CUPTI timer (specgen.bench.timing.kernel_cycle: every call once a round, rotating order,
L2 flushed before each; all kernels of one call summed), with an A/A pair of eager for the noise.

    python3 bench/train_step.py [--layer gelu|gelu_cute|gated|gated_cute] [--shape 4096x14336x4096 ...] [--rounds 20] [--compile] [--cute] [--json out.json]
                                [--cute-saves preact,recompute] [--module NAME=PATH ...]

--compile adds torch.compile (default mode) of the eager step's forward as a second peer. --layer gelu times the three
cuBLAS GEMMs alone too (`cublas_gemms`: the ceiling, eager's time over theirs, and each module's fraction of it); with
--cute, the CuTe sm90 preact module in the same cycle.

--layer gelu (the default): a step is out = gelu_tanh(x @ w.T + bias), then torch.autograd.grad(out, (x, w, bias),
dOut): three GEMMs of 2 M N K flops each. --layer gated: the gated up-projection (SwiGLU, specs/training.toml's
mlp_up_swiglu_train_*): h = x @ w.T with w the (2N, K) gate_up weight, gate, up = h.chunk(2), out = silu(gate) * up
(M x N), gradients of x and w: three GEMMs of 2 M 2N K flops; a third peer, `cublas_gemms`, runs those three GEMMs
alone (torch.mm, eager's layouts) for the ceiling (eager's time over theirs), and the bytes each side keeps between
forward and backward are measured (torch.cuda.memory_allocated after the forward, less the output). Also prints the
bf16 gradients' distance from a float32 reference (eager's and ours). --layer gelu_cute: the gelu layer on the CuTe sm90
design (linear_gelu_train_cute_bf16, preact) beside eager and the Triton preact kernel. --layer gated_cute: the gated
layer on the CuTe sm90 design (GATED_CUTE, rendered here for cute:sm90 in both save modes: no catalogue kernel)
beside eager, the three cuBLAS GEMMs alone and the Triton gated preact kernel; --cute-saves picks its save modes,
--module adds rendered module files as peers (NAME the module's entry and peer name, PATH its file: another tree's
render or another spec's, e.g. main's beside a branch's, timed in the same cycle).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

from specgen.bench.timing import kernel_cycle


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", nargs="+", default=["4096x14336x4096"], help="M x N x K (x: (M, K), w: (N, K))")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--compile", action="store_true", help="time torch.compile's step beside eager")
    ap.add_argument("--json", default="")
    ap.add_argument("--layer", choices=("gelu", "gelu_cute", "gated", "gated_cute"), default="gelu")
    ap.add_argument("--cute-saves", default="preact,recompute", help="gated_cute: the CuTe save modes timed")
    ap.add_argument("--module", action="append", default=[], metavar="NAME=PATH",
                    help="gelu, gated, gated_cute: a rendered module file timed beside (its entry NAME, the layer's torch op)")
    ap.add_argument("--cute", action="store_true", help="gelu: the CuTe sm90 preact module in the same cycle")
    args = ap.parse_args()
    extra = dict(m.split("=", 1) for m in args.module)
    if args.layer == "gated_cute":
        reports = [measure_gated_cute(*map(int, shape.split("x")), args.rounds, args.compile,
                                      args.cute_saves.split(","), extra) for shape in args.shape]
    elif args.layer == "gelu":
        reports = [measure(*map(int, shape.split("x")), args.rounds, args.compile, extra, args.cute)
                   for shape in args.shape]
    elif args.layer == "gated":
        reports = [measure_gated(*map(int, shape.split("x")), args.rounds, args.compile, None, extra)
                   for shape in args.shape]
    else:
        reports = [measure_cute(*map(int, shape.split("x")), args.rounds, args.compile) for shape in args.shape]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(reports, f, indent=1)


def measure(M: int, N: int, K: int, rounds: int, compiled: bool, extra: dict[str, str] | None = None,
            cute: bool = False) -> dict:
    """The gelu layer's step: eager, the three cuBLAS GEMMs alone (the ceiling), the Triton preact and recompute
    kernels, with `cute` the CuTe sm90 preact kernel, and `extra`'s modules ({entry name: rendered file}, e.g. another
    config of the same spec) beside them."""
    from generated.triton.linear_gelu_train_bf16 import linear_gelu_train_bf16 as preact
    from generated.triton.linear_gelu_train_recompute_bf16 import (
        linear_gelu_train_recompute_bf16 as recompute,
    )
    from specgen.compile import load_rendered

    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(M, K, generator=gen, device="cuda").bfloat16().requires_grad_()
    w = (torch.randn(N, K, generator=gen, device="cuda") / K**0.5).bfloat16().requires_grad_()
    bias = torch.randn(N, generator=gen, device="cuda").bfloat16().requires_grad_()
    grad = torch.randn(M, N, generator=gen, device="cuda").bfloat16()

    def step(fn):
        return lambda: torch.autograd.grad(fn(x, w, bias), (x, w, bias), grad)

    def eager(x, w, bias):
        return F.gelu(F.linear(x, w, bias), approximate="tanh")

    def cublas_gemms():  # the ceiling's three GEMMs at cuBLAS speed: forward x @ w.T, dgrad grad @ w, wgrad grad^T @ x
        with torch.no_grad():
            return x @ w.t(), grad @ w, grad.t() @ x

    ours = {"specgen_preact": step(lambda x, w, b: preact(x, w.t(), b)),
            "specgen_recompute": step(lambda x, w, b: recompute(x, w.t(), b)),
            **{name: step(lambda x, w, b, fn=getattr(load_rendered(Path(path)), name): fn(x, w.t(), b))
               for name, path in (extra or {}).items()}}
    if cute:  # the CuTe sm90 design's preact module in the same cycle (needs nvidia-cutlass-dsl)
        from generated.cute.linear_gelu_train_cute_bf16 import linear_gelu_train_cute_bf16 as cute_preact
        ours["specgen_cute_preact"] = step(lambda x, w, b: cute_preact(x, w.t(), b))
    calls = {"eager": step(eager), "eager_aa": step(eager), **({"compiled": step(torch.compile(eager))} if compiled else {}),
             "cublas_gemms": cublas_gemms, **ours}
    # numerics first: each side's gradients against a float32 reference
    xr, wr, br = (t.detach().float().requires_grad_() for t in (x, w, bias))
    want = torch.autograd.grad(F.gelu(F.linear(xr, wr, br), approximate="tanh"), (xr, wr, br), grad.float())
    errors = {}
    for name in ("eager", *ours):
        got = calls[name]()
        errors[name] = [((g.float() - r).abs().max() / r.abs().max()).item() for g, r in zip(got, want, strict=True)]
    res = kernel_cycle(calls, rounds=rounds)
    flops = 3 * 2 * M * N * K
    med = {k: statistics.median(v["samples"]) for k, v in res.items()}
    ratios = {peer: {k: statistics.median(e / s for e, s in zip(res[peer]["samples"], v["samples"], strict=True))
                     for k, v in res.items()} for peer in ("eager", "compiled", "cublas_gemms") if peer in res}
    report = {"shape": [M, N, K], "rounds": rounds, "device": torch.cuda.get_device_name(),
              "torch": torch.__version__, "triton": __import__("triton").__version__,
              "median_us": med, "tflops": {k: flops / v / 1e6 for k, v in med.items()},
              "paired_ratio_peer_over": ratios, "kernels_us": {k: v["kernels"] for k, v in res.items()},
              "ceiling_eager_over_cublas_gemms": ratios["eager"]["cublas_gemms"],
              "fraction_of_ceiling": {k: ratios["cublas_gemms"][k] for k in ours},
              "grad_rel_err_vs_f32 (dx, dw, dbias)": errors,
              "saved_bytes": {"preact": M * N * 2, "recompute": 0, "eager": M * N * 2}}
    print(json.dumps(report, indent=1))
    return report


def measure_cute(M: int, N: int, K: int, rounds: int, compiled: bool) -> dict:
    """The gelu layer's step on the CuTe sm90 design (save = "preact") beside eager and the Triton preact kernel."""
    from generated.cute.linear_gelu_train_cute_bf16 import linear_gelu_train_cute_bf16 as cute_preact
    from generated.triton.linear_gelu_train_bf16 import linear_gelu_train_bf16 as triton_preact

    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(M, K, generator=gen, device="cuda").bfloat16().requires_grad_()
    w = (torch.randn(N, K, generator=gen, device="cuda") / K**0.5).bfloat16().requires_grad_()
    bias = torch.randn(N, generator=gen, device="cuda").bfloat16().requires_grad_()
    grad = torch.randn(M, N, generator=gen, device="cuda").bfloat16()

    def step(fn):
        return lambda: torch.autograd.grad(fn(x, w, bias), (x, w, bias), grad)

    def eager(x, w, bias):
        return F.gelu(F.linear(x, w, bias), approximate="tanh")

    calls = {"eager": step(eager), "eager_aa": step(eager), **({"compiled": step(torch.compile(eager))} if compiled else {}),
             "specgen_cute_preact": step(lambda x, w, b: cute_preact(x, w.t(), b)),
             "specgen_triton_preact": step(lambda x, w, b: triton_preact(x, w.t(), b))}
    xr, wr, br = (t.detach().float().requires_grad_() for t in (x, w, bias))
    want = torch.autograd.grad(F.gelu(F.linear(xr, wr, br), approximate="tanh"), (xr, wr, br), grad.float())
    errors = {}
    for name in ("eager", "specgen_cute_preact", "specgen_triton_preact"):
        got = calls[name]()
        errors[name] = [((g.float() - r).abs().max() / r.abs().max()).item() for g, r in zip(got, want, strict=True)]
    res = kernel_cycle(calls, rounds=rounds)
    flops = 3 * 2 * M * N * K
    med = {k: statistics.median(v["samples"]) for k, v in res.items()}
    ratios = {peer: {k: statistics.median(e / s for e, s in zip(res[peer]["samples"], v["samples"], strict=True))
                     for k, v in res.items()} for peer in ("eager", "compiled") if peer in res}
    report = {"shape": [M, N, K], "rounds": rounds, "device": torch.cuda.get_device_name(),
              "torch": torch.__version__, "triton": __import__("triton").__version__,
              "cutlass_dsl": __import__("importlib.metadata").metadata.version("nvidia-cutlass-dsl"),
              "median_us": med, "tflops": {k: flops / v / 1e6 for k, v in med.items()},
              "paired_ratio_peer_over": ratios, "kernels_us": {k: v["kernels"] for k, v in res.items()},
              "grad_rel_err_vs_f32 (dx, dw, dbias)": errors}
    print(json.dumps(report, indent=1))
    return report


# The gated up-projection on CuTe sm90 (SwiGLU, halves, B the (2N, K) gate_up weight as w.t()): the forward's
# 128x128x64 gated tile over two warpgroups (a gate and an up accumulator: 128 x 256 outputs' worth), dgrad and wgrad
# the plain 128x256x64 GEMMs over 2N, 2x1 clusters; rendered at run time (`save` set per module). One epilogue stage:
# forward_pre then stages three subtile buffers (pre's gate and up halves, out) over 4 A/B stages, where the default's
# two sets of three leave room for 3: 1390 -> 1317 us for forward_pre beside cuBLAS's 1247 for the GEMM alone, the step
# 1.146 -> 1.162x eager. And the GEMM that computes pre on its own ping-pong schedule (training.pre: a whole 64x128
# gated tile a warpgroup, one's epilogue under the other's mainloop): forward_pre 1453 -> 1373 us in a step, the step
# 1.160 -> 1.188x eager, 1.027 -> 1.047x torch.compile (H200, session 32; docs/training/measurements.md).
GATED_CUTE = {"kind": "gemm", "a": {"dtype": "bf16", "major": "k"}, "b": {"dtype": "bf16", "major": "k"},
              "out": {"dtype": "bf16"}, "epilogue": [{"op": "gated", "fn": "silu", "layout": "halves"}],
              "tile": {"m": 128, "n": 128, "k": 64}, "cute": {"mma_warpgroups": 2}, "cluster": {"m": 2, "n": 1},
              "pipeline": {"epilogue_stages": 1},
              "schedule": {"persistent": True, "group_m": 8}, "targets": ["cute:sm90"],
              "training": {"pre": {"tile": {"m": 64, "n": 128, "k": 64}, "schedule": "pingpong"},
                           "dgrad": {"tile": {"m": 128, "n": 256, "k": 64}, "ab_stages": 4},
                           "wgrad": {"tile": {"m": 128, "n": 256, "k": 64}, "ab_stages": 4}}}


def render_cute(name: str, save: str):
    """GATED_CUTE with `save`, rendered for cute:sm90 into a temporary file and imported: its torch entry."""
    return getattr(render_cute_module(GATED_CUTE, name, save), name)


def render_cute_module(spec: dict, name: str, save: str):
    """`spec` (a kernel's fields: GATED_CUTE, a catalogue entry) named `name` with training.save = `save`, rendered for
    its targets into a temporary file and imported: the module. The same (spec, name, save) renders the same bytes in
    every process (the source label is the name's), so the CuTe disk cache (keyed by them) serves a later process:
    bench/cute_train_tiles.py --compile-only fills it on a machine without a GPU."""
    from specgen.compile import load_rendered
    from specgen.render.catalogue import render_modules
    from specgen.spec.load import load_text

    spec = {**spec, "name": name, "training": {**spec["training"], "save": save}}
    (ls,) = load_text(json.dumps({"kernels": [spec]}), f"<bench:{name}>", ".json")
    ((rel, text),) = render_modules(ls, ls.spec.targets).items()
    path = Path(tempfile.mkdtemp(prefix="specgen-bench-")) / Path(rel).name
    path.write_text(text)
    return load_rendered(path)


def measure_gated_cute(M: int, N: int, K: int, rounds: int, compiled: bool,
                       saves: tuple[str, ...] = ("preact", "recompute"), extra: dict[str, str] | None = None) -> dict:
    """The gated up-projection's step on CuTe sm90 in `saves`' modes, beside the Triton gated preact kernel and
    `extra`'s modules ({entry name: rendered file})."""
    from generated.triton.mlp_up_swiglu_train_bf16 import mlp_up_swiglu_train_bf16 as triton_preact
    from specgen.compile import load_rendered

    names = {"preact": "mlp_up_swiglu_train_cute_bench", "recompute": "mlp_up_swiglu_train_recompute_cute_bench"}
    ours = {**{f"specgen_cute_{save}": render_cute(names[save], save) for save in saves},
            **{name: getattr(load_rendered(Path(path)), name) for name, path in (extra or {}).items()},
            "specgen_triton_preact": triton_preact}
    report = measure_gated(M, N, K, rounds, compiled, ours)
    return {**report, "layer": "gated (SwiGLU, halves) on CuTe sm90",
            "cutlass_dsl": __import__("importlib.metadata").metadata.version("nvidia-cutlass-dsl")}


def measure_gated(M: int, N: int, K: int, rounds: int, compiled: bool, modules: dict | None = None,
                  extra: dict[str, str] | None = None) -> dict:
    """The gated up-projection's step (N: the output's columns; w is (2N, K)); `modules`: the torch entries timed
    (name: fn(a, b) with b = w.t()), the Triton preact and recompute kernels where not given; `extra`: rendered
    module files timed beside them ({entry name: file})."""
    if modules is None:
        from generated.triton.mlp_up_swiglu_train_bf16 import mlp_up_swiglu_train_bf16 as preact
        from generated.triton.mlp_up_swiglu_train_recompute_bf16 import (
            mlp_up_swiglu_train_recompute_bf16 as recompute,
        )

        modules = {"specgen_preact": preact, "specgen_recompute": recompute}
    if extra:
        from specgen.compile import load_rendered

        modules = {**modules, **{name: getattr(load_rendered(Path(path)), name) for name, path in extra.items()}}

    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(M, K, generator=gen, device="cuda").bfloat16().requires_grad_()
    w = (torch.randn(2 * N, K, generator=gen, device="cuda") / K**0.5).bfloat16().requires_grad_()
    grad = torch.randn(M, N, generator=gen, device="cuda").bfloat16()
    g2 = torch.randn(M, 2 * N, generator=gen, device="cuda").bfloat16()  # a G for the cuBLAS GEMMs alone

    def eager(x, w):
        gate, up = (x @ w.t()).chunk(2, dim=-1)
        return F.silu(gate) * up

    def step(fn):
        return lambda: torch.autograd.grad(fn(x, w), (x, w), grad)

    def cublas_gemms():  # forward pre = x @ w.T, dgrad G @ w, wgrad G^T @ x: the three GEMMs at cuBLAS speed
        with torch.no_grad():
            return x @ w.t(), g2 @ w, g2.t() @ x

    ours = {k: (lambda f: lambda x, w: f(x, w.t()))(f) for k, f in modules.items()}
    peers = {"eager": eager, **({"compiled": torch.compile(eager)} if compiled else {})}
    calls = {"eager": step(eager), "eager_aa": step(eager), **({"compiled": step(peers["compiled"])} if compiled else {}),
             "cublas_gemms": cublas_gemms, **{k: step(f) for k, f in ours.items()}}
    xr, wr = (t.detach().float().requires_grad_() for t in (x, w))
    want = torch.autograd.grad(eager(xr, wr), (xr, wr), grad.float())
    errors = {}
    for name in ("eager", *ours):
        got = calls[name]()
        errors[name] = [((g.float() - r).abs().max() / r.abs().max()).item() for g, r in zip(got, want, strict=True)]
    saved = {}
    for name, fn in {**peers, **ours}.items():  # what the forward keeps for the backward, beyond its output
        fn(x, w)  # compiled once
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        out = fn(x, w)
        saved[name] = torch.cuda.memory_allocated() - before - out.numel() * out.element_size()
        del out
    res = kernel_cycle(calls, rounds=rounds)
    flops = 3 * 2 * M * 2 * N * K
    med = {k: statistics.median(v["samples"]) for k, v in res.items()}
    ratios = {peer: {k: statistics.median(e / s for e, s in zip(res[peer]["samples"], v["samples"], strict=True))
                     for k, v in res.items()} for peer in ("eager", "compiled", "cublas_gemms") if peer in res}
    report = {"layer": "gated (SwiGLU, halves)", "shape": [M, N, K], "rounds": rounds,
              "device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "triton": __import__("triton").__version__,
              "median_us": med, "tflops": {k: flops / v / 1e6 for k, v in med.items()},
              "paired_ratio_peer_over": ratios, "kernels_us": {k: v["kernels"] for k, v in res.items()},
              "ceiling_eager_over_cublas_gemms": ratios["eager"]["cublas_gemms"],
              "fraction_of_ceiling": {k: ratios["cublas_gemms"][k] for k in ours},
              "grad_rel_err_vs_f32 (dx, dw)": errors, "saved_bytes_measured": saved,
              "saved_bytes_expected": {**{k: 0 if "recompute" in k else M * 2 * N * 2 for k in ours},
                                       "eager": M * 3 * N * 2}}
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
