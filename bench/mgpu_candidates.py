"""Render Mosaic GPU (pallas:gpu_sm90) candidate configs of a catalogue kernel into a directory, for a
sweep on the GPU (bench/bench_pallas.py --sweep). Each candidate is the catalogue spec with config keys
replaced (tile, pipeline, schedule, cluster), checked like any spec (a candidate check refuses is skipped,
with the rule and its message printed), rendered as
`<dir>/<kernel>__<label>.py`. Runs on a CPU machine (no GPU, no jax needed to render).

Usage: python bench/mgpu_candidates.py DIR   (the candidate list is CANDIDATES below)
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]

# label -> config keys over the catalogue kernel's own (its per_target."pallas:gpu_sm90" table applied first).
CANDIDATES: dict[str, dict[str, dict[str, list[str] | dict[str, object]]]] = {
    "gemm_bf16": {
        "base": {},
        "cm2": {"cluster": {"m": 2, "n": 1}},
        "cn2": {"cluster": {"m": 1, "n": 2}},
        "cm2g16": {"cluster": {"m": 2, "n": 1}, "schedule": {"group_m": 16}},
        "t128x128": {"tile": {"m": 128, "n": 128, "k": 64}, "pipeline": {"ab_stages": 6}},
        "t128x128cm2": {"tile": {"m": 128, "n": 128, "k": 64}, "pipeline": {"ab_stages": 6}, "cluster": {"m": 2, "n": 1}},
        "t256x128": {"tile": {"m": 256, "n": 128, "k": 64}},
        "t128x256k32": {"tile": {"m": 128, "n": 256, "k": 32}, "pipeline": {"ab_stages": 8}},
        "t128x192": {"tile": {"m": 128, "n": 192, "k": 64}},
        "t128x192cm2": {"tile": {"m": 128, "n": 192, "k": 64}, "cluster": {"m": 2, "n": 1}},
        "s3": {"pipeline": {"ab_stages": 3}},
    },
    "gemm_bias_gelu_bf16": {
        "base": {},
        "cm2": {"cluster": {"m": 2, "n": 1}},
        "cn2": {"cluster": {"m": 1, "n": 2}},
    },
}


def kernels() -> dict[str, dict]:
    out = {}
    for f in ("gemm_bf16.toml", "catalogue.toml"):
        for k in tomllib.loads((ROOT / "specs" / f).read_text())["kernels"]:
            out[k["name"]] = k
    return out


def candidate(spec: dict, label: str, over: dict) -> dict:
    s = copy.deepcopy(spec)
    s.update(copy.deepcopy(s.pop("per_target", {}).get("pallas:gpu_sm90", {})))
    s.pop("variants", None)
    for section, keys in over.items():
        s[section] = {**s.get(section, {}), **keys}
    s["targets"] = ["pallas:gpu_sm90"]
    s["name"] = f"{spec['name']}__{label}"
    return s


def main() -> None:
    from specgen.check import check_spec
    from specgen.registry import design_for
    from specgen.resolve import resolve
    from specgen.spec.load import load_text

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    (out / "__init__.py").write_text("")
    specs = kernels()
    for name, cands in CANDIDATES.items():
        for label, over in cands.items():
            s = candidate(specs[name], label, over)
            (loaded,) = load_text(json.dumps({"kernels": [s]}), f"<candidate {s['name']}>", ".json")
            (target,) = loaded.spec.targets
            errors = [f"{d.rule}: {d.message}" for d in check_spec(loaded) if d.severity == "error"]
            if errors:  # a candidate check refuses is not rendered: say so, go on
                print(f"SKIP {s['name']}: {'; '.join(errors)}")
                continue
            resolved = resolve(loaded.spec, target)
            files = design_for("gemm", "pallas:tpu_v5e").render(loaded, [target], {str(target): resolved})
            (out / f"{s['name']}.py").write_text(files[f"pallas/gpu_sm90/{s['name']}.py"])
            print(s["name"], resolved.ab_stages, resolved.budget.total)


if __name__ == "__main__":
    main()
