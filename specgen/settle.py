"""Check's settle step: a modelled verdict near its rule's boundary (a `Finding` whose `near` is set:
rules/finding.py) is settled by the backend's own compiler where it is installed.

For each near-boundary (spec, target, variant) the design's `compile_probe` names the compile hook that
compiles that one config (specgen/probe.py renders a module of it and runs the hook in a worker
process, one per config, as many at a time as there are CPU cores). Verdicts are cached on disk, keyed by
the config, the target, the compiler's versions, specgen's and a digest of its code and templates
(`$SPECGEN_SETTLE_CACHE`, default `~/.cache/specgen/settle`), so a second check compiles nothing. The
finding then says where its verdict came from: `(compiler)` with what the compiler reported, or `(model)`
where no compiler settled it (none installed, `check --no-compile` or `SPECGEN_NO_COMPILE=1`, a design
without a compile hook) and how to settle it.

Imports no compiler: only the worker processes do (a cache hit or `--no-compile` starts none).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from specgen import __version__
from specgen.design import CompileProbe
from specgen.memo import IdentityMemo
from specgen.resolved import Resolved
from specgen.rules.finding import Finding, ProbeResult
from specgen.values import value

PROBE_SECONDS = 600  # one config's compile; past it the verdict stays the model's (and is not cached)


@dataclass
class SettleStats:
    """What the settle step did: near-boundary verdicts, configs compiled (and how long, wall clock), cache
    hits, and verdicts left to the model."""

    near: int = 0
    compiled: int = 0
    cached: int = 0
    unsettled: int = 0
    seconds: float = 0.0


@value
class Settled:
    finding: Finding | None  # None: the compiler accepts the config (no finding)
    source: str  # "compiler" or "model"


def mode_from_environment() -> str:
    """The settle mode of a command without `--no-compile` (`tune`) or run without it: "analytic" where
    SPECGEN_NO_COMPILE is set to anything but "", "0", "false" or "no" (what the flag says), else "compile"."""
    return "analytic" if os.environ.get("SPECGEN_NO_COMPILE", "0").strip().lower() not in ("", "0", "false", "no") \
        else "compile"


def cache_dir() -> Path:
    return Path(os.environ.get("SPECGEN_SETTLE_CACHE", Path.home() / ".cache" / "specgen" / "settle"))


def backward_role(r: Resolved) -> str:
    """The backward role whose own kernel settles a companion's verdict, on a design whose backward GEMMs are
    kernels of their own (`backward_kernels`: Triton's backward.jinja); "" where the config's forward kernel does."""
    return r.companion if r.companion and r.parent is not None and r.design.backward_kernels else ""


def standalone(r: Resolved) -> dict[str, object]:
    """The config `r` resolved (its target's keys and its variant applied) as a one-target spec of its own:
    what the probe renders and compiles, and (canonical JSON) what the cache is keyed by. Its name is fixed,
    so that one config in two kernels is compiled once. A companion settled by its role's own kernel
    (`backward_role`) is its training spec's config: the probe compiles that module's kernel for the role."""
    config = (r.parent if backward_role(r) and r.parent is not None else r.spec).model_dump(mode="json")
    for key in ("per_target", "variants"):
        config.pop(key, None)
    config.update(name="settle_probe", description="", targets=[str(r.target)])
    return config


def compiler_versions(probe: CompileProbe) -> dict[str, str] | None:
    """The installed versions of the probe's libraries, None where one of its modules is missing (looked up,
    never imported)."""
    if any(importlib.util.find_spec(m) is None for m in probe.modules):
        return None
    return {lib: _version(lib) for lib in probe.libraries}


def _version(distribution: str) -> str:
    """Its version, or "absent" (a library the design names that this install runs without: apache-tvm-ffi
    beside the CuTe DSL, say): the modules decide whether the compiler is there, the versions key the cache."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


@functools.cache
def code_digest() -> str:
    """A digest of what renders a config (specgen's modules and the templates): a verdict cached by one
    checkout is not reused by another whose templates or plans differ, though both say one version."""
    # jinja2 comes with it: only a check that settles pays for it
    from specgen.render.env import templates_dir

    digest = hashlib.sha256()
    for root in (Path(__file__).resolve().parent, templates_dir()):
        for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".jinja") and p.is_file()):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def cache_key(config: dict[str, object], versions: dict[str, str], role: str = "") -> str:
    keyed = {"config": config, "compiler": versions, "specgen": __version__, "code": code_digest()}
    text = json.dumps({**keyed, "role": role} if role else keyed, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def remember(r: Resolved, result: ProbeResult) -> None:
    """Cache what a compile outside check found for the config `r` (`tune` compiles every candidate it
    times): a later check or render of that config compiles nothing. Nothing where no compiler settles it."""
    probe = r.design.compile_probe()
    versions = compiler_versions(probe) if probe is not None else None
    if versions is not None:
        config, role = standalone(r), backward_role(r)
        _write_cache(cache_key(config, versions, role), {"spec": config, "role": role, "target": str(r.target),
                                                         "hook": probe.hook, "compiler": versions, "probe": dict(result),
                                                         "specgen": __version__})


def _read_cache(key: str) -> ProbeResult | None:
    try:
        return json.loads((cache_dir() / f"{key}.json").read_text())["probe"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_cache(key: str, entry: dict[str, object]) -> None:
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{key}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(entry, sort_keys=True))
        os.replace(tmp, folder / f"{key}.json")
    except OSError:  # an unwritable cache costs a compile next time, nothing else
        pass


def _run_probe(job: dict[str, object]) -> tuple[ProbeResult, bool]:
    """Compile one config in a worker process (specgen/probe.py): (what it reported, whether to cache it).
    A process the compiler aborted is the compiler's refusal (cached); one past PROBE_SECONDS is not."""
    root = str(Path(__file__).resolve().parents[1])  # this specgen, whatever the worker's cwd
    env = {**os.environ, **job.get("environment", {}),  # e.g. Triton's AOT compile, never its CPU interpreter
           "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}
    try:
        proc = subprocess.run([sys.executable, "-m", "specgen.probe"], input=json.dumps(job), capture_output=True,
                              text=True, env=env, timeout=PROBE_SECONDS)
    except subprocess.TimeoutExpired:
        return {"error": f"the compile took over {PROBE_SECONDS} s"}, False
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode == 0 and lines:
        result = json.loads(lines[-1])
        return result, "probe_failed" not in result
    tail = (proc.stderr.strip().splitlines() or [""])[-1][:300]
    return {"error": f"the compiling process died (exit {proc.returncode}){': ' + tail if tail else ''}"}, proc.returncode < 0


def _how_to_settle(probe: CompileProbe | None, compiling: bool) -> str:
    if probe is None:
        return "no compiler settles it on this target: the model's verdict stands"
    if not compiling:
        return "rerun `specgen check` without --no-compile to settle it with the compiler"
    return (f"settle it with the compiler: pip install 'specgen[{probe.extra}]' ({' and '.join(probe.modules)}) and "
            "rerun `specgen check`, or compile the rendered module with `specgen compile`")


_UNSETTLED: IdentityMemo[Settled] = IdentityMemo()  # by finding: a kernel written again shares its findings


def _unsettled(f: Finding, how: str) -> Settled:
    """The model's verdict, saying it is near the boundary and how to settle it: a near accept is a warning;
    a near refusal keeps its severity (check does not accept what the model refuses unsettled)."""
    found = _UNSETTLED.get(f, how)
    return found if found is not None else _UNSETTLED.put(f, _unsettled_now(f, how), how)


def _unsettled_now(f: Finding, how: str) -> Settled:
    assert f.near is not None
    if f.near.accepted:
        return Settled(replace(f, severity="warning", message=f"near the boundary ({f.near.margin}): {f.message}; the "
                               "model accepts it, the compiler decides", hint=how, near=None), "model")
    hint = f"{f.hint}; {how}" if f.hint else how
    return Settled(replace(f, message=f"{f.message} (near the boundary: {f.near.margin}; the compiler decides)",
                           hint=hint, near=None), "model")


def _decided(f: Finding, probe: CompileProbe, result: ProbeResult) -> Settled:
    assert f.near is not None
    if "probe_failed" in result:
        return _unsettled(f, f"the compile probe failed ({result['probe_failed']}): the model's verdict stands")
    why = f.near.decide(result)
    if why is None:
        return _unsettled(f, f"the compiler's probe did not report what decides it ({probe.hook})")
    if not why:
        return Settled(None, "compiler")
    return Settled(replace(f, message=f"{why} (the model: {f.message})", near=None), "compiler")


@dataclass
class _Plan:
    """Each item's cache key and probe (or its verdict already: the model's, where no compiler settles it),
    the configs still to compile (by key) and the results known so far."""

    out: list[Settled | None]
    keyed: dict[int, tuple[str, CompileProbe]]
    jobs: dict[str, dict[str, object]]
    results: dict[str, ProbeResult]
    hits: set[str]  # keys read from the cache


def _plan(items: Sequence[tuple[Resolved, Finding]], compiling: bool,
          known: dict[str, ProbeResult] | None = None) -> _Plan:
    plan = _Plan([None] * len(items), {}, {}, dict(known or {}), set())
    found: dict[CompileProbe, dict[str, str] | None] = {}  # each probe's versions, looked up once
    for i, (r, f) in enumerate(items):
        probe = r.design.compile_probe()
        if compiling and probe is not None and probe not in found:
            found[probe] = compiler_versions(probe)
        versions = found[probe] if compiling and probe is not None else None
        if versions is None:
            plan.out[i] = _unsettled(f, _how_to_settle(probe, compiling))
            continue
        config, role = standalone(r), backward_role(r)
        key = cache_key(config, versions, role)
        plan.keyed[i] = (key, probe)
        if key in plan.results or key in plan.jobs:
            continue
        hit = _read_cache(key)
        if hit is not None:
            plan.results[key] = hit
            plan.hits.add(key)
        else:
            plan.jobs[key] = {"spec": config, "role": role, "target": str(r.target), "hook": probe.hook,
                              "compiler": versions, "environment": dict(probe.environment)}
    return plan


def compile_jobs(jobs: dict[str, dict[str, object]], workers: int | None = None) -> tuple[dict[str, ProbeResult], float]:
    """Compile each config (by cache key) in parallel, caching what is to be kept: the results and the wall
    seconds it took."""
    results: dict[str, ProbeResult] = {}
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, min(len(jobs), workers or os.cpu_count() or 1))) as pool:
        for key, (result, keep) in zip(jobs, pool.map(_run_probe, jobs.values()), strict=True):
            results[key] = result
            if keep:
                _write_cache(key, {**jobs[key], "probe": dict(result), "specgen": __version__})
    return results, time.perf_counter() - start


def _decide_all(items: Sequence[tuple[Resolved, Finding]], plan: _Plan) -> list[Settled]:
    out = plan.out
    for i, (key, probe) in plan.keyed.items():
        out[i] = _decided(items[i][1], probe, plan.results[key])
    return [s for s in out if s is not None]


def settle(items: Sequence[tuple[Resolved, Finding]], compiling: bool = True,
           workers: int | None = None) -> tuple[list[Settled], SettleStats]:
    """Each near-boundary finding's verdict: the compiler's where `compiling` and its compiler is installed
    (from the cache, or compiled now, the missing configs in parallel), else the model's."""
    stats = SettleStats(near=len(items))
    plan = _plan(items, compiling)
    stats.cached = len(plan.hits)
    if plan.jobs:
        compiled, stats.seconds = compile_jobs(plan.jobs, workers)
        plan.results.update(compiled)
        stats.compiled = len(plan.jobs)
    done = _decide_all(items, plan)
    stats.unsettled = sum(s.source == "model" for s in done)
    return done, stats


def settle_known(items: Sequence[tuple[Resolved, Finding]], compiling: bool = True,
                 known: dict[str, ProbeResult] | None = None) -> tuple[list[Settled] | None, _Plan]:
    """`settle` without compiling: the verdicts where the cache (or `known`, results by key) settles every
    item, else None; and the plan, whose `jobs` are the configs still to compile and `hits` the keys the
    cache answered (for a caller that settles a run in parts: check over many files, specgen/check_batch.py)."""
    plan = _plan(items, compiling, known)
    return (None if plan.jobs else _decide_all(items, plan)), plan
