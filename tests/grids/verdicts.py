"""Check's verdicts beside a compile grid's, the way issue 36 counts them, for every grid record format:
tests/differential.py's Triton JSON lines, tests/grids/cute_sm90.py / cute_sm100.py's records and
tests/grids/mgpu.py's (Mosaic GPU lowering), and the grouped designs' in the same layouts
(tests/grids/grouped_cute_sm90.py, grouped_mgpu.py).

Per case, the compiler's side (`runs`): Triton built it within the block's SMEM without spilling; CuTe
verdict `ok` (built, spill-free, within SMEM); Mosaic GPU `runs` (lowered, stores covering the tile,
accumulator within 255 registers). Check's side, now (the record keeps the compile, never check's old
verdict): its errors on the target, and the rules whose verdict is near their boundary (a `Near`
finding, either side). Then
- the model alone (`check --no-compile`): false accepts (accepted, does not run), false rejects, and the
  silent false accepts among them (accepted with no near verdict: the analytic mode warns on the rest);
- with the compiler installed (a near verdict is the compiler's: it refuses exactly where the config
  does not run; the far ones stay the model's): false accepts and false rejects.

`python tests/grids/verdicts.py RECORD [RECORD ...]` prints one JSON summary per record. Imports no
compiler.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
SMEM_LIMIT = 232448  # per block, sm_90 and sm_100 (cutlass arch.h)


def check_now(spec: dict, target: str) -> tuple[list[str], list[str]]:
    """(error rule ids, near rule ids) of check on the spec's target today; ["LOAD"] where it does not load."""
    from specgen.resolve import resolve
    from specgen.rules.table import run_rules
    from specgen.spec.load import SpecError, load_text
    from specgen.spec.models import parse_target

    try:
        (ls,) = load_text(json.dumps({"kernels": [spec]}), f"<grid:{spec['name']}>", ".json")
    except SpecError:
        return ["LOAD"], []
    r = resolve(ls.spec, parse_target(target))
    errors, near = set(), set()
    for one in (r, *r.variants):
        for f in run_rules(one, near=True):
            if f.near is not None:
                near.add(f.rule)
            if f.severity == "error" and (f.near is None or not f.near.accepted):
                errors.add(f.rule)
    return sorted(errors), sorted(near)


def cases_of(path: Path) -> tuple[str, list[tuple[dict, str, bool]]]:
    """(label, [(spec, target, runs)]) of a record, whatever grid wrote it."""
    text = path.read_text()
    if path.suffix == ".jsonl":  # tests/differential.py
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        label = f"triton {rows[0]['triton']}"
        return label, [(r["spec"], f"triton:{r['arch']}", r["compiler_smem"] is not None
                        and r["compiler_smem"] <= SMEM_LIMIT and not r["spill_stores"]) for r in rows]
    record = json.loads(text)
    if "dsl" in record:  # tests/grids/cute_sm90.py, cute_sm100.py
        return (f"{record['target']} ({record['dsl']})",
                [(c["spec"], record["target"], c["compiler"]["verdict"] == "ok") for c in record["cases"]])
    from mgpu import runs  # tests/grids/mgpu.py (this folder is on sys.path when run as a script)

    return (f"{record['target']} (jax {record['jax']})",
            [(c["spec"], record["target"], runs(c["lowered"])) for c in record["cases"]])


def summarize(cases: list[tuple[dict, str, bool]]) -> dict[str, object]:
    rows = []
    for spec, target, runs in cases:
        errors, near = check_now(spec, target)
        model_accepts = not errors
        compiler_accepts = not [e for e in errors if e not in near] and (not near or runs)
        rows.append((spec["name"], errors, near, runs, model_accepts, compiler_accepts))
    n = len(rows)
    fr = [(name, errors) for name, errors, _, runs, _, ok in rows if runs and not ok]
    return {
        "cases": n, "runs": sum(r[3] for r in rows), "near": sum(bool(r[2]) for r in rows),
        "near_share": round(sum(bool(r[2]) for r in rows) / max(1, n), 3),
        "model": {"false_accepts": sum(ok and not runs for *_, runs, ok, _ in rows),
                  "false_rejects": sum(runs and not ok for *_, runs, ok, _ in rows),
                  "silent_false_accepts": [name for name, _, near, runs, ok, _ in rows if ok and not runs and not near]},
        "with_compiler": {"false_accepts": [name for name, *_, runs, _, ok in rows if ok and not runs],
                          "false_rejects": fr,
                          "false_reject_share": round(len(fr) / max(1, sum(r[3] for r in rows)), 4)},
    }


def main(paths: list[str]) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    status = 0
    for p in paths:
        label, cases = cases_of(Path(p))
        targets = sorted({t for _, t, _ in cases})
        for target in targets:
            s = summarize([c for c in cases if c[1] == target])
            print(json.dumps({"record": p, "compiler": label, "target": target, **s}), flush=True)
            status |= bool(s["with_compiler"]["false_accepts"] or s["model"]["silent_false_accepts"])
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
