"""The worker that compiles one config for check's settle step (specgen/settle.py): `python -m specgen.probe`
reads a job (a one-target spec, its target, the design's compile hook; `role`: a backward role whose own kernel
it compiles, the module's forward kernel where "") as JSON on stdin, renders the config's module into a temporary
folder, compiles it through the hook and prints what the compiler reported as one JSON line: `error` (a refusal's
message, "" where it built), `smem` (bytes), `registers` (per thread), `spill_bytes` (local-memory spill stores),
`frame_bytes` (the stack frame spills live in). A key the hook does not report is absent: the rule deciding from it
leaves the verdict to its model, as it does where the probe itself failed (`probe_failed`: a render or a tool
missing, never cached).

`adapt` is the one place that reads the hooks' CompileResult: change it where the hooks change.
Imports the compiler (through the hook): only worker processes run this module.
"""

from __future__ import annotations

import inspect
import json
import sys
import tempfile
from pathlib import Path

from specgen.compile import CompileResult, _hook, load_rendered
from specgen.rules.finding import ProbeResult


def adapt(r: CompileResult) -> dict[str, object]:
    """What check's rules read from a compile hook's result: its error, the SMEM it allocates, and where the
    hook builds a cubin, the registers per thread, spill-store bytes and stack frame it reads off it."""
    out: dict[str, object] = {"error": r.error}
    if r.compiler_smem is not None:
        out["smem"] = r.compiler_smem
    if r.registers is not None:
        out["registers"] = r.registers
    if r.spills is not None:
        out["spill_bytes"] = r.spills.store_bytes
    if "frame_bytes" in r.resources:
        out["frame_bytes"] = r.resources["frame_bytes"]
    return out


def probe(job: dict) -> ProbeResult:
    from specgen.render.catalogue import render_modules
    from specgen.spec.load import load_text
    from specgen.targets import target_info

    (ls,) = load_text(json.dumps({"kernels": [job["spec"]]}), "<settle>", ".json")
    (target,) = ls.spec.targets
    try:
        (text,) = render_modules(ls, [target]).values()
    except Exception as e:  # a config the design cannot render: the verdict stays the rules'
        return {"probe_failed": f"render: {type(e).__name__}: {e}".splitlines()[0][:300]}
    hook = _hook(job["hook"])
    params = inspect.signature(hook).parameters
    role = job.get("role") or ""
    if role and "role" not in params:
        return {"probe_failed": f"{job['hook']} compiles no backward role ({role})"}
    options: dict[str, object] = {k: v for k, v in (("sass", True), ("fill_cache", False)) if k in params}
    if role:
        options["role"] = role
    elif "backward" in params:  # a forward's verdict: a training module's backward kernels are not compiled for it
        options["backward"] = False
    with tempfile.TemporaryDirectory(prefix="specgen-settle-") as folder:
        path = Path(folder) / "settle_probe.py"
        path.write_text(text)
        result = hook(load_rendered(path), target_info(target), **options)
    rows = result if isinstance(result, list) else [result]
    if role:
        rows = [r for r in rows if r.kernel.endswith(f"[{role}]")]
        if not rows:
            return {"probe_failed": f"the module launched no {role} kernel"}
    return adapt(rows[0])  # one config: one result


def main() -> int:
    job = json.loads(sys.stdin.read())
    try:
        result = probe(job)
    except Exception as e:  # the hook reports a compiler's refusal as its `error`: this is the probe's own failure
        result = {"probe_failed": f"{type(e).__name__}: {e}".splitlines()[0][:300]}
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
