"""A/B of two versions of the grouped Mosaic GPU kernel (the catalogue's `moe_bf16`, pallas:gpu_sm90) in one
process, on gpu/bench_grouped.py's rows, with the project's paired CUPTI timer (`specgen.bench.timing.kernel_cycle`:
every call once a round in rotating order, L2 flushed before each): this checkout's module ("new") and another
rendering of it ("head": `--head REV` takes generated/pallas/gpu_sm90/moe_bf16.py at git revision REV, or
`--head-file FILE` a module file), each against torch._grouped_mm, with the torch entry and an A/A pair. Before
timing, the two results' groups' rows are compared (max |new - head| beside max |new|: a split last wave sums
its K parts in another order, so the two may differ by a rounding).

    python gpu/ab_grouped_mgpu.py --head main --out out/gpu [--rounds 6] [--rows "Mixtral down:skewed,..."]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch shares the GPU in this process

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import torch  # noqa: E402

from specgen.bench.stats import geomean, paired  # noqa: E402
from specgen.bench.timing import jax_call, kernel_cycle  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_grouped_mgpu import ROWS, row_problem  # noqa: E402  (the bench's rows, its data)

MODULE = "generated/pallas/gpu_sm90/moe_bf16.py"


def load_head(rev: str | None, path: str | None):
    """The other module, its relative spec import made absolute (it sits outside the package)."""
    text = Path(path).read_text() if path else subprocess.run(["git", "show", f"{rev}:{MODULE}"], capture_output=True,
                                                               text=True, check=True).stdout
    text = text.replace("from ...specs.moe_bf16 import", "from generated.specs.moe_bf16 import")
    file = Path(tempfile.mkdtemp()) / "moe_bf16_head.py"
    file.write_text(text)
    spec = importlib.util.spec_from_file_location("moe_bf16_head", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="out/gpu")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--head", help="a git revision whose rendering is the A side")
    parser.add_argument("--head-file", help="or a module file")
    parser.add_argument("--rows", default=",".join(ROWS), help="comma-separated WORKLOAD:DIST pairs")
    args = parser.parse_args()
    if not (args.head or args.head_file):
        parser.error("give --head REV or --head-file FILE")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from generated.pallas.gpu_sm90 import moe_bf16 as new

    head = load_head(args.head, args.head_file)
    result: dict[str, object] = {"device": torch.cuda.get_device_name(), "jax": jax.__version__,
                                 "torch": torch.__version__, "head": args.head or args.head_file, "rows": {}}
    table = []
    for label in args.rows.split(","):
        sizes, a, w, offs = row_problem(label)
        end = int(offs[-1])
        y_new = new._call(a, w, offs)[:end].astype(jnp.float32)
        y_head = head._call(a, w, offs)[:end].astype(jnp.float32)
        diff = (float(jnp.max(jnp.abs(y_new - y_head))), float(jnp.max(jnp.abs(y_new))))
        ta, tw, to = torch.from_dlpack(a), torch.from_dlpack(w), torch.from_dlpack(offs)
        calls = {"new": jax_call(new._call, a, w, offs), "head": jax_call(head._call, a, w, offs),
                 "torch_grouped_mm": lambda ta=ta, tw=tw, to=to: torch._grouped_mm(ta, tw.transpose(-2, -1), offs=to),
                 "new_torch_entry": lambda ta=ta, tw=tw, to=to: new.moe_bf16_torch(ta, tw.transpose(-2, -1), to)}
        calls["new_again"] = calls["new"]  # A/A
        cycle = kernel_cycle(calls, args.rounds)
        ours, theirs = cycle["new"]["samples"], cycle["head"]["samples"]
        row = {"sizes": sizes, "max_abs_diff_and_max_abs": diff, "new_us": paired(ours, ours).ours_us,
               "head_us": paired(theirs, theirs).ours_us,
               "torch_grouped_mm_over_head": paired(theirs, cycle["torch_grouped_mm"]["samples"]).model_dump()}
        for other in ("head", "torch_grouped_mm", "new_torch_entry", "new_again"):
            row[f"{other}_over_new"] = paired(ours, cycle[other]["samples"]).model_dump()
        row["kernels"] = {c: cycle[c]["kernels"] for c in calls}
        result["rows"][label] = row
        table.append((label, row))
        print(label, json.dumps({key: round(v["ratio"], 4) for key, v in row.items() if key.endswith(("_over_new", "_over_head"))}),
              "diff", diff, flush=True)
    print("| workload | sizes | head us | torch/head | new us | torch/new (interval) | head/new | torch entry/new | A/A |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, r in table:
        t = r["torch_grouped_mm_over_new"]
        print(f"| {label.replace(':', ' | ')} | {r['head_us']:.1f} | {r['torch_grouped_mm_over_head']['ratio']:.3f} | "
              f"{r['new_us']:.1f} | {t['ratio']:.3f} ({t['ratio_lo']:.3f}-{t['ratio_hi']:.3f}) | "
              f"{r['head_over_new']['ratio']:.3f} | {r['new_torch_entry_over_new']['ratio']:.3f} | "
              f"{r['new_again_over_new']['ratio']:.3f} |")
    print(f"| geomean | | | {geomean([r['torch_grouped_mm_over_head']['ratio'] for _, r in table]):.3f} | | "
          f"{geomean([r['torch_grouped_mm_over_new']['ratio'] for _, r in table]):.3f} | | | |", flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "ab-grouped-mgpu.json").write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
