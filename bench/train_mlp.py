"""A 200-step training run of a GPT-2-structure MLP stack with the generated kernels in forward and backward, against
the same run in eager torch (issue 38's training run).

    python3 bench/train_mlp.py [--steps 200] [--d 1024] [--rows 4096] [--layers 4] [--backend triton|cute] [--json out.json]

Each block is GPT-2's MLP (transformers' GPT2MLP: c_fc d -> 4d, gelu_new (the tanh GELU), c_proj 4d -> d) behind a
LayerNorm with a residual: x + c_proj(gelu(c_fc(ln(x)))). Weights are f32 masters cast to bf16 for the GEMMs (the
casts are differentiable: gradients reach the f32 weights), AdamW over them, MSE against a fixed random teacher of
the same structure. Three runs from one seed over one data stream: eager bf16 GEMMs (F.linear + F.gelu), specgen
(linear_gelu_train_bf16 for c_fc + GELU, linear_bias_train_bf16 for c_proj), and eager in f32 (no bf16 casts) for
the scale of bf16's own noise. `--backend cute`: the specgen run on the CuTe sm90 design (linear_gelu_train_cute_bf16
for c_fc + GELU; c_proj's linear_bias_train_bf16 rendered here for cute:sm90 from the same spec, with the CuTe
kernel's 128x256x64 tile, into a temporary folder). Prints the loss curves side by side and the largest relative differences:
specgen's from eager bf16 beside eager bf16's from f32.
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F


def init(layers: int, d: int, gen: torch.Generator) -> list[dict[str, torch.Tensor]]:
    """Per block: LayerNorm weight and bias, c_fc (4d, d) + bias, c_proj (d, 4d) + bias (nn.Linear's layouts), f32."""
    def w(n, k):
        return (torch.randn(n, k, generator=gen, device="cuda") * 0.02)
    return [{"ln_w": torch.ones(d, device="cuda"), "ln_b": torch.zeros(d, device="cuda"),
             "fc_w": w(4 * d, d), "fc_b": torch.zeros(4 * d, device="cuda"),
             "proj_w": w(d, 4 * d) / (2 * layers) ** 0.5, "proj_b": torch.zeros(d, device="cuda")} for _ in range(layers)]


def layers(backend: str):
    """(c_fc + GELU, c_proj) as generated ops of `backend`."""
    if backend == "triton":
        from generated.triton.linear_bias_train_bf16 import linear_bias_train_bf16
        from generated.triton.linear_gelu_train_bf16 import linear_gelu_train_bf16

        return linear_gelu_train_bf16, linear_bias_train_bf16
    import tempfile
    from pathlib import Path

    from generated.cute.linear_gelu_train_cute_bf16 import linear_gelu_train_cute_bf16
    from specgen.compile import load_rendered
    from specgen.render.catalogue import render_module
    from specgen.spec.load import load_text

    (ls,) = load_text(LINEAR_BIAS_CUTE, "linear_bias_train_cute_bf16.toml", ".toml")
    path = Path(tempfile.mkdtemp(prefix="specgen-train-mlp-")) / "linear_bias_train_cute_bf16.py"
    path.write_text(render_module(ls, list(ls.spec.targets)))
    return linear_gelu_train_cute_bf16, load_rendered(path).linear_bias_train_cute_bf16


# c_proj on the CuTe sm90 design: specs/training.toml's linear_bias_train_bf16 with linear_gelu_train_cute_bf16's tile
LINEAR_BIAS_CUTE = """
[[kernels]]
name = "linear_bias_train_cute_bf16"
kind = "gemm"
a = { dtype = "bf16", major = "k" }
b = { dtype = "bf16", major = "k" }
out = { dtype = "bf16" }
epilogue = [{ op = "bias", along = "n", dtype = "bf16" }]
training = { save = "preact" }
tile = { m = 128, n = 256, k = 64 }
schedule = { persistent = true, group_m = 8 }
targets = ["cute:sm90"]
"""


def forward(blocks, x, mode: str, ops=None):
    for p in blocks:
        h = F.layer_norm(x, (x.shape[1],), p["ln_w"], p["ln_b"])
        if mode == "f32":
            h = F.linear(F.gelu(F.linear(h, p["fc_w"], p["fc_b"]), approximate="tanh"), p["proj_w"], p["proj_b"])
        else:
            h, fc_w, fc_b, proj_w, proj_b = (t.bfloat16() for t in (h, p["fc_w"], p["fc_b"], p["proj_w"], p["proj_b"]))
            if mode == "eager":
                h = F.linear(F.gelu(F.linear(h, fc_w, fc_b), approximate="tanh"), proj_w, proj_b)
            else:
                fc, proj = ops
                h = proj(fc(h, fc_w.t(), fc_b), proj_w.t(), proj_b)
        x = x + h.float()
    return x


def run(mode: str, steps: int, d: int, rows: int, layers: int, ops=None) -> list[float]:
    gen = torch.Generator(device="cuda").manual_seed(0)
    blocks = init(layers, d, gen)
    teacher = init(layers, d, gen)
    for p in teacher:  # a teacher a little unlike the student's init, so the loss has somewhere to go
        p["fc_w"] *= 3
    params = [t.requires_grad_() for p in blocks for t in p.values()]
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.0)
    data = torch.Generator(device="cuda").manual_seed(1)
    losses = []
    for _ in range(steps):
        x = torch.randn(rows, d, generator=data, device="cuda")
        with torch.no_grad():
            target = forward(teacher, x, "f32")
        loss = F.mse_loss(forward(blocks, x, mode, ops), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--d", type=int, default=1024)
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--backend", choices=("triton", "cute"), default="triton")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    ops = layers(args.backend)
    curves = {mode: run(mode, args.steps, args.d, args.rows, args.layers, ops) for mode in ("eager", "specgen", "f32")}

    def rel(a: list[float], b: list[float]) -> float:
        return max(abs(x - y) / abs(y) for x, y in zip(a, b, strict=True))

    report = {"steps": args.steps, "d": args.d, "rows": args.rows, "layers": args.layers, "backend": args.backend,
              "device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "triton": __import__("triton").__version__,
              "max_rel_diff_specgen_vs_eager_bf16": rel(curves["specgen"], curves["eager"]),
              "max_rel_diff_eager_bf16_vs_f32": rel(curves["eager"], curves["f32"]),
              "max_rel_diff_specgen_vs_f32": rel(curves["specgen"], curves["f32"]),
              "final_loss": {k: v[-1] for k, v in curves.items()}, "first_loss": {k: v[0] for k, v in curves.items()},
              "curves": curves}
    for i in sorted({0, 1, 9, 49, 99, 149, args.steps - 1} & set(range(args.steps))):
        print(f"step {i + 1:4d}  eager bf16 {curves['eager'][i]:.6f}  specgen {curves['specgen'][i]:.6f}  "
              f"eager f32 {curves['f32'][i]:.6f}")
    print({k: v for k, v in report.items() if k != "curves"})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
