"""The grouped Pallas TPU design's rules on each side of their boundaries: its own (GRP201, GRP204, GRP205; GRP203, which refused groups along K, retired) and the dense Pallas TPU
design's that it lists (DT003, VMEM001 over the grouped VMEM model, PAL001-PAL003: the same rules, concerning both
kinds), in tests/test_rules.py's case form (rule, target, spec overrides, expected) over a grouped TPU spec; and
the VMEM model's figures, the options section, the design's place in the registry and the rule table."""

from __future__ import annotations

import copy

import pytest
from pydantic import ValidationError

from specgen.kinds.gemm.testing.rules import tile
from specgen.kinds.grouped.designs.pallas.design import DESIGN, tpu_memory
from specgen.kinds.grouped.spec import GroupedSpec
from specgen.registry import design_for
from specgen.resolve import resolve
from specgen.rules.table import RULES, run_rules
from specgen.spec.models import parse_target
from specgen.targets import TARGETS

BASE: dict = {
    "name": "grouped_tpu", "kind": "grouped",
    "a": {"dtype": "bf16", "major": "k"}, "b": {"dtype": "bf16", "major": "k"}, "out": {"dtype": "bf16"},
    "tile": {"m": 128, "n": 256, "k": 256}, "targets": ["pallas:tpu_v5e"],
}
UNTOUCHED = {"groups": {"index": "sizes", "tail": "untouched"}}
ZERO = {"groups": {"index": "sizes", "tail": "zero"}}
GROUP_BIAS = {"epilogue": [{"op": "bias", "dtype": "bf16"}]}
SWIGLU = {"op": "gated", "fn": "silu", "layout": "halves"}
RULE = {r.id: r for r in RULES}
# an fp8 forward with the rowwise scales (e5m2: DT003 lets v5e multiply it)
FP8 = {"a": {"dtype": "fp8_e5m2", "major": "k"}, "b": {"dtype": "fp8_e5m2", "major": "k"},
       "epilogue": [{"op": "scale", "by": "rowcol"}]}

# VMEM001 at v5p's 64 MiB: 2 x (2048x1024 + 1024x2048) bf16 A/B = 16 MiB, the f32 accumulator 16 MiB, the output
# block 2 x 8 MiB and, for an untouched tail, the caller's out block 2 x 8 MiB more: 64 MiB exactly; a per-group
# bias row adds 2 x 32 B x 2048 lanes.
BIG = tile(2048, 2048, 1024)
CASES: list[tuple[str, str, dict, object]] = [
    ("GRP201", "pallas:tpu_v5e", {"accumulator": "f32"}, None),
    ("GRP201", "pallas:tpu_v6e", {"accumulator": "f16", "a": {"dtype": "f16", "major": "k"}, "b": {"dtype": "f16"}},
     ("error", ["accumulator = f16: the pallas:tpu_v6e grouped kernel accumulates in an f32 VMEM scratch "
                "(128x256 x 4 B = 131072 B)"], ("accumulator",))),
    # fp8 operands on the grouped TPU kernel: the MXU's formats decide (DT003, the dense rule: e5m2 before v7x, e4m3
    # and e5m2 on v7x, one of each too); GRP202, which refused every fp8 operand and (G, N) column scale, is retired
    ("DT003", "pallas:tpu_v5e", {"a": {"dtype": "fp8_e5m2", "major": "k"}, "b": {"dtype": "fp8_e5m2"},
                                 "tile": tile(32, 128, 128), "epilogue": [{"op": "scale", "by": "rowcol"}]}, None),
    ("DT003", "pallas:tpu_v5e", {"a": {"dtype": "fp8_e4m3", "major": "k"}, "b": {"dtype": "fp8_e5m2"},
                                 "tile": tile(32, 128, 128)},
     ("error", ["A is fp8_e4m3: tpu_v5e MXU takes fp8 as fp8_e5m2 only"], ("a", "dtype"))),
    ("DT003", "pallas:tpu_v7x", {"a": {"dtype": "fp8_e4m3", "major": "k"}, "b": {"dtype": "fp8_e5m2"},
                                 "tile": tile(32, 256, 256), "epilogue": [{"op": "scale", "by": "col"}]}, None),
    ("VMEM001", "pallas:tpu_v5p", {"tile": BIG, **UNTOUCHED}, None),
    ("VMEM001", "pallas:tpu_v5p", {"tile": BIG, **ZERO, **GROUP_BIAS}, None),
    ("VMEM001", "pallas:tpu_v5p", {"tile": BIG, **UNTOUCHED, **GROUP_BIAS},
     ("error", ["needs 67239936 B of VMEM > 67108864 B on tpu_v5p",
                "A/B 2 x 8388608 = 16777216 + epilogue 33554432 + accumulator+vectors 16908288"], ("tile",))),
    # ragged K (groups along K, out (G, M, N)): no base block (every out[g] is written), so 2048x2048x2048 fits v5p's
    # 64 MiB exactly: 2 x (2048x2048 + 2048x2048) bf16 A/B = 32 MiB, the accumulator 16 MiB, the output block 2 x 8 MiB;
    # the per-group bias row adds 2 x 32 B x 2048 lanes
    ("VMEM001", "pallas:tpu_v5p", {"tile": tile(2048, 2048, 2048), "groups": {"ragged": "k"}}, None),
    ("VMEM001", "pallas:tpu_v5p", {"tile": tile(2048, 2048, 2048), "groups": {"ragged": "k"}, **GROUP_BIAS},
     ("error", ["needs 67239936 B of VMEM > 67108864 B on tpu_v5p",
                "A/B 2 x 16777216 = 33554432 + epilogue 16777216 + accumulator+vectors 16908288"], ("tile",))),
    # the base: 2 x (128x256 + 256x256) bf16 A/B + 4 x 128x256 bf16 output and base blocks + the f32 accumulator
    ("VMEM001", "pallas:tpu_v5e", {"pallas": {"vmem_limit_bytes": 786432}}, None),
    ("VMEM001", "pallas:tpu_v5e", {"pallas": {"vmem_limit_bytes": 786431}},
     ("error", ["pallas.vmem_limit_bytes = 786431 < 786432 B the plan needs"], ("pallas", "vmem_limit_bytes"))),
    # gated: the up block and accumulator too, 2 x (128x256 + 2 x 256x256) bf16 + 4 x 128x256 bf16 + 2 x 128x256 f32
    ("VMEM001", "pallas:tpu_v5e", {"epilogue": [SWIGLU], "pallas": {"vmem_limit_bytes": 1179648}}, None),
    ("VMEM001", "pallas:tpu_v5e", {"epilogue": [SWIGLU], "pallas": {"vmem_limit_bytes": 1179647}},
     ("error", ["pallas.vmem_limit_bytes = 1179647 < 1179648 B the plan needs"], ("pallas", "vmem_limit_bytes"))),
    # GRP204: a gated B as halves, K-major or N-major (N a multiple of tile.n: the launcher's check)
    ("GRP204", "pallas:tpu_v6e", {"epilogue": [{**SWIGLU, "fn": "gelu_tanh"}, {"op": "bias", "dtype": "bf16"}]}, None),
    ("GRP204", "pallas:tpu_v6e", {"epilogue": [{**SWIGLU, "layout": "interleaved"}]},
     ("error", ["a gated epilogue (silu, interleaved)", "which TPU blocks (8 x 128 tiles) do not take"],
      ("epilogue", 0, "layout"))),
    ("GRP204", "pallas:tpu_v5e", {"a": {"dtype": "f32", "major": "k"}, "b": {"dtype": "f32", "major": "mn"},
                                  "out": {"dtype": "f32"}, "epilogue": [SWIGLU]}, None),
    # GRP205: an fp8 forward's backward reads the 8-bit A in wgrad's blocks, tile.k rows of it on the sublanes
    ("GRP205", "pallas:tpu_v5e", {**FP8, "training": {"save": "preact", "wgrad": {"tile": tile(128, 128, 32)}}}, None),
    ("GRP205", "pallas:tpu_v5e", {**FP8, "training": {"save": "preact", "wgrad": {"tile": tile(128, 128, 16)}}},
     ("error", ["training.wgrad: the backward reads A (fp8_e5m2) as stored in blocks of 16 rows (tile.k = 16)",
                "32-row sublane tile"], ("training", "wgrad", "tile", "k"))),
    ("PAL001", "pallas:tpu_v5e", {"tile": tile(8, 128, 128)}, None),
    ("PAL001", "pallas:tpu_v5e", {"tile": tile(128, 256, 64)},
     ("error", ["A block 128x64 (bf16) is not divisible by (8, 128) on tpu_v5e"], ("tile",))),
    ("PAL001", "pallas:tpu_v5e", {"b": {"dtype": "bf16", "major": "mn"}, "tile": tile(128, 64, 128)},
     ("error", ["B block 128x64 (bf16) is not divisible by (8, 128) on tpu_v5e"], ("tile",))),
    ("DT003", "pallas:tpu_v5e", {"a": {"dtype": "f32", "major": "k"}, "b": {"dtype": "f32"}, "out": {"dtype": "f32"}}, None),
    ("DT003", "pallas:tpu_v5e", {"a": {"dtype": "f16", "major": "k"}, "b": {"dtype": "f16"}},
     ("error", ["A is f16: the TPU MXU has no f16 mode"], ("a", "dtype"))),
    ("PAL002", "pallas:tpu_v6e", {}, None),
    ("PAL002", "pallas:tpu_v6e", {"tile": tile(128, 128, 256)},
     ("warning", ["tile n=128, k=256 are not multiples of the 256x256 MXU on tpu_v6e"], ("tile",))),
    ("PAL003", "pallas:tpu_v7x", {"pipeline": {"ab_stages": 1}}, None),
    ("PAL003", "pallas:tpu_v7x", {"pipeline": {"ab_stages": 3}},
     ("error", ["pipeline.ab_stages = 3: Pallas TPU buffers a block 1 or 2 deep"], ("pipeline", "ab_stages"))),
]


def grouped(target: str, **overrides: object) -> GroupedSpec:
    d = copy.deepcopy(BASE)
    d.update(copy.deepcopy(overrides))
    d["targets"] = [target]
    return GroupedSpec.model_validate(d)


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_rule_boundary(case):
    rule_id, target, overrides, expected = case
    rule = RULE[rule_id]
    assert "grouped" in rule.kinds and rule.applies(parse_target(target))
    found = [f for f in rule.fn(resolve(grouped(target, **overrides), parse_target(target)))
             if f.near is None or not f.near.accepted]
    if expected is None:
        assert found == []
        return
    severity, fragments, fld = expected
    match = [f for f in found if all(frag in f.message for frag in fragments)]
    assert match, [f.message for f in found]
    assert (match[0].rule, match[0].severity, match[0].field) == (rule_id, severity, fld)


def test_every_rule_of_the_design_has_both_sides():
    from specgen.kinds.grouped.designs.pallas import rules

    ids = {r.id for r in rules.RULES}
    assert {c[0] for c in CASES if c[3] is None} == {c[0] for c in CASES if c[3] is not None} == ids
    # the dense rules are the same Rule objects, now concerning both kinds
    assert all(set(RULE[i].kinds) == {"gemm", "grouped"} for i in ids - {"GRP201", "GRP204", "GRP205"})
    assert RULE["GRP201"].kinds == RULE["GRP204"].kinds == RULE["GRP205"].kinds == ("grouped",)
    assert "GRP203" not in RULE  # retired: the kernel renders groups along K (test_grouped_tpu_k.py)


def test_the_design_serves_the_tpu_targets_only():
    tpu = {name for name, info in TARGETS.items() if info.memory == "vmem"}
    assert {name for name in TARGETS if design_for("grouped", name) is DESIGN} == tpu


def test_the_shipped_chain_checks_clean_on_every_tpu_generation():
    for target in ("pallas:tpu_v5e", "pallas:tpu_v5p", "pallas:tpu_v6e", "pallas:tpu_v7x"):
        spec = grouped(target, epilogue=[{"op": "bias", "dtype": "bf16"}, {"op": "activation", "fn": "silu"}])
        assert [f for f in run_rules(resolve(spec, parse_target(target))) if f.severity == "error"] == []


def test_vmem_model_counts_the_untouched_base_block_and_the_vectors():
    """Untouched: the caller's out block beside the output (both double-buffered); a per-row scale a (128-lane)
    column per row, a per-group bias row one (sublane, 128) tile of 32 B rows."""
    t = tile(128, 256, 256)
    zero = tpu_memory(grouped("pallas:tpu_v5e", tile=t, **ZERO), 1 << 27, 2)
    untouched = tpu_memory(grouped("pallas:tpu_v5e", tile=t, **UNTOUCHED), 1 << 27, 2)
    assert untouched.total - zero.total == 2 * 128 * 256 * 2
    assert zero.total == 2 * (128 * 256 * 2 + 256 * 256 * 2) + 2 * 128 * 256 * 2 + 128 * 256 * 4
    vectors = tpu_memory(grouped("pallas:tpu_v5e", tile=t, **ZERO, epilogue=[
        {"op": "bias", "dtype": "f32"}, {"op": "scale", "by": "row"}, {"op": "scale", "by": "scalar", "name": "alpha"}]),
        1 << 27, 2)
    assert vectors.total - zero.total == 2 * (32 * 256) + 2 * (128 * 128 * 4)  # the scalar sits in SMEM
    # gated: the up block beside the gate block (each double-buffered) and the up accumulator beside the gate's
    for stages in (1, 2):
        gated = tpu_memory(grouped("pallas:tpu_v5e", tile=t, **ZERO, epilogue=[SWIGLU]), 1 << 27, stages)
        plain = tpu_memory(grouped("pallas:tpu_v5e", tile=t, **ZERO), 1 << 27, stages)
        assert gated.total - plain.total == stages * 256 * 256 * 2 + 128 * 256 * 4


def test_the_options_section_takes_the_vmem_limit_only():
    assert grouped("pallas:tpu_v5e", pallas={"vmem_limit_bytes": 1 << 20}).pallas.vmem_limit_bytes == 1 << 20
    with pytest.raises(ValidationError, match="swap_ab"):
        grouped("pallas:tpu_v5e", pallas={"swap_ab": True})
