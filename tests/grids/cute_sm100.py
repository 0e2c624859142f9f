"""Check vs the CuTe DSL compiler for `cute:sm100`: a seeded grid of random specs near the envelope's
boundaries, each checked by specgen and compiled by `cute.compile` for sm_100a on this CPU machine (no
GPU, no Blackwell anywhere: compile and SASS are the whole verification) through the design's compile
hook (specgen/kinds/gemm/designs/cute_sm100/compile.py), its SASS read by nvdisasm.

Verdicts, per spec (as tests/grids/cute_sm90.py's):
- check: accept (no error on cute:sm100) or reject (any error; the rule ids are kept);
- compiler: `ok` (a cubin with no LDL/STL, SMEM within the block limit), `spill` (any LDL or STL),
  `smem` (it launches with more SMEM than a block may use), `error` (render or `cute.compile` raised,
  or the DSL aborted the process);
- false accept: check accepted, the compiler did not say `ok`; false reject: check rejected, the
  compiler said `ok`.

`python tests/grids/cute_sm100.py N [SEED [OUT [JOBS]]]` compiles N specs (seed 17 by default; N and SEED
may be comma-separated lists, one N per SEED) in JOBS worker processes (2 by default), then prints every
case and a summary; OUT (tests/data/grid_cute_sm100.json to refresh the record) gets every spec with the
compiler's verdict and the DSL's version. A worker whose process the DSL aborts is restarted after the
spec that killed it. tests/backends/cute/test_cute_sm100_grid.py replays `check` over the record in CI.

Measured 2026-11-25 (nvidia-cutlass-dsl 4.8.1, CPU only, about 1-3 s a spec, 2 workers). Seed 17 (330
specs) first: 7 false accepts and 21 false rejects against the rules then (CUTE101 on every B, a 16-CTA
cluster the compile cannot judge, no CUTE104/CUTE105/CUTE107): those rules were fitted to it. Seed 18 (150
specs) was then compiled held out: 2 false accepts (erf-GELU epilogues spilling 7 and 11 LDL on 32-column
subtiles) and 1 false reject; the epilogue subtile now halves for an erf GELU (design.py
GELU_ERF_FRAGMENTS), which compiled all three spilling kernels spill-free. The record
(`330,150 17,18`, tests/data/grid_cute_sm100.json, after that change): 480 random specs and the probes,
compiler 276 ok, 0 spill, 71 over the SMEM limit, 142 errors (34 of them the DSL aborting the process);
check 0 false accepts, 0 false rejects. Both seeds shaped the rules, so that is a fit, not a held-out
figure: the held-out one is seed 18's before the fix (2 false accepts in 150).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cute_sm90 import _epilogue, classify, compile_one, dsl_version  # noqa: E402,F401  (tests/grids is no package)
from cute_sm90 import cases as sm90_cases  # noqa: E402
from cute_sm90 import check_case as sm90_check_case  # noqa: E402

SMEM_LIMIT = 232448  # per block on sm_100 (cutlass arch.h)
TARGET = "cute:sm100"


def _tile_n(rng: random.Random, two: bool) -> int:
    """Mostly multiples of 32 up to 256; now and then an odd multiple of 8 or 16 (CUTE101's line) or a
    width past tcgen05's N (MMA002)."""
    r = rng.random()
    if r < 0.7:
        return rng.choice([32, 64, 64, 96, 128, 128, 160, 192, 224, 256, 256])
    if r < 0.85:
        return rng.choice([16, 48, 80, 112, 144, 176, 208, 240])
    if r < 0.97:
        return rng.choice([8, 24, 40, 56, 72, 104, 136, 200, 232, 248])
    return rng.choice([264, 272, 512])


def grid(n: int, seed: int = 17) -> list[dict]:
    """n seeded cute:sm100 specs near the boundaries: 1-CTA and 2-CTA MMAs (and a few illegal M), tile
    widths on both sides of CUTE101 and MMA002's steps, TMEM near full (wide tiles, explicit accumulator
    stages), SMEM near full (deep or auto stages), clusters up to 8 CTAs with multicast along both
    dims, 16-bit and fp8 inputs in both majors, long epilogue chains. Clusters stay within 8 CTAs: past
    that CUTE102 refuses by the launch rule (no non-portable opt-in), which a compile cannot judge."""
    rng = random.Random(seed)
    specs = []
    for i in range(n):
        fp8 = rng.random() < 0.35
        if fp8:
            a = rng.choice(["fp8_e4m3", "fp8_e5m2"])
            b = rng.choice(["fp8_e4m3", "fp8_e4m3", "fp8_e5m2"])
            out = rng.choice(["bf16", "bf16", "f16", "f32", "fp8_e4m3"])
            k = rng.choice([64, 128, 128, 256])
        else:
            a = b = rng.choice(["bf16", "bf16", "f16"])
            out = rng.choice([a, a, "f32", "fp8_e4m3"] if a == "bf16" else [a, a, "f32", "bf16"])
            k = rng.choice([32, 64, 64, 128])
        a_major, b_major = rng.choice(["k", "k", "mn"]), rng.choice(["k", "k", "mn"])
        two = rng.random() < 0.5
        m = rng.choice([64, 128, 128, 128]) if rng.random() < 0.95 else rng.choice([32, 256])
        if two:
            cluster = rng.choice([(2, 1), (2, 1), (2, 2), (4, 1), (2, 4), (4, 2)])
        else:
            cluster = rng.choice([(1, 1), (1, 1), (2, 1), (1, 2), (2, 2), (4, 1), (1, 4)])
        spec: dict = {
            "name": f"bgrid_{seed}_{i:04d}", "kind": "gemm",
            "a": {"dtype": a, "major": a_major}, "b": {"dtype": b, "major": b_major},
            "out": {"dtype": out}, "epilogue": _epilogue(rng, out),
            "tile": {"m": m, "n": _tile_n(rng, two), "k": k},
            "cluster": dict(zip(("m", "n"), cluster, strict=True)),
            "pipeline": {"ab_stages": rng.choice(["auto", "auto", "auto", 2, 4, 6, 8, 10]),
                         "acc_stages": rng.choice(["auto", "auto", "auto", 1, 2, 3])},
            "schedule": {"persistent": rng.random() < 0.8, "group_m": rng.choice([1, 4, 8]),
                         "raster": rng.choice(["along_m", "along_n"])},
            "cute": {"two_cta": two},
            "batch": rng.random() < 0.25,
            "targets": [TARGET],
        }
        if a == "f16" and rng.random() < 0.1:
            spec["accumulator"] = "f16"
        specs.append(spec)
    return specs


def _probe(name: str, **fields: object) -> dict:
    spec: dict = {"name": f"bprobe_{name}", "kind": "gemm", "a": {"dtype": "bf16", "major": "k"},
                  "b": {"dtype": "bf16", "major": "k"}, "out": {"dtype": "bf16"}, "epilogue": [],
                  "tile": {"m": 128, "n": 128, "k": 64}, "schedule": {"persistent": True}, "targets": [TARGET]}
    return spec | fields


TWO = {"cluster": {"m": 2, "n": 1}, "cute": {"two_cta": True}}
FP8_IN = {"a": {"dtype": "fp8_e4m3", "major": "k"}, "b": {"dtype": "fp8_e4m3", "major": "k"}}
EVERY_OP = [
    {"op": "bias", "along": "m", "dtype": "bf16", "name": "bias_m"}, {"op": "bias", "along": "n", "name": "bias_n"},
    {"op": "scale", "by": "scalar"}, {"op": "scale", "by": "row"}, {"op": "scale", "by": "col"},
    {"op": "scale", "by": "rowcol"}, {"op": "activation", "fn": "gelu"}, {"op": "residual", "dtype": "bf16"},
    {"op": "clamp", "min": -4.0, "max": 4.0}, {"op": "cast", "dtype": "f16"}]
# Named cases after the random grid: the catalogue's shapes, the reference's 2-CTA 256x128x128 fp8 config,
# every epilogue op at once, and the measured template lines (CUTE101's widths).
PROBES = [
    _probe("fp8_2cta_256x128x128", **FP8_IN, **TWO, tile={"m": 128, "n": 128, "k": 128},
           epilogue=[{"op": "scale", "by": "rowcol"}]),
    _probe("bf16_2cta_256x256", **TWO, tile={"m": 128, "n": 256, "k": 64}),
    _probe("every_op_2cta", **TWO, epilogue=EVERY_OP),
    _probe("every_op_1cta_128x64", tile={"m": 128, "n": 64, "k": 64}, epilogue=EVERY_OP, batch=True),
    _probe("n24", tile={"m": 128, "n": 24, "k": 64}),
    _probe("n8", tile={"m": 128, "n": 8, "k": 64}),
    _probe("two_n48", **TWO, tile={"m": 128, "n": 48, "k": 64}),
    _probe("two_n16", **TWO, tile={"m": 128, "n": 16, "k": 64}),
    _probe("two_m64_2x2", cluster={"m": 2, "n": 2}, cute={"two_cta": True}, tile={"m": 64, "n": 128, "k": 64}),
]


def cases(n: str, seed: str) -> list[dict]:
    return sm90_cases(n, seed, grid, PROBES)


def check_case(spec: dict) -> dict:
    """specgen's side: the error and warning rule ids on cute:sm100."""
    return sm90_check_case(spec, TARGET)


def compile_case(spec: dict, folder: Path) -> dict:
    """The compiler's side: render the spec's module, compile its one config for sm_100a, read the SASS."""
    from specgen.kinds.gemm.designs.cute_sm100.compile import compile_module

    r, start = compile_one(spec, folder, TARGET, compile_module)
    if isinstance(r, dict):
        return r
    spills = r.sass["LDL"] + r.sass["STL"]
    verdict = "spill" if spills else "smem" if (r.compiler_smem or 0) > SMEM_LIMIT else "ok"
    return {"verdict": verdict, "registers": r.resources["registers"], "frame_bytes": r.resources["frame_bytes"],
            "spill_store_bytes": r.resources["spill_store_bytes"], "spill_load_bytes": r.resources["spill_load_bytes"],
            "ldl": r.sass["LDL"], "stl": r.sass["STL"], "compiler_smem": r.compiler_smem, "plan_smem": r.plan_smem,
            "tmem_columns": r.resources["tmem_columns"], "plan_tmem_columns": r.resources["plan_tmem_columns"],
            "utmaldg": r.sass["UTMALDG"], "seconds": round(time.perf_counter() - start, 2)}


def worker(n: str, seed: str, indices: str) -> None:
    """Compile the listed cases, announcing each before its compile (the driver's crash marker)."""
    folder = Path(tempfile.mkdtemp(prefix="specgen-cute-sm100-grid-"))
    specs = cases(n, seed)
    for i in (int(x) for x in indices.split(",")):
        print(json.dumps({"start": i}), flush=True)
        print(json.dumps({"index": i, "compiler": compile_case(specs[i], folder)}), flush=True)


def summarize(done: list[dict]) -> dict[str, object]:
    verdicts = [c["compiler"]["verdict"] for c in done]
    kinds = [classify(c["check"], c["compiler"]) for c in done]
    return {
        "cases": len(done),
        "compiler": {v: verdicts.count(v) for v in ("ok", "spill", "smem", "error")},
        "check": {"accept": sum(not c["check"]["errors"] for c in done),
                  "reject": sum(bool(c["check"]["errors"]) for c in done)},
        "false_accepts": [c["spec"]["name"] for c, k in zip(done, kinds, strict=True) if k == "false_accept"],
        "false_rejects": [(c["spec"]["name"], c["check"]["errors"]) for c, k in zip(done, kinds, strict=True)
                          if k == "false_reject"],
    }


def _run_share(n: str, seed: str, share: list[int], results: dict[int, dict]) -> None:
    todo = list(share)
    while todo:
        proc = subprocess.Popen([sys.executable, __file__, "--worker", str(n), str(seed), ",".join(map(str, todo))],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        current = todo[0]
        assert proc.stdout is not None
        for line in proc.stdout:
            if not line.startswith("{"):
                continue
            msg = json.loads(line)
            if "start" in msg:
                current = msg["start"]
            elif "index" in msg:
                results[msg["index"]] = msg["compiler"]
                print(json.dumps(msg), file=sys.stderr, flush=True)  # progress
        proc.wait()
        if current not in results:  # the DSL took the process down on this spec
            results[current] = {"verdict": "error", "error": f"the compiling process died (exit {proc.returncode})"}
        todo = [i for i in todo if i not in results]


def write_record(path: Path, generator: str, done: list[tuple[dict, dict]]) -> None:
    lines = [json.dumps({"spec": s, "compiler": c}, sort_keys=True) for s, c in done]
    head = json.dumps({"generator": generator, "dsl": dsl_version(), "target": TARGET})[:-1]
    path.write_text(head + ', "cases": [\n' + ",\n".join(lines) + "\n]}\n")


def main(n: str = "300", seed: str = "17", out: str = "", jobs: str = "2") -> int:
    specs = cases(n, seed)
    results: dict[int, dict] = {}
    shares = [list(range(j, len(specs), int(jobs))) for j in range(int(jobs))]
    threads = [threading.Thread(target=_run_share, args=(n, seed, s, results)) for s in shares]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done = []
    for i, spec in enumerate(specs):
        case = {"spec": spec, "check": check_case(spec), "compiler": results[i]}
        done.append(case)
        print(json.dumps(case), flush=True)
    summary = summarize(done)
    print(json.dumps({"summary": summary}), flush=True)
    if out:
        write_record(Path(out), f"tests/grids/cute_sm100.py {n} {seed}", [(c["spec"], c["compiler"]) for c in done])
    return 1 if summary["false_accepts"] or len(summary["false_rejects"]) > 0.02 * (len(specs) - len(PROBES)) else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    if sys.argv[1:2] == ["--worker"]:
        worker(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(main(*sys.argv[1:5]))
