"""Check vs the Mosaic GPU lowering: a seeded grid of borderline `pallas:gpu_sm90` GEMM specs, each
checked by specgen and lowered by jax for CUDA on this CPU machine (no GPU).

Usage: `python tests/grids/mgpu.py [--swap] N [SEED [OUT]]` (from the repository root, the tree on
PYTHONPATH): N specs of seed SEED, one JSON line per spec on stdout, the summary last; OUT (optional)
writes the record the CPU replay test reads (tests/data/grid_mgpu.json; with `--swap`, a grid of
`pallas.swap_ab` specs, `swap_grid`, tests/data/grid_mgpu_swap.json). `--catalogue-small-n` instead lowers the
rendered catalogue at small N and counts the TMA indices Mosaic GPU drops (see below). Needs what lowering Mosaic GPU for CUDA
needs on a CPU: jax with absl-py and the jax-cuda12 plugin/pjrt wheels of the same version
(`pip install --no-deps "jax-cuda12-plugin==<jax>" "jax-cuda12-pjrt==<jax>"`: no CUDA libraries, no
GPU; the plugin's "Unable to load CUDA" warning is expected). The replay test
(tests/test_grid_mgpu.py) needs none of it.

Per spec, both sides:
- check: `check_spec` on the spec's one target; any error is a reject.
- lowering: the spec rendered by the Pallas design (as `specgen render` would), imported, and its
  jitted `_call` lowered with `lowering_platforms=("cuda",)` on a problem several tiles large (for sm_90a:
  Mosaic GPU's `_infer_arch` default without a device). That runs everything of Mosaic GPU that is
  Python: the SMEM allocation and its 232448 B limit, the kernel body's lowering (TMA, wgmma, the
  epilogue), layout inference and the dialect lowering; what is left (NVVM, ptxas) runs in C++ only
  where a GPU is (an XLA compile on the CPU has no `mosaic_gpu_v2` handler). A failure is a reject.
  The SMEM figure is Mosaic GPU's own: lowered once with its SMEM limit set to 1 byte, whose error
  carries `smem_bytes=<n>` (the SMEM probe (bench/mgpu_smem_probe.py until issue 21, in git history)), and compared with the plan's (CONFIG.smem_bytes).
- small N: every fourth spec is also lowered at N = 8, 16 and 40 with its own tile (the launcher pads
  what TMA needs), recorded beside the main verdict (the shape does not enter check's verdict).

false accept: check passed but the lowering failed; false reject: check refused what lowered.

Measured 2026-11-24 (jax/jaxlib 0.10.2, jax-cuda12-plugin/pjrt 0.10.2 installed with --no-deps, CPU
only; 0.1-0.3 s a lowering, 80 s for 300 specs). The verdict is `runs`: lowered, stores covering the
tile, accumulator within 255 registers. On the grid's base commit (rules and design before this grid),
seed 11's 300 specs: 123 false accepts (44 "Swizzle 16 is not supported", 37 e4m3 x e5m2 mixes, 21
slices of an MN-major B off its swizzle tiles, 18 layout-inference failures and 2 "K must be a multiple
of 64" from A and B swizzled apart, 1 bf16 -> fp8 conversion), 0 false rejects, one plan 512 B under
Mosaic GPU's figure. Now (PAL004 one input dtype; PAL008 one 32/64/128 B swizzle, which the design
chooses for A and B together, so 112 specs lower where 73 did; PAL009 no erf GELU, no bf16 cast before
an fp8 store; TMA002 on Mosaic GPU's tiled boxes; KiB-aligned buffers in `memory`): 0 false accepts,
0 false rejects, SMEM equal to the byte on every recorded figure; held out, seeds 12 and 13 (200 specs
each, run after the fixes): 0 / 0 too. Refused although it lowered: 9, 4 and 5 specs, all REG001 (a
256 x 128 f32 accumulator: 256 registers a thread) or PAL006 (subtiles that leave part of the tile
unwritten), which `runs` reads off the traced program.
Small N: every spec that lowered at its main shape also lowered at N = 8, 16 and 40, but in 59 of those 87
lowerings (none at the main shapes) Mosaic GPU dropped a dynamic TMA index with a unit dim: the
output's column-tile index, once N fits in one swizzle tile of the output (N <= 64 for a 16-bit output
with a 128 B swizzle). Every subtile store whose columns start past that tile (all zeros: B reads as
zeros there) then lands on columns 0.. instead of being clipped: see `dropped_tma_indices`.

`--swap` (seed 21, 300 specs, 2026-11-26, jax 0.10.2 on the CPU, 71 s): 0 false accepts, 8 false rejects,
all PAL007 on a 1x2 cluster with tile.m 8 (tests/test_grid_mgpu.py says why PAL007 stays), 1 PAL010 (a
128-row residual tile without a scale before it: PAL010 refuses every tile.m over 64), SMEM equal to the
byte. 29 lowerings dropped a dynamic TMA index, all at the decode shapes (M = 1..16) on a dim whose whole
extent fits one TMA tile (A's or out's rows, or A's M-major columns under one swizzle tile): every tile
holding data has index 0 there (a 2x1 pair's CTA past the last tile row then recomputes and stores tile
0's own values), and the GPU tests run those shapes (tests/gpu/test_mgpu_swap_ab_gpu.py; 2x1 with tile.m
8 in bench/results/2026-11-26-h100-s13-probe-swap-clusters.log).
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import sys
import tempfile
import traceback
from collections.abc import Iterator
from pathlib import Path

TARGET = "pallas:gpu_sm90"
SMALL_N = (8, 16, 40)
SMALL_N_EVERY = 4  # every fourth spec is also lowered at each SMALL_N

FP8 = ("fp8_e4m3", "fp8_e5m2")


def grid(n: int, seed: int = 11) -> list[dict]:
    """n seeded specs near the Mosaic GPU boundaries: the SMEM limit (big tiles, deep or `auto`
    pipelines, fp8), the wgmma / warpgroup split of tile.n (small n), tile.m 192, the epilogue subtiles,
    clusters, majors (fp8 MN-major), residual dtypes, vectors, batch."""
    rng = random.Random(seed)
    specs = []
    for i in range(n):
        kind = rng.choice(["bf16", "bf16", "f16", "fp8", "fp8"])
        if kind == "fp8":
            da, db = rng.choice(FP8), rng.choice(FP8)
            kmin = 32
        else:
            da = db = kind
            kmin = 16
        out = rng.choice(["bf16", "f16", "f32", "bf16"] + ([rng.choice(FP8)] if rng.random() < 0.2 else []))
        tile = {"m": rng.choice([64, 64, 128, 128, 192, 256]),
                "n": rng.choice([8, 16, 32, 48, 64, 96, 128, 128, 192, 256, 256]),
                "k": rng.choice([kmin, 2 * kmin, 64, 64, 128, 128, 256])}
        if rng.random() < 0.05:  # off the usual steps: n not a multiple of 16, m not of 64
            tile[rng.choice(["m", "n"])] = rng.choice([24, 40, 72, 80, 96, 112, 160, 320])
        fp8_mn = rng.random() < 0.1
        a_major = rng.choice(["k", "mn"]) if kind != "fp8" or fp8_mn else "k"
        b_major = rng.choice(["k", "mn"]) if kind != "fp8" or fp8_mn else "k"
        vec = rng.choice(["bf16", "f32", "f16"])
        res = out if rng.random() < 0.8 else rng.choice(["bf16", "f16", "f32"])
        epilogue = rng.choice([
            [], [],
            [{"op": "bias", "dtype": vec}],
            [{"op": "bias", "along": "m", "dtype": vec}],
            [{"op": "scale", "by": "rowcol"}],
            [{"op": "scale", "by": "scalar"}, {"op": "residual", "dtype": res}],
            [{"op": "bias", "dtype": vec}, {"op": "activation", "fn": rng.choice(["gelu", "gelu_tanh", "silu"])}],
            [{"op": "scale", "by": "row"}, {"op": "scale", "by": "col"}, {"op": "bias", "dtype": vec},
             {"op": "residual", "dtype": res, "beta": 0.5}, {"op": "activation", "fn": "relu"}],
            [{"op": "residual", "dtype": res}, {"op": "clamp", "min": -1.0, "max": 1.0}],
            [{"op": "activation", "fn": "sigmoid"}, {"op": "cast", "dtype": "bf16"}],
            [{"op": "cast", "dtype": rng.choice(["bf16", "f16"])}, {"op": "scale", "by": "scalar", "value": 0.5},
             {"op": "cast", "dtype": rng.choice(["bf16", "f16", "f32"])}],
        ])
        cluster = rng.choice([{"m": 1, "n": 1}] * 3 + [{"m": 2, "n": 1}, {"m": 1, "n": 2}])
        spec = {
            "name": f"grid_{i:04d}", "kind": "gemm",
            "a": {"dtype": da, "major": a_major}, "b": {"dtype": db, "major": b_major},
            "out": {"dtype": out}, "epilogue": epilogue, "tile": tile, "cluster": cluster,
            "batch": rng.random() < 0.2,
            "pipeline": {"ab_stages": rng.choice(["auto", "auto", 1, 2, 3, 4, 5, 6])},
            "schedule": {"persistent": rng.random() < 0.6, "raster": rng.choice(["along_m", "along_n"]),
                         "group_m": rng.choice([1, 4, 8, 16])},
            "targets": [TARGET],
        }
        specs.append(spec)
    return specs


def swap_grid(n: int, seed: int = 21) -> list[dict]:
    """`--swap`: n seeded specs around `pallas.swap_ab`'s boundaries: tile.m on wgmma's column side (8..256
    in steps of 8, and off them), each warpgroup's tile.n/2 on its rows (multiples of 64, and not), K steps,
    dtypes and majors, every epilogue (a residual: PAL010), clusters (PAL010), batch, pipeline depths."""
    rng = random.Random(seed)
    specs = []
    for i in range(n):
        kind = rng.choice(["bf16", "bf16", "f16", "fp8"])
        da = db = rng.choice(FP8) if kind == "fp8" else kind
        kmin = 32 if kind == "fp8" else 16
        vec = rng.choice(["bf16", "f32"])
        spec = {
            "name": f"swap_{i:04d}", "kind": "gemm",
            "a": {"dtype": da, "major": "k" if kind == "fp8" else rng.choice(["k", "k", "mn"])},
            "b": {"dtype": db, "major": "k" if kind == "fp8" else rng.choice(["k", "k", "mn"])},
            "out": {"dtype": rng.choice(["bf16", "bf16", "f16", "f32"])},
            "epilogue": rng.choice([
                [], [], [{"op": "bias", "dtype": vec}], [{"op": "bias", "along": "m", "dtype": vec}],
                [{"op": "scale", "by": "rowcol"}], [{"op": "scale", "by": "scalar"}],
                [{"op": "bias", "dtype": vec}, {"op": "activation", "fn": rng.choice(["gelu_tanh", "silu", "relu"])}],
                [{"op": "scale", "by": "row"}, {"op": "scale", "by": "col"}, {"op": "clamp", "min": -1.0, "max": 1.0}],
                [{"op": "residual", "dtype": "bf16"}],
            ]),
            "tile": {"m": rng.choice([8, 8, 16, 16, 16, 24, 32, 32, 40, 48, 64, 64, 96, 128, 12, 20]),
                     "n": rng.choice([64, 128, 128, 128, 192, 256, 256, 384, 512]),
                     "k": rng.choice([kmin, 64, 128, 128, 256])},
            "cluster": rng.choice([{"m": 1, "n": 1}] * 6 + [{"m": 2, "n": 1}, {"m": 1, "n": 2}]),
            "batch": rng.random() < 0.15,
            "pipeline": {"ab_stages": rng.choice(["auto", "auto", "auto", 2, 4, 6, 8, 12])},
            "schedule": {"persistent": rng.random() < 0.8, "raster": rng.choice(["along_m", "along_n"]),
                         "group_m": rng.choice([1, 8])},
            "pallas": {"swap_ab": True},
            "targets": [TARGET],
        }
        specs.append(spec)
    return specs


def problem(spec: dict, rng: random.Random) -> tuple[int, int, int]:
    """A problem several tiles (and clusters) large in M and N, sometimes with ragged tails, and deep
    enough in K to fill the pipeline: Mosaic GPU allocates min(stages, K steps) slots, so a short K
    would hide an SMEM overflow."""
    t, c, stages = spec["tile"], spec["cluster"], spec["pipeline"]["ab_stages"]
    m = 3 * t["m"] * c["m"] + rng.choice([0, 0, 40])
    if spec.get("pallas", {}).get("swap_ab"):  # decode: M within one tile (A's TMA box past M), or several
        m = rng.choice([1, 5, 13, 16, m])
    n = 3 * t["n"] * c["n"] + rng.choice([0, 0, 24])
    k = max(rng.choice([512, 1024, 1000]), (8 if stages == "auto" else stages + 1) * t["k"])
    return m, n, k


def check(spec: dict) -> tuple[list[str], list[str]]:
    """check's verdict on the spec's target: (error rule ids, warning rule ids). A spec the loader
    refuses is one error, "LOAD"."""
    from specgen.check import check_spec
    from specgen.spec.load import SpecError, load_text

    try:
        (ls,) = load_text(json.dumps({"kernels": [spec]}), f"<grid:{spec['name']}>", ".json")
    except SpecError:
        return ["LOAD"], []
    diags = [d for d in check_spec(ls) if d.target == TARGET]
    return (sorted({d.rule for d in diags if d.severity == "error"}),
            sorted({d.rule for d in diags if d.severity == "warning"}))


def render(spec: dict, folder: Path):
    """The spec's Mosaic GPU module, rendered by its design from what resolve gives (as render does)
    and imported."""
    from specgen.compile import load_rendered
    from specgen.registry import design_for
    from specgen.resolve import resolve
    from specgen.spec.load import load_text

    (ls,) = load_text(json.dumps({"kernels": [spec]}), f"<grid:{spec['name']}>", ".json")
    (target,) = ls.spec.targets
    files = design_for("gemm", "pallas:tpu_v5e").render(ls, [target], {str(target): resolve(ls.spec, target)})
    path = folder / f"{spec['name']}.py"
    path.write_text(files[f"pallas/gpu_sm90/{spec['name']}.py"])
    return load_rendered(path, f"_grid_mgpu_{spec['name']}")


def arg_structs(mod, m: int, n: int, k: int) -> list:
    import jax
    import jax.numpy as jnp

    from specgen.kinds.gemm.designs.pallas.design import JNP_DTYPES
    from specgen.kinds.gemm.spec import GemmSpec
    from specgen.spec.dtypes import DType

    spec = GemmSpec.model_validate(mod.SPEC)
    lead = (2,) if spec.batch else ()

    def struct(shape: tuple[int, ...], dt: DType) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(shape, jnp.dtype(JNP_DTYPES[dt]))

    args = [struct((*lead, m, k) if spec.a.major == "k" else (*lead, k, m), spec.a.dtype),
            struct((*lead, n, k) if spec.b.major == "k" else (*lead, k, n), spec.b.dtype)]
    for arg in spec.runtime_args():
        shape = {"vec_m": (m,), "vec_n": (n,), "matrix": (*lead, m, n), "scalar": ()}[arg.shape]
        args.append(struct(shape, DType.f32 if arg.shape == "scalar" else arg.dtype))
    return args


ERROR_CLASSES = (  # (class, pattern over "<type>: <message>"), first match wins
    ("smem", r"exceeds available shared memory"),
    ("dtype", r"Mixed input dtypes|supports transposes|Unsupported wgmma types|converting from"),
    # the plan found no 32/64/128 B swizzle (0) and the launcher's TMA extents divide by it
    ("swizzle", r"[Ss]wizzle|ZeroDivisionError"),
    ("layout", r"[Ll]ayout|infer"),
    ("wgmma", r"wgmma|WGMMA|K must be a multiple"),
    ("tma", r"TMA|tma|async_load|async_store|async_copy|transform"),
    ("cluster", r"[Cc]luster|collective|multicast"),
    ("shape", r"shape|[Ss]hape|divisible|tile"),
)


def error_class(text: str) -> str:
    return next((name for name, pat in ERROR_CLASSES if re.search(pat, text)), "other")


@contextlib.contextmanager
def dropped_tma_indices() -> Iterator[list[str]]:
    """Collect the TMA copies whose GMEM index Mosaic GPU drops with a unit dim: `async_copy` drops every
    dim where both the tiled GMEM view and the slice have extent 1 (DropUnitDimsTransform, jax 0.10.2
    `mosaic/gpu/launch_context.py`) together with its index, so a copy whose index there is dynamic
    (and may be past the one tile: a fully out-of-bounds subtile) lands on tile 0 instead. Yields the
    names of the ops computing the dropped dynamic indices."""
    from jax.experimental.mosaic.gpu import launch_context as lc

    found: list[str] = []
    original = lc.DropUnitDimsTransform.transform_index

    def spy(self, idx):  # noqa: ANN001, ANN202 - jax's own signature
        for i, v in enumerate(idx):
            if i in self.unit_dims and getattr(v.owner, "name", "") != "arith.constant":
                found.append(getattr(v.owner, "name", "?"))
        return original(self, idx)

    lc.DropUnitDimsTransform.transform_index = spy
    try:
        yield found
    finally:
        lc.DropUnitDimsTransform.transform_index = original


WG_THREADS = 128  # a warpgroup's threads: a wgmma accumulator of M x N f32 takes M * N / 128 registers each
MAX_REGISTERS = 255  # per thread (PTX)
TMA_SMEM_ALIGN = 128  # bytes: a TMA copy's SMEM address (PTX ISA, cp.async.bulk.tensor)


def all_eqns(jaxpr) -> Iterator:
    """Every equation of a traced program, those of its nested programs (kernel bodies, loops, conds) included."""
    for eqn in jaxpr.eqns:
        yield eqn
        for p in eqn.params.values():
            for sub in p if isinstance(p, (list, tuple)) else [p]:
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from all_eqns(inner)


def all_jaxprs(jaxpr) -> Iterator:
    """A traced program and every program nested in it (kernel bodies, loops, conds), each once per occurrence."""
    yield jaxpr
    for eqn in jaxpr.eqns:
        for p in eqn.params.values():
            for sub in p if isinstance(p, (list, tuple)) else [p]:
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from all_jaxprs(inner)


def program_facts(jaxpr, epi: tuple[int, int]) -> dict[str, object]:
    """What the traced kernel itself does, read off its jaxpr: the wgmma accumulator's shape (registers a
    thread holds for it, for every accumulator a warpgroup keeps) and how many epi-sized output subtiles it stores to GMEM, and whether those cover
    the accumulator (else part of each tile is never written: wrong results, no lowering error)."""
    found = list(all_eqns(jaxpr))
    # the accumulator refs one K loop's body writes, held together (a gated kernel's gate and up: two refs of one
    # shape); separate loops (the grouped kernel's split last wave runs its parts in loops of their own, under
    # pl.when) hold theirs in turn, so the most any one body writes counts
    held = [[tuple(eqn.invars[0].aval.shape) for eqn in body.eqns if eqn.primitive.name == "wgmma_ref"]
            for body in all_jaxprs(jaxpr)]
    stores = sum(eqn.primitive.name == "copy_smem_to_gmem" for eqn in found)
    (acc,) = {shape for refs in held for shape in refs} or {(0, 0)}
    return {"acc_shape": list(acc), "acc_registers": max(map(len, held)) * acc[0] * acc[1] // WG_THREADS, "stores": stores,
            "covered": stores * epi[0] * epi[1] >= acc[0] * acc[1] > 0}


def runs(row: dict) -> bool:
    """The lowering's verdict: it lowered, its stores cover the tile, and its accumulator fits a thread's
    registers (wgmma keeps it there; past 255 it cannot be held: REG001); and where its stores start on any row
    of an SMEM slot (the grouped kernel's store ladder: tests/grids/grouped_mgpu.py `ladder_facts`), a slot row
    spans a multiple of the 128 B TMA reads SMEM at (PTX ISA, cp.async.bulk.tensor; not checked by the lowering)."""
    return (bool(row["ok"]) and bool(row.get("covered")) and row.get("acc_registers", 0) <= MAX_REGISTERS
            and row.get("ladder_row_bytes", TMA_SMEM_ALIGN) % TMA_SMEM_ALIGN == 0)


def probe_smem(fn, args: list) -> int | None:
    """The SMEM Mosaic GPU allocates for fn(*args) lowered for CUDA: it checks its allocation before lowering the
    body, and with a 1-byte limit its error carries the figure (a fresh jit each time: a lowering that succeeded
    would be cached). None where it fails before allocating."""
    import jax
    from jax.experimental.mosaic.gpu import core as mgpu_core

    with mgpu_core.artificial_shared_memory_limit(1):
        try:
            jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",))
        except Exception as e:  # noqa: BLE001 - any failure: the real lowering classifies it
            hit = re.search(r"smem_bytes=(\d+)", str(e))
            return int(hit.group(1)) if hit else None
    return None


def lower(mod, shape: tuple[int, int, int]) -> dict:
    """Lower the module's jitted call for CUDA at one problem shape: {ok, smem, error_class, error,
    dropped_tma_index}."""
    import jax

    args = arg_structs(mod, *shape)
    row: dict[str, object] = {"shape": list(shape), "smem": probe_smem(mod._call.__wrapped__, args)}
    with dropped_tma_indices() as dropped:
        try:
            traced = jax.jit(mod._call.__wrapped__).trace(*args)
            row.update(program_facts(traced.jaxpr.jaxpr, (mod.CONFIG.epi_m, mod.CONFIG.epi_n)))
            traced.lower(lowering_platforms=("cuda",))
            row.update(ok=True, error_class="", error="")
        except Exception as e:  # noqa: BLE001 - the verdict: any failure rejects
            text = f"{type(e).__name__}: {e}"
            row.update(ok=False, error_class=error_class(text), error=_last_lines(text))
    row["dropped_tma_index"] = len(dropped)
    return row


def _last_lines(text: str, limit: int = 400) -> str:
    """The error's first line (what failed) and its last (where, for MLIR verifier errors), shortened."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("---")]
    if not lines:
        return ""
    first, last = lines[0][:limit // 2], lines[-1][-limit // 2:]
    return first if len(lines) == 1 else f"{first} | {last}"


def run_case(spec: dict, shape: tuple[int, int, int], folder: Path, small_n: bool) -> dict:
    import jax

    errors, warnings = check(spec)
    case: dict[str, object] = {"spec": spec, "check_errors": errors, "check_warnings": warnings,
                               "jax": jax.__version__}
    try:
        mod = render(spec, folder)
        case["plan_smem"] = mod.CONFIG.smem_bytes
        case["stages"] = mod.CONFIG.stages
    except Exception as e:  # noqa: BLE001 - a spec the design cannot render does not run
        case.update(lowered={"shape": list(shape), "ok": False, "smem": None, "error_class": "render",
                             "error": _last_lines(f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=2)}")})
        return case
    case["lowered"] = lower(mod, shape)
    if small_n:
        case["small_n"] = [lower(mod, (shape[0], sn, shape[2])) for sn in SMALL_N]
    return case


def accepted(case: dict) -> bool:
    return not case["check_errors"]


def summarize(cases: list[dict]) -> dict[str, object]:
    fa = [(c["spec"]["name"], c["lowered"]["error_class"] or "runs badly", c["lowered"]["error"][:160])
          for c in cases if accepted(c) and not runs(c["lowered"])]
    fr = [(c["spec"]["name"], c["check_errors"], c["lowered"]["smem"]) for c in cases
          if not accepted(c) and runs(c["lowered"])]
    fr_lowered = [(c["spec"]["name"], c["check_errors"]) for c in cases if not accepted(c) and c["lowered"]["ok"]]
    smem_off = [(c["spec"]["name"], c.get("plan_smem"), c["lowered"]["smem"]) for c in cases
                if c["lowered"]["smem"] is not None and c.get("plan_smem") != c["lowered"]["smem"]]
    small = [(c["spec"]["name"], s["shape"], s["error_class"], s["error"][:160]) for c in cases
             for s in c.get("small_n", []) if c["lowered"]["ok"] and not s["ok"]]
    dropped = [(c["spec"]["name"], c["spec"]["tile"], s["shape"]) for c in cases
               for s in [c["lowered"], *c.get("small_n", [])] if s["ok"] and s.get("dropped_tma_index")]
    classes: dict[str, int] = {}
    for c in cases:
        if not c["lowered"]["ok"]:
            classes[c["lowered"]["error_class"]] = classes.get(c["lowered"]["error_class"], 0) + 1
    return {
        "cases": len(cases),
        "check_accepts": sum(accepted(c) for c in cases),
        "lowered": sum(c["lowered"]["ok"] for c in cases),
        "lowering_error_classes": classes,
        "runs": sum(runs(c["lowered"]) for c in cases),
        "false_accepts": fa,
        "false_rejects": fr,
        # refused although it lowered (REG001 / PAL006 where the program shows why it should not run)
        "refused_but_lowered": fr_lowered,
        "plan_smem_differs": smem_off,
        "small_n_failures": small,
        # lowered, but a TMA copy's dynamic index was dropped with a unit dim (see dropped_tma_indices)
        "dropped_tma_index": dropped,
    }


RECORD_KEYS = ("spec", "plan_smem", "stages", "lowered", "small_n")  # check's side is recomputed on replay


def write_record(path: Path, cases: list[dict], seed: int, jax_version: str) -> None:
    """The record tests/test_grid_mgpu.py replays: the lowering's side of every case, one case a line."""
    swap = any(c["spec"].get("pallas", {}).get("swap_ab") for c in cases)
    head = {"jax": jax_version, "target": TARGET, "seed": seed, "small_n": list(SMALL_N),
            "made_by": f"python tests/grids/mgpu.py {'--swap ' if swap else ''}N SEED OUT"}
    rows = [json.dumps({k: c[k] for k in RECORD_KEYS if k in c}, sort_keys=True) for c in cases]
    text = json.dumps(head, sort_keys=True)[:-1] + ', "cases": [\n' + ",\n".join(rows) + "\n]}\n"
    json.loads(text)  # well-formed
    path.write_text(text)


def main(n: int, seed: int = 11, out: str | None = None, specs=grid) -> int:
    import jax

    folder = Path(tempfile.mkdtemp(prefix="specgen-grid-mgpu-"))
    sys.path.insert(0, str(folder))
    rng = random.Random(seed * 1000 + 1)
    cases = []
    for i, spec in enumerate(specs(n, seed)):
        case = run_case(spec, problem(spec, rng), folder, small_n=i % SMALL_N_EVERY == 0)
        cases.append(case)
        print(json.dumps(case), flush=True)
    summary = summarize(cases)
    print(json.dumps({"summary": summary}), flush=True)
    if out:
        write_record(Path(out), cases, seed, jax.__version__)
    return 1 if summary["false_accepts"] or len(summary["false_rejects"]) > 0.02 * len(cases) else 0


def catalogue_small_n(ns: tuple[int, ...] = (8, 16, 40, 64, 72, 512)) -> None:
    """`--catalogue-small-n`: lower every rendered catalogue module (generated/pallas/gpu_sm90/) at M = K =
    1024 and each N, printing how many dynamic TMA indices Mosaic GPU dropped (`dropped_tma_indices`): a
    CPU check for the small-N aliasing of the output's subtile stores, before and after a fix."""
    import importlib

    root = Path(__file__).resolve().parents[2]
    for path in sorted((root / "generated" / "pallas" / "gpu_sm90").glob("*.py")):
        if path.name == "__init__.py":
            continue
        mod = importlib.import_module(f"generated.pallas.gpu_sm90.{path.stem}")
        rows = {n: lower(mod, (1024, n, 1024)) for n in ns}
        print(json.dumps({"kernel": path.stem, "tile": [mod.CONFIG.tile_m, mod.CONFIG.tile_n, mod.CONFIG.tile_k],
                          "dropped_tma_index": {n: r["dropped_tma_index"] for n, r in rows.items()},
                          "lowered": all(r["ok"] for r in rows.values())}), flush=True)


if __name__ == "__main__":
    argv = sys.argv[1:]
    if argv == ["--catalogue-small-n"]:
        catalogue_small_n()
        sys.exit(0)
    swapped = argv[:1] == ["--swap"]
    argv = argv[1:] if swapped else argv
    sys.exit(main(int(argv[0]) if argv else 300, int(argv[1]) if len(argv) > 1 else (21 if swapped else 11),
                  argv[2] if len(argv) > 2 else None, swap_grid if swapped else grid))
