"""The one JSON schema of a `specgen bench` record (pydantic): where it ran (GPU, clocks, driver, library
versions, date) and one row per (kernel, target, shape) with both times, the paired ratio and its interval,
TFLOP/s and the share of the GPU's peak; an A/A row (the peer against itself) in every target's table.
`environment()` reads the machine (torch and nvidia-smi, imported and run only when called)."""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from specgen import __version__
from specgen.bench.stats import geomean
from specgen.bench.timing import Flush
from specgen.spec.load import quote

SCHEMA = "specgen.bench/1"


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Environment(Model):
    gpu: str
    sm_count: int | None = None
    sm_clock_mhz: int | None = None  # when the record was taken: the card throttles at its power cap
    max_sm_clock_mhz: int | None = None
    driver: str | None = None
    cuda: str | None = None
    versions: dict[str, str] = Field(default_factory=dict)  # library -> version, those installed
    python: str = ""
    specgen: str = __version__
    date: str = ""  # ISO date
    l2_flush: Flush = "write"  # how the timer emptied the L2 before each call


class Row(Model):
    kernel: str  # the spec's name, or the peer's for an A/A row
    target: str
    shape: tuple[int, ...]  # the problem's sizes, as its kind's record_shape gives them
    batch: int = 1
    kind: Literal["kernel", "aa"] = "kernel"
    peer: str
    spec_file: str = ""
    spec_hash: str = ""
    variant: str = ""  # which config the launcher picks for the shape ("default", "variant 0 (M <= 16)")
    ours_us: float
    peer_us: float
    ratio: float  # median over rounds of peer / ours: > 1, ours is faster
    ratio_lo: float
    ratio_hi: float
    pairs: int
    ours_tflops: float
    peer_tflops: float
    pct_peak: float | None = None  # ours as a share of the GPU's dense peak for the operands' width
    max_error: float = 0.0  # max |ours - peer| / max |peer| on the timed inputs
    ours_kernels: dict[str, float] = Field(default_factory=dict)
    peer_kernels: dict[str, float] = Field(default_factory=dict)

    @property
    def label(self) -> str:
        b = f"{self.batch}x" if self.batch > 1 else ""
        return f"{self.kernel} {b}{'x'.join(map(str, self.shape))}"


class BenchRecord(Model):
    schema_id: Literal["specgen.bench/1"] = Field(SCHEMA, alias="schema")
    environment: Environment
    rows: list[Row]
    failures: list[str] = []  # "kernel @ target shape: why" for each row that could not be timed

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def geomeans(self) -> dict[str, float]:
        """Per target: the geomean of its kernel rows' ratios (the A/A rows stay out)."""
        by: dict[str, list[float]] = {}
        for r in self.rows:
            if r.kind == "kernel":
                by.setdefault(r.target, []).append(r.ratio)
        return {t: geomean(v) for t, v in by.items()}

    def dump(self, path: Path) -> None:
        """Write the record atomically (a temporary file renamed over `path`: a reader never sees half)."""
        from specgen.render.writer import atomic_write

        atomic_write(path, (self.model_dump_json(indent=1, by_alias=True) + "\n").encode())

    @classmethod
    def read(cls, path: Path) -> BenchRecord:
        """The record at `path`; RecordError says what the file is where it is no record of this schema."""
        try:
            if path.is_dir():
                raise RecordError(f"{path} is a folder, not a bench record (`specgen bench --json FILE` writes one)")
            if path.exists() and not path.is_file():  # a FIFO or a device would block or never end
                raise RecordError(f"{path} is not a regular file, not a bench record")
            data = path.read_bytes()
        except OSError as e:
            raise RecordError(f"cannot read {path}: {e.strerror}") from None
        try:
            found = json.loads(data)
        except (UnicodeDecodeError, ValueError):
            raise RecordError(f"{path} is not a bench record: not JSON text") from None
        if not isinstance(found, dict) or found.get("schema") != SCHEMA:
            what = f"its schema is {quote(found.get('schema'))}" if isinstance(found, dict) and "schema" in found \
                else f"it holds {'a JSON object without a schema' if isinstance(found, dict) else 'a JSON ' + type(found).__name__}"
            raise RecordError(f"{path} is not a {SCHEMA} record written by `specgen bench --json` ({what})")
        try:
            return cls.model_validate(found)
        except ValueError as e:
            first = e.errors()[0] if hasattr(e, "errors") else {"loc": (), "msg": str(e)}
            where = ".".join(map(str, first["loc"]))
            raise RecordError(f"{path} is a {SCHEMA} record this specgen cannot read ({where}: {first['msg']}): "
                              "written by another version?") from None


class RecordError(ValueError):
    """A file given as a bench record is not one (missing, a folder, not JSON, another schema)."""


def tflops(flops: float, us: float) -> float:
    """TFLOP/s of `flops` (the problem's, as its kind counts them) done in `us` microseconds."""
    return flops / (us * 1e-6) / 1e12


def library_versions() -> dict[str, str]:
    """The installed versions of what the rendering designs run on (each design's `libraries`)."""
    from specgen.registry import rendering

    found = {}
    for name in dict.fromkeys(lib for d in rendering() for lib in d.libraries):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def _smi() -> dict[str, str]:
    if shutil.which("nvidia-smi") is None:
        return {}
    fields = "driver_version,clocks.sm,clocks.max.sm"
    try:
        line = subprocess.run(["nvidia-smi", "-i", "0", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=30, check=True).stdout.strip().splitlines()[0]
    except (subprocess.SubprocessError, OSError, IndexError):
        return {}
    return dict(zip(fields.split(","), (v.strip() for v in line.split(",")), strict=False))


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def environment(l2_flush: Flush = "write") -> Environment:
    """The machine a timing runs on (needs torch with CUDA), and the L2 flush its timer used."""
    import torch

    props = torch.cuda.get_device_properties(0)
    smi = _smi()
    return Environment(gpu=props.name, sm_count=props.multi_processor_count, sm_clock_mhz=_int(smi.get("clocks.sm")),
                       max_sm_clock_mhz=_int(smi.get("clocks.max.sm")), driver=smi.get("driver_version"),
                       cuda=torch.version.cuda, versions=library_versions(), python=platform.python_version(),
                       date=datetime.date.today().isoformat(), l2_flush=l2_flush)
