"""Write rendered files: deterministic bytes, write-if-different, atomic replacement, and a manifest
of the files render owns so that outputs no spec produces anymore are removed (and nothing else)."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

MANIFEST = "MANIFEST.json"


@dataclass
class WriteReport:
    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    @property
    def changed(self) -> list[str]:
        return self.written + self.removed


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def owned_files(out_dir: Path) -> list[str]:
    try:
        return list(json.loads((out_dir / MANIFEST).read_text())["files"])
    except (OSError, ValueError, KeyError, TypeError):
        return []


def write_outputs(out_dir: Path, files: dict[str, str], manifest: dict[str, object], check: bool) -> WriteReport:
    """files: path relative to out_dir -> text. With `check`, report what would change and write nothing."""
    report = WriteReport()
    previously_owned = set(owned_files(out_dir))
    everything = dict(files)
    everything[MANIFEST] = json.dumps({**manifest, "files": sorted(files)}, indent=2, sort_keys=True) + "\n"
    for rel in sorted(everything):
        path, data = out_dir / rel, everything[rel].encode()
        if path.is_file() and path.read_bytes() == data:
            report.unchanged.append(rel)
            continue
        report.written.append(rel)
        if not check:
            _atomic_write(path, data)
    for rel in sorted(previously_owned - set(files)):
        if (out_dir / rel).exists():
            report.removed.append(rel)
            if not check:
                (out_dir / rel).unlink()
    return report
