"""The tuner's cache: one JSON line per compile and per timing, appended and flushed as each lands (a
killed tune loses nothing; a re-run skips what is there; `--from-cache` chooses from it with no GPU).

A timing's key is (the kernel's semantics, target, shape, the candidate's whole effective config, the
incumbent's, GPU name, driver, library versions, and the timer's L2 flush where it is not the default
write flush, so keys from before the flush was a choice stay valid); a compile's drops the GPU. Keying by
semantics rather than the file's spec hash keeps entries valid after `--write` changes the config in the
spec."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from specgen.bench.timing import Flush
from specgen.spec.models import LayeredSpec


class Machine(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu: str
    driver: str | None = None
    versions: dict[str, str] = Field(default_factory=dict)
    l2_flush: Flush = "write"  # how the timer emptied the L2


class Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["compile", "time"]
    key: str
    semantics: str
    spec_hash: str  # the spec file's hash when measured (information; not part of the key)
    target: str
    config: dict[str, Any]  # the knobs
    config_key: str  # the candidate's whole effective config
    shape: tuple[int, ...] | None = None  # the problem's shape as its kind's Shape is a tuple
    incumbent_key: str = ""
    machine: Machine | None = None
    error: str = ""
    seconds: float = 0.0  # compile time
    ours_us: float = 0.0
    incumbent_us: float = 0.0
    peer_us: float = 0.0
    ratio: float = 0.0  # incumbent / candidate, paired per round
    ratio_lo: float = 0.0
    ratio_hi: float = 0.0
    ratio_peer: float = 0.0  # peer / candidate
    pairs: int = 0


def _sha(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:20]


def semantic_fields(spec: LayeredSpec) -> tuple[str, ...]:
    """The fields of the spec's kind that say what the kernel computes (not how): its spec model's
    `SEMANTIC_FIELDS`. A candidate config changes none of them, so its timings share the key."""
    fields = getattr(type(spec), "SEMANTIC_FIELDS", None)
    if not fields:
        raise TypeError(f"{type(spec).__name__} declares no SEMANTIC_FIELDS: the tuner cannot key its cache")
    return tuple(fields)


def semantics(spec: LayeredSpec) -> str:
    return _sha(spec.model_dump(mode="json", include=set(semantic_fields(spec))))


def compile_key(sem: str, target: str, config_key: str, versions: dict[str, str]) -> str:
    return _sha("compile", sem, target, config_key, versions)


def time_key(sem: str, target: str, shape: tuple[int, ...], config_key: str, incumbent_key: str,
             machine: Machine) -> str:
    m = machine.model_dump()
    if m["l2_flush"] == "write":  # the flush before it was a choice: the keys of those timings stay as they were
        del m["l2_flush"]
    return _sha("time", sem, target, list(shape), config_key, incumbent_key, m)


class CacheError(ValueError):
    """--cache names something that is not a tune cache (a folder, a binary or foreign file): the tuner
    neither reads it nor appends to it."""


_ENTRY_START = '{"kind":'  # how every line `put` writes begins (a damaged one too: a kill cuts its end)


class Cache:
    """Entries by key, read once; `put` appends one line and fsyncs it. A line cut short by a kill is
    skipped on the next read (the work it stood for is redone); lines of another specgen version (fields
    this one does not know) are skipped and counted; a file of anything else is refused (CacheError), so
    the tuner never appends to a user's file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: dict[str, Entry] = {}
        self.skipped = 0  # damaged lines (a kill mid-write)
        self.foreign_version = 0  # entries of another specgen version
        self._ends_open = False  # the file's last line has no line end (a kill): `put` starts a new line
        if not os.path.lexists(path):
            return
        if path.is_dir():
            raise CacheError(f"--cache {path} is a folder: name a file (the default is .specgen/tune-cache.jsonl)")
        try:
            if not stat.S_ISREG(path.stat().st_mode):
                raise CacheError(f"--cache {path} is not a regular file")
            data = path.read_bytes()
        except OSError as e:
            raise CacheError(f"cannot read --cache {path}: {e.strerror}") from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise CacheError(f"--cache {path} is not a specgen tune cache: byte {e.start} is not UTF-8 text (a "
                             "binary file?); name another file") from None
        self._ends_open = bool(text) and not text.endswith("\n")
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                found = json.loads(line)
            except ValueError:
                if line.startswith(_ENTRY_START):  # one of ours, cut short
                    self.skipped += 1
                    continue
                raise CacheError(f"--cache {path} is not a specgen tune cache: line {n} is not a JSON line; name "
                                 "another file") from None
            if not isinstance(found, dict) or not {"kind", "key"} <= found.keys():
                what = "a JSON object without a tuner entry's fields" if isinstance(found, dict) else \
                    f"a JSON {type(found).__name__.replace('dict', 'object').replace('list', 'array')}"
                raise CacheError(f"--cache {path} is not a specgen tune cache: line {n} holds {what}; name another file")
            try:
                e = Entry.model_validate(found)
            except ValueError:
                self.foreign_version += 1
                continue
            self.entries[e.key] = e

    def describe(self) -> str:
        """What the file holds, for a message that finds nothing in it."""
        if not os.path.lexists(self.path):
            return "does not exist (yet)"
        times = sum(e.kind == "time" for e in self.entries.values())
        said = f"holds {times} timing{'s' * (times != 1)} and {len(self.entries) - times} compile result" \
               f"{'s' * (len(self.entries) - times != 1)}"
        if self.foreign_version:
            said += f", and {self.foreign_version} entries of another specgen version (skipped)"
        return said

    def get(self, key: str) -> Entry | None:
        return self.entries.get(key)

    def put(self, entry: Entry) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write("\n" * self._ends_open + entry.model_dump_json() + "\n")  # a cut line is not continued
            f.flush()
            os.fsync(f.fileno())
        self._ends_open = False
        self.entries[entry.key] = entry

    def machines(self, sem: str, target: str) -> list[Machine]:
        """The machines that timed this kernel on this target, most recent last."""
        seen: list[Machine] = []
        for e in self.entries.values():
            if e.kind == "time" and e.semantics == sem and e.target == target and e.machine is not None:
                if e.machine in seen:
                    seen.remove(e.machine)
                seen.append(e.machine)
        return seen
