"""One spec, every backend, the same answer (backends.py lists the backends, cases.py the cases).

- `test_same_answer`: every backend runs every case its target admits against one float64 reference
  (specgen/kinds/gemm/testing/reference.py) on fresh seeded data, `out=` poisoned with NaN inside a NaN guard band, inputs
  left untouched; a case whose spec the backend's target cannot serve must be refused by `specgen
  check` with a rule id, never skipped, never run.
- `test_same_outcome_for_the_same_input`: the same torch inputs (legal views with odd strides and
  unaligned bases, wrong dtypes, majors, shapes, devices) give the same outcome class on every backend
  that runs here: a result, or the same exception type naming the same argument.

CPU backends run in CI; the `gpu`-marked ones in the GPU entry point (`nox -s gpu`). Each test records
its outcome (`passed`, or `refused RULE`) for the summary tests/conformance/conftest.py prints.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from specgen.kinds.gemm.testing.reference import REFERENCES

from .backends import BACKENDS, Backend, Built, build
from .cases import CONFORMANCE_CONFIG, SPECS, Case, compare, place, shapes, torch_dtype

# The interpreters evaluate in numpy, which warns on the specials' NaN and infinities (the point of them).
pytestmark = [pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")]

COMBOS = [("views", "specials"), ("dense", "random"), ("views", "random"), ("dense", "specials")]


def _cases() -> list:
    params = []
    for backend in BACKENDS:
        for key in SPECS:
            for i, shape in enumerate(shapes(key, backend.device)):
                layout, data = COMBOS[i % len(COMBOS)]
                bt, m, n, k = shape
                # one worker builds each (backend, spec) module: `-n N --dist loadgroup` spreads the compiles
                marks = [pytest.mark.xdist_group(f"{backend.id}-{key}")]
                marks += [pytest.mark.gpu] if backend.device == "cuda" else []
                params.append(pytest.param(backend, key, shape, layout, data, marks=marks,
                                           id=f"{backend.id}-{key}-{bt}x{m}x{n}x{k}-{layout}-{data}"))
    return params


_BUILT: dict[tuple[str, str], Built] = {}


def built(key: str, spec: dict, backend: Backend, folder: Path) -> Built:
    """The spec's module for the backend, built once per process."""
    if (key, backend.id) not in _BUILT:
        _BUILT[key, backend.id] = build(spec, backend, folder, CONFORMANCE_CONFIG[backend.target])
    return _BUILT[key, backend.id]


@pytest.fixture(scope="session")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("conformance")


def _device(backend: Backend) -> str:
    return "cuda" if backend.device == "cuda" else "cpu"


@pytest.mark.parametrize(("backend", "key", "shape", "layout", "data"), _cases())
def test_same_answer(backend: Backend, key: str, shape, layout: str, data: str, folder, record_property) -> None:
    b = built(key, SPECS[key], backend, folder)
    if b.refused:
        # A case the backend cannot run is refused by check, with rule ids: that is its conforming outcome.
        assert b.rules and all(re.fullmatch(r"[A-Z]+\d{3}", r) for r in b.rules), b.refused
        record_property("outcome", f"refused {','.join(b.rules)}")
        return
    spec = b.spec
    case = Case(spec, *shape, layout=layout, data=data, device=_device(backend))
    args, stores = case.inputs()
    before = [s.clone() for s in stores]
    kwargs = {}
    if backend.takes_out:
        out, out_store = case.out()
        kwargs["out"] = out
    result = b.fn(*(v for _, v in args), **kwargs)
    want_shape = (*case.lead, case.M, case.N)
    assert tuple(result.shape) == want_shape and result.dtype == torch_dtype(spec["out"]["dtype"])
    if backend.takes_out:
        assert result is out
        covered = torch.zeros(out_store.shape, dtype=torch.bool, device=out_store.device)
        covered.as_strided(out.shape, out.stride(), out.storage_offset()).fill_(True)
        assert out_store[~covered].isnan().all(), "the kernel wrote outside the output"
    for store, old in zip(stores, before, strict=True):
        assert torch.equal(store.view(torch.uint8), old.view(torch.uint8)), \
            "the kernel wrote to an input"
    named = dict(args)
    want = REFERENCES[spec["kind"]](spec["epilogue"], named["a"], named["b"], named)
    compare(result, want, spec, f"{backend.id} {key} {shape} {layout} {data}")
    record_property("outcome", "passed")


# ---------------------------------------------------------------------------------------------------
# The same input, the same outcome


def _uniform_spec(dtype: str) -> dict:
    """A spec with every kind of argument: A MN-major (its odd M makes rows no TMA can take), B K-major,
    a scalar, a column vector and a residual matrix."""
    from .cases import _plain

    spec = _plain(f"uniform_{dtype}", a={"dtype": dtype, "major": "mn"}, b={"dtype": dtype, "major": "k"},
                  out={"dtype": dtype}, epilogue=[{"op": "scale", "by": "scalar"},
                                                  {"op": "bias", "along": "n", "dtype": dtype},
                                                  {"op": "residual", "dtype": dtype, "beta": 1.0}])
    # CuTe's 128x128 one-warpgroup tile with this epilogue is over REG001's register line: a narrower tile
    spec["per_target"]["cute:sm90"]["tile"] = {"m": 128, "n": 64, "k": 64}
    return spec


UNIFORM_DTYPE = {"cpu": "f32", "cuda": "bf16"}  # what every backend of that device runs natively
M, N, K = 7, 24, 40


def _inputs(dtype: str, device: str) -> dict[str, object]:
    g = torch.Generator().manual_seed(11)
    dt = torch_dtype(dtype)
    return {"a": torch.randn(K, M, generator=g).to(dt).to(device).t(),  # MN-major: (M, K), M contiguous
            "b": torch.randn(N, K, generator=g).to(dt).to(device).t(),  # K-major: (K, N), K contiguous
            "alpha": 0.5,
            "bias": torch.randn(N, generator=g).to(dt).to(device),
            "c": torch.randn(M, N, generator=g).to(dt).to(device)}


def _views(x: dict[str, object]) -> dict[str, object]:
    y = dict(x)
    y["a"] = place(x["a"], -2, "views")[0]
    y["b"] = place(x["b"], -2, "views")[0]
    y["c"] = place(x["c"], -1, "views")[0]
    strided = torch.zeros(2 * N + 1, dtype=x["bias"].dtype, device=x["bias"].device)[1::2]
    strided.copy_(x["bias"])
    y["bias"] = strided
    return y


MUTATIONS = {
    "dense": lambda x: x,
    "views": _views,  # odd leading strides, bases one element off 16 bytes, a strided vector
    "vector_2d": lambda x: {**x, "bias": x["bias"].reshape(1, N)},
    "a_wrong_dtype": lambda x: {**x, "a": x["a"].float() if x["a"].dtype != torch.float32 else x["a"].double()},
    "b_wrong_major": lambda x: {**x, "b": x["b"].contiguous()},
    "a_wrong_major": lambda x: {**x, "a": x["a"].contiguous()},
    "b_wrong_k": lambda x: {**x, "b": x["b"][:-8]},
    "bias_short": lambda x: {**x, "bias": x["bias"][:-1]},
    "c_wrong_shape": lambda x: {**x, "c": x["c"][:, :-1]},
    "c_wrong_major": lambda x: {**x, "c": x["c"].t().contiguous().t()},
    "alpha_string": lambda x: {**x, "alpha": "0.5"},
    "a_not_a_tensor": lambda x: {**x, "a": x["a"].tolist()},
    "b_meta_device": lambda x: {**x, "b": x["b"].to("meta")},
}


def _outcome(fn, inputs: dict[str, object], name: str) -> tuple[str, ...]:
    try:
        result = fn(*inputs.values())
    except (TypeError, ValueError) as e:  # the guards' two classes; anything else fails the test
        message = str(e)
        assert message.startswith(f"{name}: "), message
        arg = re.search(r"argument '(\w+)'", message) or re.search(r"\b(\w+)\.shape\b", message)
        return (type(e).__name__, arg.group(1) if arg else "?")
    return ("ok", str(tuple(result.shape)))


@pytest.mark.parametrize("device", [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_same_outcome_for_the_same_input(device: str, mutation: str, folder, record_property) -> None:
    dtype = UNIFORM_DTYPE[device]
    spec = _uniform_spec(dtype)
    here = [b for b in BACKENDS if b.device == device]
    outcomes: dict[str, tuple[str, ...]] = {}
    for backend in here:
        b = built(f"uniform_{dtype}", spec, backend, folder)
        assert not b.refused, f"{backend.id} refuses the uniform spec: {b.refused}"
        assert not backend.dtypes.get(dtype), f"{backend.id} cannot run {dtype} natively"
        inputs = MUTATIONS[mutation](_inputs(dtype, device))
        outcomes[backend.id] = _outcome(b.fn, inputs, b.spec["name"])
    assert len(set(outcomes.values())) == 1, f"{mutation}: {outcomes}"
    (outcome,) = set(outcomes.values())
    if mutation in ("dense", "views", "vector_2d"):
        assert outcome[0] == "ok", outcomes
    else:
        assert outcome[0] in ("TypeError", "ValueError") and outcome[1] in {"a", "b", "bias", "c", "alpha"}, outcomes
    record_property("outcome", "passed")
