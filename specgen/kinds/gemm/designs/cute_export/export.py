"""`specgen compile --export DIR --target cute:sm90|cute:sm100`: the export hook of every CuTe design (the
designs name it as their `export_hook`; each target's design and plan come from the registry). Each
catalogue kernel's configs compiled by the CuTe DSL for the module's arch (sm_90a, sm_100a) and written
with its own `export_to_c` (an object holding the host code and the embedded cubin, and a header
declaring its tensor descriptors and wrapper), plus what specgen writes around them (abi.py): one C
entry per kernel, a CMake file, the DSL's runtime shim, a manifest.

One arch per export folder: the C functions are named for the kernel alone (`specgen_<kernel>`), so that
a program builds against either arch's export unchanged. Targets of one arch write into DIR; where one
run exports several archs (no `--target`), each arch's export is a complete folder of its own, DIR/<arch>
(DIR/sm90, DIR/sm100).

What the DSL's export does: TMA descriptors (built by its host code), the grid and the cluster launch
(cudaLaunchKernelEx with the cluster dims; a 2-CTA pair of sm100 is two CTAs of that cluster, as in the
module's `gemm_host`), SMEM attributes, loading the cubin on every device. What it cannot, written here
alike for both archs (their modules share the torch launcher `_run`, templates/gemm/cute/host.jinja): the
spec's operand-level signature, the size-selected config, the SM count that caps a persistent grid, the
argument checks, and the zeros standing in for an empty K.

Writing DIR holds the rules `specgen render` keeps for --out (and uses its helpers, render/writer.py):
- DIR is checked before anything compiles: not the empty path, not the filesystem root or a system folder,
  not a file, not the current folder (or one above it) unless that already holds a specgen export.
- It writes only what it owns: MANIFEST.json ("generator": "specgen compile --export") lists every file
  of the export. A path it would write that exists and is not listed (a user's CMakeLists.txt or
  MANIFEST.json), or that lies through a link (DIR/cute -> elsewhere, DIR/lib a link), is refused before
  anything compiles, and again before anything moves. Files the previous export owned that this one no
  longer writes are removed; files it never owned are never touched.
- One run at a time per DIR (render's flock on the folder).
- Atomic, not resumable: a run compiles for seconds to minutes, then writes a few MB; resuming would save
  little and would have to trust half-written DSL objects. Everything, the DSL's own `export_to_c` output
  included, is staged in DIR/.specgen-tmp-<pid>: a failed kernel, a write error or a kill while staging
  leave the previous export as it was (the next run removes the stage). A complete stage is renamed
  DIR/.specgen-commit (the commit point); then MANIFEST.json is rewritten to own the old and the new files
  with "complete": false, the files move in with os.replace, stale ones are removed, and the new
  MANIFEST.json ("complete": true) replaces it last. Those renames take milliseconds; a run killed among
  them leaves the old export, or a mix its manifest marks incomplete, and the next run first moves the
  rest of the commit in: the old export or the new one, never an unmarked mix.

Imports cutlass and the rendered module (torch): never imported by check/render.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import ModuleType

from specgen.compile import ExportError, MissingModule, load_rendered
from specgen.design import DesignBase
from specgen.kinds.gemm.designs.cute_export.abi import CKernel, c_kernel, render_files
from specgen.kinds.gemm.designs.cute_export.toolkit import dsl_runtime_library
from specgen.registry import design_for
from specgen.render.writer import RenderError, _clean_temporaries, _inside, atomic_write, is_generated, locked
from specgen.resolve import resolve
from specgen.spec.load import LoadedSpec
from specgen.spec.models import Target

HOOK = f"{__name__}:export"  # the designs' `export_hook`
GENERATOR = "specgen compile --export"  # the manifest's mark: a MANIFEST.json without it is not ours
MANIFEST = "MANIFEST.json"
LIB = "lib/libcuda_dialect_runtime_static.a"
STAGE = ".specgen-tmp-"  # DIR/.specgen-tmp-<pid>: one run's export while it compiles
COMMIT = ".specgen-commit"  # a complete stage whose files are being moved into DIR
ADVICE = "name a folder of its own, e.g. --export out/kernels"
# never an export folder: these and everything under them, then these folders themselves
SYSTEM_TREES = tuple(Path(p) for p in ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32",
                                       "/proc", "/run", "/sbin", "/sys", "/usr"))
SYSTEM_FOLDERS = {Path(p) for p in ("/home", "/media", "/mnt", "/opt", "/root", "/srv", "/tmp", "/var", "/var/tmp")}


@dataclass(frozen=True)
class Exported:
    kernel: str
    target: str
    configs: int
    seconds: float
    error: str = ""


def export_targets(ls: LoadedSpec, wanted: set[str]) -> list[tuple[Target, DesignBase]]:
    """The spec's wanted targets whose design exports through this hook, each with its design."""
    out = []
    for t in ls.spec.targets:
        design = design_for(ls.spec.kind, t)
        if design is not None and design.export_hook == HOOK and (not wanted or str(t) in wanted):
            out.append((t, design))
    return out


def compile_config(module, kernel: CKernel, tag: str, variant: int | None, cute_dir: Path) -> None:
    """cute.compile of one config of the module's `_export_host` over its fake tensors (no GPU) with
    the caller's stream, then the DSL's C export: cute_dir/<kernel>_<tag>.h and .o."""
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_stream

    from specgen.runtime.cute import compile_options, dsl_arch

    *tensors, max_clusters, _variant, _stream = module._fake_args(variant)
    with dsl_arch(module.ARCH):
        compiled = cute.compile(module._export_host, *tensors, max_clusters, make_fake_stream(), variant,
                                options=compile_options(module.ARCH, tvm_ffi=False))
    compiled.export_to_c(str(cute_dir), f"{kernel.name}_{tag}", function_prefix=kernel.prefix(tag))


def _rendered_module(path: Path, ls: LoadedSpec) -> ModuleType:
    module = load_rendered(path)
    if module.METADATA.get("spec_hash") != ls.spec_hash:
        raise MissingModule(f"{path} was rendered from another version of {ls.file}: run `specgen render` first")
    return module


def export(specs: list[LoadedSpec], rendered: Path, out: str | Path, wanted: set[str]) -> list[Exported]:
    """Export every rendered CuTe kernel of `specs` (the wanted targets) into `out`, or into `out/<arch>`
    for each arch where they span several: the whole export or nothing (a failed kernel is reported and
    nothing is written). Raises ExportError where DIR, or what it holds, is refused or a write fails."""
    export_folder(out, None)  # DIR itself refused first, before any module is looked for
    found: list[tuple[LoadedSpec, Path, Target, CKernel]] = []
    for ls in specs:
        for t, design in export_targets(ls, wanted):
            path = rendered / next(iter(design.modules(ls.spec, [t])))
            if not path.is_file():
                raise MissingModule(f"{path} is missing: run `specgen render` first")
            found.append((ls, path, t, c_kernel(design.plan(ls, [t], {str(t): resolve(ls.spec, t)}))))
    archs = list(dict.fromkeys(k.target_arch for *_, k in found))
    units = {a: a if len(archs) > 1 else "" for a in archs}  # arch -> its folder under DIR
    root = export_folder(out, list(units.values()))
    if not found:
        return []
    created, missing = [], root  # the folders this run makes: removed again if it writes nothing
    while not os.path.lexists(missing) and missing != missing.parent:
        created.append(missing)
        missing = missing.parent
    try:
        with locked(root, create=True, who="specgen render or compile --export", flag="--export"):
            try:
                _finish(root, units.values())
                owned = {u: _owned(root, u) for u in units.values()}
                for arch, u in units.items():  # refused before the (slow) compile
                    _check(root, u, _planned([k for *_, k in found if k.target_arch == arch]), owned[u])
                results = _stage(root, [(_rendered_module(path, ls), t, k) for ls, path, t, k in found], units, owned)
                if not any(r.error for r in results):
                    _finish(root, units.values())
                return results
            finally:
                for folder in created:  # only empty ones: a run that wrote nothing leaves no folder behind
                    try:
                        folder.rmdir()
                    except OSError:
                        break
    except RenderError as e:  # the lock: another run holds it, or DIR cannot be created
        raise ExportError(str(e)) from None


def export_folder(raw: str | Path, units: list[str] | None) -> Path:
    """DIR as given, once it is a folder an export may go into (checked before anything compiles); with
    `units` None, all but what needs the export's folders (the current folder holding an export)."""
    text = str(raw)
    if not text:
        raise ExportError(f"--export '': the empty path names no folder: {ADVICE}", 2)
    path = Path(text)
    real = path.resolve()
    if real == Path(real.anchor):
        raise ExportError(f"--export {text}: the filesystem root is never an export folder: {ADVICE}", 2)
    if real in SYSTEM_FOLDERS or real == Path(os.path.expanduser("~")).resolve() or any(
            real.is_relative_to(tree) for tree in SYSTEM_TREES):
        raise ExportError(f"--export {text}: {real} is a system folder: {ADVICE}", 2)
    probe = path
    while not os.path.lexists(probe) and probe != probe.parent:
        probe = probe.parent
    if os.path.lexists(probe) and not probe.is_dir():
        what = "a link to nothing" if probe.is_symlink() and not probe.exists() else "a file"
        where = f"--export {text} is" if probe == path else f"--export {text}: {probe} is"
        raise ExportError(f"{where} {what}, not a folder: {ADVICE} (specgen creates it)", 2)
    cwd = Path.cwd().resolve()
    if units is not None and cwd.is_relative_to(real) and not any(_owned(real, u) is not None for u in units or [""]):
        where = "the current folder" if cwd == real else "a folder above the current one"
        raise ExportError(f"--export {text} is {where}, and holds no export of specgen (no MANIFEST.json of "
                          f"{GENERATOR}): {ADVICE}", 2)
    return path


def _join(unit: str, rel: str) -> str:
    return f"{unit}/{rel}" if unit else rel


def _owned(root: Path, unit: str) -> set[str] | None:
    """The files the export in DIR/unit owns by its MANIFEST.json (None: no manifest of ours there). One
    written before the manifest had `generator` is still ours: it owns what its kernels list, beside
    specgen's CMakeLists.txt."""
    path = root / unit / MANIFEST
    if _inside(root, _join(unit, MANIFEST), None, "--export") or not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    if data.get("generator") == GENERATOR:
        files = data.get("files")
    elif ("generator" not in data and "nvidia_cutlass_dsl" in data and isinstance(data.get("kernels"), list)
          and is_generated(root / unit / "CMakeLists.txt")):
        try:
            files = ["CMakeLists.txt", "include/specgen_kernels.h", LIB, *(f"src/{k['kernel']}.cpp" for k in data["kernels"]),
                     *(c[key] for k in data["kernels"] for c in k["configs"] for key in ("object", "header"))]
        except (KeyError, TypeError):
            return None
    else:
        return None
    if not isinstance(files, list):
        raise ExportError(f"{path} has no `files` list: restore it or remove it (nothing was written)")
    folders: dict[str, str] = {}
    for rel in files:
        why = _inside(root, _join(unit, rel), folders, "--export") if isinstance(rel, str) else "is not a relative path"
        if why:
            raise ExportError(f"{path} lists {rel!r}, which {why}: {GENERATOR} owns only regular files it wrote "
                              "inside --export; fix or remove the manifest (nothing was written)")
    return set(files) - {MANIFEST}


def _check(root: Path, unit: str, rels: Iterable[str], owned: set[str] | None) -> None:
    """Refuse a path of the export that lies through a link, or holds something the export does not own."""
    folders: dict[str, str] = {}
    mine = set() if owned is None else owned | {MANIFEST}
    for rel in sorted(rels):
        path = root / unit / rel
        why = _inside(root, _join(unit, rel), folders, "--export")
        if why:
            parts = _join(unit, rel).split("/")
            link = next((p for p in (root.joinpath(*parts[:i]) for i in range(1, len(parts) + 1)) if p.is_symlink()), None)
            if link is not None:  # name the link itself, not the file behind it
                raise ExportError(f"{link} is a link (to {os.readlink(link)}): {GENERATOR} writes nothing through a "
                                  "link: remove it or choose another --export folder (nothing was written)")
            raise ExportError(f"cannot write {path}: it {why}: move it or choose another --export folder "
                              "(nothing was written)")
        if rel not in mine and os.path.lexists(path):
            raise ExportError(f"{path} exists and was not written by {GENERATOR}: move it or choose another "
                              "--export folder (nothing was written)")


def _planned(kernels: list[CKernel]) -> set[str]:
    """The files an export of these kernels writes, its manifest included."""
    dsl = {f"cute/{k.name}_{tag}.{ext}" for k in kernels for tag, _ in k.configs for ext in ("h", "o")}
    return {*render_files(kernels, ""), LIB, MANIFEST, *dsl}


def _stage(root: Path, kernels: list[tuple[ModuleType, Target, CKernel]], units: dict[str, str],
           owned: dict[str, set[str] | None]) -> list[Exported]:
    """Compile and write the whole export into DIR/.specgen-tmp-<pid>; when every kernel exported, rename
    it DIR/.specgen-commit: the commit point. Anything else leaves DIR as it was."""
    stage = root / f"{STAGE}{os.getpid()}"
    try:
        stage.mkdir()
        results: list[Exported] = []
        for arch, unit in units.items():
            results += export_arch([x for x in kernels if x[2].target_arch == arch], stage / unit)
        if any(r.error for r in results):
            return results
        for unit in units.values():  # what the DSL wrote, held to the rules the plan was
            files = json.loads((stage / unit / MANIFEST).read_text())["files"]
            _check(root, unit, {*files, MANIFEST}, owned[unit])
        os.replace(stage, root / COMMIT)
        return results
    except OSError as e:
        raise ExportError(f"cannot write the export into --export {root}: {e.strerror} ({e.filename}); nothing "
                          f"was written: {root} keeps what it held") from None
    finally:
        _remove(stage)  # gone already once it is the commit


def _finish(root: Path, units: Iterable[str]) -> None:
    """Under the lock: move in what DIR/.specgen-commit holds (this run's, or one a kill stopped after its
    commit point), then remove the stages and temporary files killed runs left (none is alive)."""
    commit = root / COMMIT
    if commit.is_dir() and not commit.is_symlink():
        staged = [""] if (commit / MANIFEST).is_file() else sorted(
            d.name for d in commit.iterdir() if (d / MANIFEST).is_file())
        try:
            for unit in staged:
                _move_in(root, unit)
        except OSError as e:
            raise ExportError(f"cannot move the export into --export {root}: {e.strerror} ({e.filename}); it "
                              f"stays staged in {commit}: run the same command again to finish it") from None
        except (ValueError, KeyError, TypeError) as e:  # not a manifest a run of ours staged
            raise ExportError(f"{commit} holds no staged export ({type(e).__name__}: {e}): remove it and run "
                              "again") from None
    for p in [commit, *root.glob(f"{STAGE}*")]:
        _remove(p)
    _clean_temporaries(root, {_join(u, MANIFEST) for u in units})


def _move_in(root: Path, unit: str) -> None:
    """Move one arch's staged export into DIR/unit: its manifest first owns the old and the new files
    ("complete": false), then the files move, those the new export lacks go, and its manifest comes last."""
    folder, staged = root / unit, root / COMMIT / unit
    new = json.loads((staged / MANIFEST).read_text())
    files, old = set(new["files"]), _owned(root, unit) or set()
    _check(root, unit, files, old | files)  # nothing turned into a link since the run began
    atomic_write(folder / MANIFEST, _dump({**new, "complete": False, "files": sorted(old | files)}))
    for rel in sorted(files):
        if os.path.lexists(staged / rel):  # else moved in already, by the run a kill stopped
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            os.replace(staged / rel, folder / rel)
    for rel in sorted(old - files):
        (folder / rel).unlink(missing_ok=True)
        for sub in list(PurePosixPath(rel).parents)[:-1]:  # and the folders that leaves empty
            try:
                (folder / sub).rmdir()
            except OSError:
                break
    os.replace(staged / MANIFEST, folder / MANIFEST)


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path, ignore_errors=True)


def _dump(manifest: dict[str, object]) -> bytes:
    return (json.dumps(manifest, indent=2) + "\n").encode()


def export_arch(kernels: list[tuple[ModuleType, Target, CKernel]], out: Path) -> list[Exported]:
    """Export the kernels of one arch (each with its rendered module) into `out` (a stage): the C files
    and the manifest only when every kernel compiled."""
    cute_dir = out / "cute"
    cute_dir.mkdir(parents=True, exist_ok=True)
    done, results = [], []
    for module, t, kernel in kernels:
        start = time.perf_counter()
        try:
            for tag, config in kernel.configs:
                compile_config(module, kernel, tag, config.index, cute_dir)
        except Exception as e:  # the DSL's own message is the useful part
            first = next((ln for ln in f"{type(e).__name__}: {e}".splitlines() if ln.strip()), type(e).__name__)
            results.append(Exported(kernel.name, str(t), len(kernel.configs), time.perf_counter() - start, first[:300]))
            continue
        done.append(kernel)
        results.append(Exported(kernel.name, str(t), len(kernel.configs), time.perf_counter() - start))
    if done and not any(r.error for r in results):
        write(done, out)
    return results


def write(kernels: list[CKernel], out: Path) -> None:
    """specgen's files of the export into `out` (beside the DSL's cute/), then the manifest of every file there."""
    from specgen import __version__
    from specgen.runtime.cute import cutlass_version

    version = cutlass_version()
    for rel, text in render_files(kernels, version).items():
        atomic_write(out / rel, text.encode())
    (out / LIB).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(dsl_runtime_library(), out / LIB)
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file() and not p.is_symlink())
    manifest = {"generator": GENERATOR, "specgen": __version__, "nvidia_cutlass_dsl": version, "complete": True,
                "files": [f for f in files if f != MANIFEST], "kernels": [
        {"kernel": k.name, "function": k.function, "arch": k.arch,
         "parameters": [[c, n] for c, n in k.params],
         "configs": [{"tag": tag, "when": dict(c.bounds), "symbol_prefix": k.prefix(tag),
                      "object": f"cute/{k.name}_{tag}.o", "header": f"cute/{k.name}_{tag}.h"} for tag, c in k.configs]}
        for k in kernels]}
    atomic_write(out / MANIFEST, _dump(manifest))
