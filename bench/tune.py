"""Time catalogue spec variants side by side on the GPU (tile, stages, warps, epilogue subtiling),
to choose what the shipped specs say. Renders each variant with specgen (needs pydantic/jinja2 there).

    python bench/tune.py gemm_bias_gelu_bf16 '{"triton": {"num_warps": 8, "epilogue_subtile": true}}' ...
"""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
from pathlib import Path

import torch
from triton.testing import do_bench

from specgen.render.catalogue import render_module
from specgen.spec.load import load_paths, load_text

ROOT = Path(__file__).resolve().parents[1]


def merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    return out


def build(spec: dict, tmp: Path, tag: str):
    spec = {**spec, "name": f"{spec['name']}_{tag}", "targets": ["triton:sm90"]}
    (loaded,) = load_text(json.dumps({"kernels": [spec]}), "<tune>", ".json")
    path = tmp / f"{spec['name']}.py"
    path.write_text(render_module(loaded, loaded.spec.targets))
    mspec = importlib.util.spec_from_file_location(spec["name"], path)
    mod = importlib.util.module_from_spec(mspec)
    sys.modules[spec["name"]] = mod
    mspec.loader.exec_module(mod)
    return getattr(mod, spec["name"]), mod


def main() -> None:
    name, variants = sys.argv[1], [json.loads(v) for v in sys.argv[2:]] or [{}]
    base = {ls.name: ls.spec.model_dump(mode="json") for ls in load_paths([ROOT / "specs"])}[name]
    shapes = [(8192, 8192, 8192), (4096, 14336, 4096)]
    tmp = Path(tempfile.mkdtemp())
    for i, over in enumerate(variants):
        spec = merge(base, over)
        fn, mod = build(spec, tmp, f"v{i}")
        for M, N, K in shapes:
            fp8 = base["a"]["dtype"].startswith("fp8")
            a = torch.randn(M, K, device="cuda")
            w = torch.randn(N, K, device="cuda")
            a, w = (a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)) if fp8 else (a.bfloat16(), w.bfloat16())
            args = [a, w.t()]
            for op in spec["epilogue"]:
                if op["op"] == "bias":
                    args.append(torch.randn(N, device="cuda", dtype=torch.bfloat16))
                if op["op"] == "scale":
                    args += [torch.rand(M, device="cuda"), torch.rand(N, device="cuda")]
            t = do_bench(lambda: fn(*args), warmup=50, rep=300, return_mode="median")
            compiled = next(iter(mod._launcher.kernel.device_caches[0][0].values()))
            spill = f"regs {compiled.n_regs} spills {compiled.n_spills}"
            print(f"{name} {json.dumps(over):70} {M}x{N}x{K}: {t * 1e3:8.1f} us {2 * M * N * K / t / 1e9:6.0f} TFLOP/s "
                  f"stages {mod.CONFIGS[90]['num_stages']} {spill}", flush=True)


if __name__ == "__main__":
    main()
