"""Write a seeded, diverse set of GEMM kernel specs for timing `specgen check` (issue 36).

    python3 bench/check_speed.py OUT_DIR [--kernels 50000] [--per-file 100] [--seed 36]
    python3 bench/check_speed.py OUT_DIR --copies [--kernels 50000]
    /usr/bin/time -v python3 -m specgen check OUT_DIR --no-compile > /dev/null

`--copies` writes copies of the shipped catalogue instead (specs/*.toml as written, one copy a file, its kernels
renamed `<name>_c<copy>`), until at least `--kernels` kernels.

Each kernel starts from one of the shipped catalogue's kernels (its operands' and epilogue's shape) and draws
its own config: tile, cluster, stages, schedule (persistent, raster, group_m, split-K), dtypes, majors,
epilogue chain, targets (any subset of the target table), backend options, per-target tables and size
variants. Every kernel loads (a draw the spec model refuses is drawn again); many break an envelope rule
(SMEM, TMA boxes, clusters, registers, MMA shapes), so the findings' lines print too. Files are indented
JSON, so findings sit on their own lines. The same seed writes the same bytes.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import re
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pydantic import ValidationError  # noqa: E402

from specgen.kinds.gemm.spec import GemmSpec  # noqa: E402
from specgen.targets import ALL_TARGETS  # noqa: E402

DIMS = (64, 64, 128, 128, 128, 256, 256)  # mostly the sizes every target takes
ODD_DIMS = (16, 32, 96, 112, 192, 512)  # and sometimes sizes some targets refuse
KS = (32, 64, 64, 128, 128, 256)
DTYPES = ("bf16", "f16", "fp8_e4m3", "fp8_e5m2", "tf32", "f32", "int8")
OUTS = ("bf16", "bf16", "f16", "f32")
ACTS = ("relu", "gelu", "gelu_tanh", "silu", "sigmoid")
SECTIONS = ("tile", "cluster", "pipeline", "schedule")


def catalogue() -> list[dict]:
    kernels = []
    for f in sorted((ROOT / "specs").glob("*.toml")):
        kernels += tomllib.loads(f.read_text())["kernels"]
    return kernels


def dim(r: random.Random) -> int:
    return r.choice(ODD_DIMS) if r.random() < 0.1 else r.choice(DIMS)


def tile(r: random.Random, tpu: bool = False) -> dict:
    if tpu and r.random() < 0.9:  # TPU blocks: multiples of (8, 128), mostly of the MXU
        return {"m": r.choice((128, 256, 512)), "n": r.choice((128, 256, 256, 512)), "k": r.choice((128, 256, 512))}
    return {"m": dim(r), "n": dim(r), "k": r.choice(KS)}


def section(r: random.Random, name: str) -> dict:
    if name == "tile":
        return tile(r)
    if name == "cluster":
        return {"m": r.choice((1, 1, 1, 2, 4)), "n": r.choice((1, 1, 1, 2))}
    if name == "pipeline":
        return {"ab_stages": r.choice(("auto", "auto", "auto", 2, 3, 4, 5, 8))}
    out: dict = {}
    if r.random() < 0.5:
        out["persistent"] = r.random() < 0.5
    if r.random() < 0.3:
        out["raster"] = r.choice(("along_m", "along_n"))
    if r.random() < 0.4:
        out["group_m"] = r.choice((1, 4, 8, 16))
    if r.random() < 0.1:
        out["split_k"] = r.choice((2, 3, 4))
    return out


def options(r: random.Random, backend: str) -> dict:
    if backend == "triton":
        return {k: v for k, v in (("num_warps", r.choice((4, 8))), ("tma", r.random() < 0.8),
                                  ("swap_ab", r.random() < 0.2)) if r.random() < 0.6}
    if backend == "cute":
        return {k: v for k, v in (("schedule", r.choice(("cooperative", "pingpong"))), ("two_cta", r.random() < 0.2),
                                  ("swap_ab", r.random() < 0.1)) if r.random() < 0.5}
    return {"swap_ab": True} if r.random() < 0.1 else {}


def layer(r: random.Random, backend: str | None) -> dict:
    out = {s: section(r, s) for s in SECTIONS if r.random() < (0.7 if s == "tile" else 0.2)}
    if backend is not None and r.random() < 0.4:
        opts = options(r, backend)
        if opts:
            out[backend] = opts
    return out


def variants(r: random.Random, backend: str | None) -> list[dict]:
    n = r.choice((0, 0, 1, 2, 3, 4))
    bounds = sorted(r.sample((1, 8, 16, 32, 64, 128, 256, 512), n))
    out = [{"when": {"m_max": b}, **layer(r, backend)} for b in bounds]
    for v in out:  # decode-shaped variants: small M tiles, mostly
        if "tile" in v and r.random() < 0.8:
            v["tile"] = {"m": r.choice((16, 32, 64)), "n": r.choice((64, 128)), "k": r.choice((64, 128, 256))}
    return out


def kernel(r: random.Random, base: dict, name: str) -> dict:
    k = copy.deepcopy(base)
    k["name"] = name
    k.pop("description", None)
    k.pop("per_target", None)
    k.pop("variants", None)
    for key in ("cluster", "pipeline", "schedule", "triton", "cute", "pallas"):
        k.pop(key, None)
    tpu = all(t.startswith("pallas:tpu") for t in base["targets"])
    k["tile"] = tile(r, tpu)
    for s in SECTIONS[1:]:
        if r.random() < 0.5:
            k[s] = section(r, s)
    dt = r.choice(DTYPES)
    if r.random() < 0.15:  # the base's operands and epilogue, or (sometimes) other dtypes and majors
        k["a"] = {"dtype": dt, "major": r.choice(("k", "mn"))}
        k["b"] = {"dtype": dt, "major": r.choice(("k", "mn"))}
        k["out"] = {"dtype": "int32" if dt == "int8" and r.random() < 0.5 else r.choice(OUTS)}
    elif r.random() < 0.3:
        for operand in ("a", "b"):
            k[operand] = {**k[operand], "major": r.choice(("k", "mn"))}
    if r.random() < 0.2:
        k["epilogue"] = [{"op": "activation", "fn": r.choice(ACTS)}] if r.random() < 0.7 else []
    # the base's targets (those it serves), a subset of them, or (sometimes) any targets
    own = base["targets"]
    k["targets"] = (r.sample(ALL_TARGETS, r.randint(1, 5)) if r.random() < 0.1
                    else r.sample(own, r.randint(1, len(own))))
    for backend in ("triton", "cute", "pallas"):
        if r.random() < 0.3:
            opts = options(r, backend)
            if opts:
                k[backend] = opts
    k["variants"] = [] if tpu and r.random() < 0.9 else variants(r, None)
    per_target = {}
    for t in k["targets"]:
        if r.random() < 0.3:
            cfg = layer(r, t.partition(":")[0])
            if tpu and "tile" in cfg:
                cfg["tile"] = tile(r, tpu)
            if r.random() < 0.3 and not tpu:
                cfg["variants"] = variants(r, t.partition(":")[0])
            per_target[t] = cfg
    if per_target:
        k["per_target"] = per_target
    return k


def valid(k: dict) -> bool:
    try:
        GemmSpec.model_validate(k)
    except ValidationError:
        return False
    return True


def copies(out: Path, kernels: int) -> None:
    """Copies of the catalogue's TOML text, kernels renamed, one copy a file."""
    text = "\n".join(f.read_text() for f in sorted((ROOT / "specs").glob("*.toml")))
    per_copy = len(re.findall(r'(?m)^name = "', text))
    n = (kernels + per_copy - 1) // per_copy
    for c in range(n):
        (out / f"c{c:05d}.toml").write_text(re.sub(r'(?m)^name = "([^"]+)"', rf'name = "\1_c{c:05d}"', text))
    print(f"wrote {n * per_copy} kernels ({n} copies of the catalogue's {per_copy}) to {out}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--kernels", type=int, default=50_000)
    p.add_argument("--per-file", type=int, default=100)
    p.add_argument("--seed", type=int, default=36)
    p.add_argument("--copies", action="store_true", help="copies of the catalogue instead of drawn kernels")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.copies:
        copies(args.out, args.kernels)
        return
    r = random.Random(args.seed)
    bases = catalogue()
    refused = 0
    for f in range((args.kernels + args.per_file - 1) // args.per_file):
        kernels = []
        for i in range(f * args.per_file, min(args.kernels, (f + 1) * args.per_file)):
            while True:
                k = kernel(r, r.choice(bases), f"k{i:06d}")
                if valid(k):
                    break
                refused += 1
            kernels.append(k)
        (args.out / f"d{f:04d}.json").write_text(json.dumps({"kernels": kernels}, indent=1) + "\n")
    print(f"wrote {args.kernels} kernels to {args.out} ({refused} draws refused by the spec model, drawn again)")


if __name__ == "__main__":
    main()
