"""What the grouped kind's CuTe sm90 and Mosaic GPU compile grids share (tests/grids/grouped_cute_sm90.py,
grouped_mgpu.py; issue 37: "extend the compile grids to the grouped designs"): the seeded draw of a grouped
spec's common fields (16-bit operands, both B majors, both index formats and tails, the kind's epilogue chains:
per-group bias and column scales (G, N), router row scales, scalars, activations, clamp, cast), pipeline depths
around the naive SMEM fit, and a resumable driver: a worker process compiles the specs a work file (JSON lines)
lacks, appending each verdict as it comes, so a crash (the CuTe DSL may abort its process) or a stop loses one
spec at most and a re-run resumes; the driver then writes the record the CI replay reads
(tests/grouped/test_grid_compilers.py) through tests/grids/verdicts.py. Imports no compiler."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SMEM_LIMIT = 232448  # per block on sm_90 (cutlass arch.h)
ACTIVATIONS = ["relu", "gelu", "gelu_tanh", "silu", "sigmoid"]


def epilogue(rng: random.Random, out: str) -> list[dict]:
    """A grouped chain from none to six ops, each runtime argument named apart: (G, N) bias and column scales
    (gathered at the group's row), a router row scale (M,), scalar scales, activations, clamp, cast."""
    return draw_chain(rng, out, [0, 0, 1, 1, 2, 2, 3, 4, 5, 6],
                      ["bias", "bias", "col", "row", "scalar", "activation", "activation", "clamp", "cast"])


def stages_near_fit(rng: random.Random, tile: dict[str, int], elem_bytes: int = 2) -> int | str:
    """`auto`, or a depth around the naive fit: the block's SMEM over one A + B stage (what a reader would
    guess without the epilogue's buffers and barriers), one or two either side of it."""
    naive = SMEM_LIMIT // ((tile["m"] + tile["n"]) * tile["k"] * elem_bytes)
    return rng.choice(["auto", "auto", max(2, naive - 2), max(2, naive - 1), naive, naive, naive + 1, 2])


def common(rng: random.Random, name: str, target: str) -> dict:
    """The fields both grids draw alike: dtypes (bf16 mostly, f16; now and then an operand the design refuses),
    out, B's major, the groups' index format and tail, the epilogue."""
    dtype = rng.choice(["bf16", "bf16", "bf16", "f16"])
    if rng.random() < 0.04:  # fp8 or f32 operands: the design's dtype rule refuses them, the compile fails
        dtype = rng.choice(["fp8_e4m3", "f32"])
    out = rng.choice(["bf16", "bf16", "f32"] if dtype != "f16" else ["f16", "f16", "f32"])
    return {"name": name, "kind": "grouped", "a": {"dtype": dtype, "major": "k"},
            "b": {"dtype": dtype, "major": rng.choice(["k", "mn"])}, "out": {"dtype": out},
            "epilogue": epilogue(rng, out),
            "groups": {"index": rng.choice(["offs", "sizes"]), "tail": rng.choice(["untouched", "zero"])},
            "targets": [target]}


def ragged_k_epilogue(rng: random.Random, out: str) -> list[dict]:
    """A ragged-K chain (the weight gradient's: what the spec takes there) from none to five ops: a per-group bias
    (G, N), scalar scales, activations (the erf GELU among them), clamp, cast."""
    return draw_chain(rng, out, [0, 0, 0, 1, 1, 2, 2, 3, 4, 5],
                      ["bias", "bias", "scalar", "activation", "activation", "clamp", "cast"])


def draw_chain(rng: random.Random, out: str, lengths: list[int], ops: list[str]) -> list[dict]:
    """A chain of rng.choice(lengths) ops, each drawn from `ops` (both chains above: the same draws as when each
    wrote this loop itself, so a seed's specs are unchanged)."""
    chain: list[dict] = []
    for i in range(rng.choice(lengths)):
        op = rng.choice(ops)
        if op == "bias":
            chain.append({"op": "bias", "dtype": rng.choice(["f32", "bf16"]), "name": f"bias{i}"})
        elif op in ("col", "row"):
            chain.append({"op": "scale", "by": op, "name": f"{op}_s{i}"})
        elif op == "scalar":
            chain.append(rng.choice([{"op": "scale", "by": "scalar", "value": 0.5},
                                     {"op": "scale", "by": "scalar", "name": f"alpha{i}"}]))
        elif op == "activation":
            chain.append({"op": "activation", "fn": rng.choice(ACTIVATIONS)})
        elif op == "clamp":
            chain.append(rng.choice([{"op": "clamp", "min": -4.0, "max": 4.0}, {"op": "clamp", "max": 6.0}]))
        else:
            chain.append({"op": "cast", "dtype": rng.choice(["bf16", "f16"] if out != "f32" else ["bf16", "f32"])})
    return chain


def common_k(rng: random.Random, name: str, target: str) -> dict:
    """The ragged-K grids' shared fields (groups.ragged = "k", the weight gradient; tests/grids/grouped_cute_sm90_k.py,
    grouped_mgpu_k.py): bf16 mostly, f16, now and then f32 operands (the Triton design's) or fp8 ones (the spec
    refuses fp8 for ragged K when it loads: recorded as that refusal); both majors of A and of B (M-major A and
    N-major B, the training layout, twice as often); bf16 / f16 / f32 out; both index formats (the tail is ragged
    M's); the ragged-K chain."""
    dtype = rng.choice(["bf16", "bf16", "bf16", "f16"])
    if rng.random() < 0.05:
        dtype = rng.choice(["fp8_e4m3", "f32"])
    out = rng.choice(["bf16", "bf16", "f32"] if dtype != "f16" else ["f16", "f16", "f32"])
    return {"name": name, "kind": "grouped", "a": {"dtype": dtype, "major": rng.choice(["mn", "mn", "k"])},
            "b": {"dtype": dtype, "major": rng.choice(["mn", "mn", "k"])}, "out": {"dtype": out},
            "epilogue": ragged_k_epilogue(rng, out), "groups": {"index": rng.choice(["offs", "sizes"]), "ragged": "k"},
            "targets": [target]}


def load_work(path: Path) -> dict[str, dict]:
    """The work file's verdicts by spec name (the last line of a name wins)."""
    if not path.exists():
        return {}
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {r["spec"]["name"]: r for r in rows}


def worker(specs: list[dict], names: list[str], work: Path, compile_case: Callable[[dict], dict]) -> None:
    """Compile the named specs, announcing each on stdout before its compile (the driver's crash marker) and
    appending {spec, compiler} to the work file after it."""
    by_name = {s["name"]: s for s in specs}
    for name in names:
        print(json.dumps({"start": name}), flush=True)
        row = {"spec": by_name[name], "compiler": compile_case(by_name[name])}
        with work.open("a") as f:
            f.write(json.dumps(row, sort_keys=True) + "\n")
        print(json.dumps({"done": name, "verdict": row["compiler"].get("verdict", row["compiler"].get("lowered", {}).get("ok"))}), flush=True)


def drive(script: str, args: list[str], specs: list[dict], work: Path, died: Callable[[str], dict]) -> list[dict]:
    """Run `script --worker ARGS NAMES` over the specs the work file lacks until none is left (a worker the compiler
    took down is restarted after that spec, recorded as `died(message)`); the rows in grid order."""
    work.parent.mkdir(parents=True, exist_ok=True)
    while todo := [s["name"] for s in specs if s["name"] not in load_work(work)]:
        proc = subprocess.Popen([sys.executable, script, "--worker", *args, ",".join(todo)], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        current = todo[0]
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("{"):
                msg = json.loads(line)
                current = msg.get("start", current)
                if "done" in msg:
                    print(line.strip(), file=sys.stderr, flush=True)  # progress
        proc.wait()
        if current not in load_work(work):
            spec = next(s for s in specs if s["name"] == current)
            with work.open("a") as f:
                f.write(json.dumps({"spec": spec, "compiler": died(f"the compiling process died (exit "
                                                                   f"{proc.returncode})")}, sort_keys=True) + "\n")
    have = load_work(work)
    return [have[s["name"]] for s in specs]


def record_cute(script: str, specs: list[dict], target: str, n: int, seed: int, out: Path) -> int:
    """A CuTe grid script's `main`: drive the workers over `specs`, write the record (its head names the DSL's
    version, the target and the command that made it) and print its summary."""
    from cute_sm90 import dsl_version

    work = out.with_suffix(".work.jsonl")
    rows = drive(script, [str(n), str(seed), str(work)], specs, work,
                 lambda message: {"verdict": "error", "error": message})
    write_record(out, {"generator": f"tests/grids/{Path(script).name} {n} {seed}", "dsl": dsl_version(),
                       "target": target, "seed": seed}, rows)
    return summary(out)


def write_record(path: Path, head: dict, rows: list[dict]) -> None:
    """The record tests/grids/verdicts.py reads: a head (the compiler's version, the target, the generator) and
    one case a line."""
    text = json.dumps(head, sort_keys=True)[:-1] + ', "cases": [\n' + ",\n".join(
        json.dumps(r, sort_keys=True) for r in rows) + "\n]}\n"
    json.loads(text)  # well-formed
    path.write_text(text)


def summary(path: Path) -> int:
    """Print the record's verdicts the way issue 36 counts them (tests/grids/verdicts.py); 1 on a false accept."""
    from verdicts import main

    return main([str(path)])


def cli(argv: list[str], grid: Callable[[int, int], list[dict]], compile_case: Callable[[dict], dict],
        main: Callable[[int, int, Path], int], record: Path) -> int:
    """A grouped grid script's command line: `N SEED [RECORD]` drives the grid (`main`); `--worker N SEED WORK NAMES`
    is one of the worker processes `drive` starts, compiling the named configs."""
    sys.path.insert(0, str(ROOT))  # the compiles import specgen from the checkout
    if argv[:1] == ["--worker"]:
        worker(grid(int(argv[1]), int(argv[2])), argv[4].split(","), Path(argv[3]), compile_case)
        return 0
    return main(int(argv[0]), int(argv[1]), Path(argv[2]) if argv[2:] else record)
