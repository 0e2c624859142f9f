"""Every envelope rule on each side of its boundary, with the numbers its message compares, and the
budget that `check` and the planner's `auto` stages share (HARDWARE.md's worked examples). The shared
rules' cases are here; each design's own rules' cases sit beside its tests (tests/backends/*/rule_cases*.py)
and are collected into the same table."""

from __future__ import annotations

import copy
import dataclasses
import importlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kernels import MINIMAL_SPEC
from pydantic import TypeAdapter

from specgen.envelope.budget import MIN_STAGES
from specgen.kinds.gemm.designs.cute_sm100.design import tmem_columns
from specgen.kinds.gemm.spec import GemmSpec
from specgen.kinds.gemm.stages import max_ab_stages, resolve_ab_stages, resolve_acc_stages
from specgen.kinds.gemm.stages import memory as smem_budget
from specgen.kinds.gemm.testing.rules import F16, FP8, tile
from specgen.kinds.lineup import KINDS
from specgen.kinds.models import KernelSpec
from specgen.registry import design_for
from specgen.resolve import resolve as rule_context
from specgen.rules.table import RULES, RuleContext, run_rules
from specgen.spec.epilogue import gated_op
from specgen.spec.load import load_paths
from specgen.spec.models import parse_target
from specgen.spec.targets import ALL_TARGETS
from specgen.targets import SM90, SM100, TPUS, target_info

ROOT = Path(__file__).resolve().parents[1]
RULE = {r.id: r for r in RULES}




def spec(**overrides: object) -> GemmSpec:
    """MINIMAL_SPEC with `overrides`, as its kind's model (a case of another kind's rules sets `kind`)."""
    d = copy.deepcopy(MINIMAL_SPEC)
    d.update(copy.deepcopy(overrides))
    return TypeAdapter(KernelSpec).validate_python(d)


def ctx_for(target: str, **overrides: object) -> RuleContext:
    return rule_context(spec(**overrides), parse_target(target))


def findings(rule_id: str, ctx: RuleContext):
    rule = RULE[rule_id]
    assert rule.applies(ctx.target), f"{rule_id} does not apply to {ctx.target}"
    return [f for f in rule.fn(ctx) if f.near is None or not f.near.accepted]  # the model's: no near accept


# --- which targets each rule concerns ------------------------------------------------------------------
GPU = {"triton:sm90", "triton:sm100", "cute:sm90", "cute:sm100", "pallas:gpu_sm90"}
TPU = {"pallas:tpu_v5e", "pallas:tpu_v5p", "pallas:tpu_v6e", "pallas:tpu_v7x"}
TRITON = {"triton:sm90", "triton:sm100"}
WGMMA = {"cute:sm90", "pallas:gpu_sm90"}
APPLIES = {
    "DT001": GPU, "DT002": TRITON, "DT003": TPU, "DT004": GPU | TPU, "DT005": GPU | TPU, "MAJ001": WGMMA, "MMA001": WGMMA,
    "MMA002": {"cute:sm100"}, "MMA003": TRITON, "MMA004": TRITON, "POW001": TRITON, "SMEM001": GPU, "VMEM001": TPU,
    "TMEM001": {"cute:sm100"}, "TMA001": GPU, "TMA002": {"cute:sm90", "cute:sm100", "pallas:gpu_sm90"},
    "CLU001": GPU, "CLU002": {"cute:sm100"}, "REG001": TRITON | WGMMA,
    "CUTE001": {"cute:sm90"}, "CUTE002": {"cute:sm90"}, "CUTE003": {"cute:sm90"},
    "CUTE004": {"cute:sm90"}, "CUTE005": {"cute:sm90"}, "CUTE101": {"cute:sm100"}, "CUTE102": {"cute:sm100"}, "CUTE103": {"cute:sm100"},
    "CUTE104": {"cute:sm100"}, "CUTE105": {"cute:sm100"}, "CUTE106": {"cute:sm100"},
    "EPI001": set(), "EPI002": TRITON, "EPI003": {"cute:sm90", "cute:sm100"},  # EPI001: every design renders it
    "GRP001": TRITON | TPU | {"cute:sm90", "cute:sm100", "pallas:gpu_sm90"},
    "GRP002": TRITON | TPU | {"cute:sm90", "cute:sm100", "pallas:gpu_sm90"},
    "GRP003": TRITON | TPU | {"cute:sm90", "cute:sm100", "pallas:gpu_sm90"}, "GRP101": TRITON, "GRP102": TRITON,
    "GRP103": TRITON, "GRP201": TPU, "GRP204": TPU, "GRP205": TPU,
    "GRP301": {"cute:sm90"}, "GRP302": {"cute:sm90"}, "GRP401": {"cute:sm100"}, "GRP402": {"cute:sm100"},
    "MGP001": {"pallas:gpu_sm90"}, "MGP002": {"pallas:gpu_sm90"}, "MGP003": {"pallas:gpu_sm90"},
    "PAL001": TPU, "PAL002": TPU,
    "PAL003": TPU, "PAL004": {"pallas:gpu_sm90"}, "PAL005": {"pallas:gpu_sm90"}, "PAL006": {"pallas:gpu_sm90"},
    "PAL007": {"pallas:gpu_sm90"}, "PAL008": {"pallas:gpu_sm90"}, "PAL009": {"pallas:gpu_sm90"},
    "PAL010": {"pallas:gpu_sm90"}, "PAL011": TPU, "PAL012": {"pallas:gpu_sm90"}, "PAL013": TPU, "PAL014": TPU, "PAL015": TPU, "TRN001": (GPU - TRITON) | TPU,
    "SPK001": (GPU - TRITON - {"cute:sm90"}) | TPU, "SPK002": TRITON, "SPK003": TRITON, "OPT001": GPU | TPU,
}


def test_the_rule_table_is_the_documented_one():
    assert [r.id for r in RULES] == list(APPLIES)
    for r in RULES:
        assert r.fn.__doc__ and r.title, f"{r.id} needs a title and a docstring citing its source"


@pytest.mark.parametrize("rule_id", list(APPLIES))
def test_where_each_rule_applies(rule_id):
    assert {t for t in ALL_TARGETS if RULE[rule_id].applies(parse_target(t))} == APPLIES[rule_id]


# --- each rule on each side of its boundary ------------------------------------------------------------
# (rule, target, spec overrides, expected): expected None = the rule finds nothing; otherwise
# (severity, [fragments the message must hold], field or None).
CASES: list[tuple[str, str, dict, object]] = [
    # DT001: A and B share a dtype (fp8 may mix); the accumulator is one the MMA produces
    ("DT001", "triton:sm90", {}, None),
    ("DT001", "triton:sm90", {"b": {"dtype": "f16"}}, ("error", ["A is bf16 but B is f16"], ("b", "dtype"))),
    ("DT001", "cute:sm90", {"a": {"dtype": "fp8_e4m3"}, "b": {"dtype": "fp8_e5m2"}}, None),
    ("DT001", "cute:sm90", {"a": {"dtype": "fp8_e4m3"}, "b": {"dtype": "int8"}},
     ("error", ["A is fp8_e4m3 but B is int8"], ("b", "dtype"))),
    ("DT001", "cute:sm90", {**F16, "accumulator": "f16"}, None),
    ("DT001", "cute:sm90", {"accumulator": "f16"},
     ("error", ["bf16 operands accumulate in f32 on cute:sm90, not f16"], ("accumulator",))),
    ("DT001", "cute:sm100", {**FP8, "accumulator": "f16"}, None),
    ("DT001", "cute:sm100", {**FP8, "accumulator": "int32"},
     ("error", ["fp8_e4m3 operands accumulate in f16/f32 on cute:sm100, not int32"], ("accumulator",))),
    ("DT001", "cute:sm100", {"a": {"dtype": "tf32"}, "b": {"dtype": "tf32"}}, None),
    ("DT001", "cute:sm100", {"a": {"dtype": "f32"}, "b": {"dtype": "f32"}},
     ("error", ["cute:sm100 has no tensor-core MMA for f32 operands"], ("a", "dtype"))),
    ("DT001", "pallas:gpu_sm90", {"a": {"dtype": "int8"}, "b": {"dtype": "int8"}, "accumulator": "int32"}, None),
    ("DT001", "triton:sm100", {"a": {"dtype": "int8"}, "b": {"dtype": "int8"}, "accumulator": "f32"},
     ("error", ["int8 operands accumulate in int32 on triton:sm100, not f32"], ("accumulator",))),
    ("DT001", "triton:sm90", {**F16, "accumulator": "f16"}, None),
    ("DT001", "triton:sm90", {**FP8, "accumulator": "f16"},
     ("error", ["fp8_e4m3 operands accumulate in f32 on triton:sm90, not f16"], ("accumulator",))),
    # DT004: integer operands accumulate in int32, float ones in a float type
    ("DT004", "pallas:tpu_v5e", {"a": {"dtype": "int8"}, "b": {"dtype": "int8"}, "accumulator": "int32"}, None),
    ("DT004", "pallas:tpu_v5e", {"a": {"dtype": "int8"}, "b": {"dtype": "int8"}},
     ("error", ["int8 operands cannot accumulate in f32"], ("accumulator",))),
    ("DT004", "triton:sm90", {**F16, "accumulator": "f16"}, None),
    ("DT004", "triton:sm90", {"accumulator": "bf16"}, ("error", ["bf16 operands cannot accumulate in bf16"], None)),
    ("DT004", "cute:sm90", {"accumulator": "int32"}, ("error", ["bf16 operands cannot accumulate in int32"], None)),
    ("DT004", "cute:sm90", {"accumulator": "fp8_e4m3"}, ("error", ["cannot accumulate in fp8_e4m3"], None)),
    ("DT004", "pallas:tpu_v6e", {"a": {"dtype": "f32"}, "b": {"dtype": "f32"}}, None),
    # tf32 is an operand format (f32 storage read by the tensor cores), never an accumulator
    ("DT004", "pallas:tpu_v6e", {"a": {"dtype": "f32"}, "b": {"dtype": "f32"}, "accumulator": "tf32"},
     ("error", ["f32 operands cannot accumulate in tf32"], ("accumulator",))),
    # DT005: a float GEMM stores floats (f32, f16, bf16, fp8); an integer GEMM keeps int32; tf32 is never stored
    ("DT005", "triton:sm90", {**FP8, "out": {"dtype": "bf16"}}, None),
    ("DT005", "cute:sm90", {**FP8, "out": {"dtype": "fp8_e4m3"}}, None),
    ("DT005", "triton:sm90", {**FP8, "out": {"dtype": "int8"}},
     ("error", ["out is int8 but A and B are fp8_e4m3 x fp8_e4m3: a float GEMM's output is float: f32, f16 or bf16 "
                "(or fp8 e4m3/e5m2); specgen has no quantizing epilogue (scale, round, saturate) yet"], ("out", "dtype"))),
    ("DT005", "cute:sm90", {**FP8, "out": {"dtype": "int8"}}, ("error", ["out is int8 but A and B"], ("out", "dtype"))),
    ("DT005", "cute:sm100", {"out": {"dtype": "int32"}},
     ("error", ["out is int32 but A and B are bf16 x bf16", "no quantizing epilogue"], ("out", "dtype"))),
    ("DT005", "pallas:gpu_sm90", {**F16, "out": {"dtype": "int8"}}, ("error", ["out is int8 but A and B are f16"],
                                                                    ("out", "dtype"))),
    ("DT005", "pallas:tpu_v6e", {"a": {"dtype": "f32"}, "b": {"dtype": "f32"}, "out": {"dtype": "int32"}},
     ("error", ["out is int32 but A and B are f32 x f32"], ("out", "dtype"))),
    ("DT005", "cute:sm100", {"a": {"dtype": "int8"}, "b": {"dtype": "int8"}, "accumulator": "int32",
                             "out": {"dtype": "int32"}}, None),  # an integer GEMM: int8 x int8 -> int32
    ("DT005", "pallas:tpu_v5e", {"a": {"dtype": "int8"}, "b": {"dtype": "int8"}, "accumulator": "int32",
                                 "out": {"dtype": "int32"}}, None),
    # tf32 operands keep their meaning (f32 data the MMA reads at tf32 precision); stored, tf32 has none
    ("DT005", "triton:sm100", {"a": {"dtype": "tf32"}, "b": {"dtype": "tf32"}, "out": {"dtype": "f32"}}, None),
    ("DT005", "triton:sm100", {"a": {"dtype": "tf32"}, "b": {"dtype": "tf32"}, "out": {"dtype": "tf32"}},
     ("error", ["out is tf32: tf32 is a compute format", "not a storage type"], ("out", "dtype"))),
    ("DT005", "cute:sm90", {"a": {"dtype": "int8"}, "b": {"dtype": "int8"}, "accumulator": "int32",
                            "out": {"dtype": "tf32"}}, ("error", ["out is tf32"], ("out", "dtype"))),
    ("DT005", "pallas:tpu_v7x", {"epilogue": [{"op": "bias", "dtype": "f32"}, {"op": "residual", "dtype": "bf16"},
                                              {"op": "cast", "dtype": "f16"}]}, None),
    ("DT005", "pallas:tpu_v7x", {"epilogue": [{"op": "bias", "dtype": "tf32"}]},
     ("error", ["bias 'bias' is tf32: tf32 is a compute format"], ("epilogue", 0, "dtype"))),
    ("DT005", "cute:sm100", {"epilogue": [{"op": "bias"}, {"op": "residual", "dtype": "tf32", "name": "skip"}]},
     ("error", ["residual 'skip' is tf32", "not a storage type"], ("epilogue", 1, "dtype"))),
    ("DT005", "triton:sm90", {"epilogue": [{"op": "cast", "dtype": "tf32"}]},
     ("error", ["cast to tf32: tf32 is a compute format"], ("epilogue", 0, "dtype"))),
    ("DT005", "pallas:gpu_sm90", {"epilogue": [{"op": "cast", "dtype": "int8"}]},
     ("error", ["cast to int8 in a float GEMM's epilogue", "no quantizing epilogue (scale, round, saturate)"],
      ("epilogue", 0, "dtype"))),
    ("DT005", "triton:sm90", {"a": {"dtype": "int8"}, "b": {"dtype": "int8"}, "accumulator": "int32",
                              "out": {"dtype": "int32"}, "epilogue": [{"op": "cast", "dtype": "int32"}]},
     None),  # an integer GEMM's chain is left as it was
    # MAJ001: wgmma transposes only 16-bit operands
    ("MAJ001", "cute:sm90", {"a": {"dtype": "bf16", "major": "mn"}, "b": {"dtype": "bf16", "major": "mn"}}, None),
    ("MAJ001", "pallas:gpu_sm90", {**FP8, "b": {"dtype": "fp8_e4m3", "major": "mn"}},
     ("error", ["B is fp8_e4m3 and MN-major: wgmma transposes only 16-bit operands"], ("b", "major"))),
    ("MAJ001", "cute:sm90", {"a": {"dtype": "tf32", "major": "mn"}, "b": {"dtype": "tf32"}},
     ("error", ["A is tf32 and MN-major"], ("a", "major"))),
    ("MAJ001", "cute:sm90", {"a": {"dtype": "int8"}, "b": {"dtype": "int8"}, "accumulator": "int32"}, None),
    # MMA001: wgmma M multiple of 64, N 8..256 step 8, K 32 bytes
    ("MMA001", "cute:sm90", {"tile": tile(64, 8, 16)}, None),
    ("MMA001", "cute:sm90", {"tile": tile(192, 256, 64)}, None),
    ("MMA001", "cute:sm90", {"tile": tile(96, 128, 64)},
     ("error", ["tile.m = 96 is not a multiple of 64 (wgmma M per warpgroup)"], ("tile", "m"))),
    ("MMA001", "cute:sm90", {"tile": tile(128, 264, 64)},
     ("error", ["tile.n = 264 is outside wgmma N 8..256 step 8"], ("tile", "n"))),
    ("MMA001", "cute:sm90", {"tile": tile(128, 132, 64)}, ("error", ["tile.n = 132 is outside"], ("tile", "n"))),
    ("MMA001", "cute:sm90", {"tile": tile(128, 128, 24)},
     ("error", ["tile.k = 24 is not a multiple of 16 (wgmma K for bf16)"], ("tile", "k"))),
    ("MMA001", "cute:sm90", {**FP8, "tile": tile(128, 128, 32)}, None),
    ("MMA001", "cute:sm90", {**FP8, "tile": tile(128, 128, 48)},
     ("error", ["tile.k = 48 is not a multiple of 32 (wgmma K for fp8_e4m3)"], ("tile", "k"))),
    ("MMA001", "pallas:gpu_sm90", {"a": {"dtype": "tf32"}, "b": {"dtype": "tf32"}, "tile": tile(64, 64, 8)}, None),
    ("MMA001", "pallas:gpu_sm90", {"a": {"dtype": "tf32"}, "b": {"dtype": "tf32"}, "tile": tile(64, 64, 12)},
     ("error", ["tile.k = 12 is not a multiple of 8"], ("tile", "k"))),
    # SMEM001: see also the worked examples below
    ("SMEM001", "cute:sm90", {**F16, "tile": tile(128, 256, 64), "pipeline": {"ab_stages": 4}}, None),
    ("SMEM001", "cute:sm90", {**F16, "tile": tile(128, 256, 64), "pipeline": {"ab_stages": 5}},
     ("error", ["needs 264192 B of SMEM > 232448 B per block on cute:sm90",
                "A/B 5 x 49152 = 245760 + epilogue 16384 + barriers 2048"], ("pipeline", "ab_stages"))),
    # exactly the per-block maximum fits (the sm90 design's struct, kinds/gemm/designs/cute_sm90/design.py): 2 x (128 + 740)
    # x 64 x 2 + 2 x 64 x 32 x 2 (one warpgroup's TMA-store subtiles) + 1024 base pad + 1024 barriers = 232448
    ("SMEM001", "cute:sm90", {"tile": tile(128, 740, 64), "cute": {"mma_warpgroups": 1}, "pipeline": {"ab_stages": 2}},
     None),
    ("SMEM001", "cute:sm90", {"tile": tile(128, 748, 64), "cute": {"mma_warpgroups": 1}, "pipeline": {"ab_stages": 2}},
     ("error", ["needs 234496 B of SMEM > 232448 B", "A/B 2 x 112128 = 224256 + epilogue 8192 + barriers 2048"],
      ("pipeline", "ab_stages"))),
    ("SMEM001", "triton:sm90", {**F16, "tile": tile(128, 256, 64), "schedule": {"persistent": True},
                                "pipeline": {"ab_stages": 3}}, None),
    ("SMEM001", "triton:sm90", {**F16, "tile": tile(128, 256, 64), "schedule": {"persistent": True},
                                "pipeline": {"ab_stages": 4}},
     ("error", ["needs 262144 B of SMEM > 232448 B per block on triton:sm90",
                "A/B 4 x 49152 = 196608 + epilogue 65536"], ("pipeline", "ab_stages"))),
    # the subtiled TMA store stages half the output tile: 4 stages fit again
    ("SMEM001", "triton:sm90", {**F16, "tile": tile(128, 256, 64), "schedule": {"persistent": True},
                                "triton": {"epilogue_subtile": True}, "pipeline": {"ab_stages": 4}}, None),
    # the pointer kernel stores from registers: no epilogue SMEM at all (triton.compile measured it)
    ("SMEM001", "triton:sm100", {**F16, "tile": tile(128, 256, 64), "pipeline": {"ab_stages": 4},
                                 "triton": {"tma": False}}, None),
    ("SMEM001", "triton:sm100", {**F16, "tile": tile(128, 256, 64), "pipeline": {"ab_stages": 5},
                                 "triton": {"tma": False}},
     ("error", ["needs 245760 B of SMEM > 232448 B", "(A/B 5 x 49152 = 245760)"], ("pipeline", "ab_stages"))),
    # FMA dots (f32 ieee) keep num_stages - 1 A/B buffers; sm_100 copies MN-major tf32 operands K-major
    ("SMEM001", "triton:sm90", {"a": {"dtype": "f32"}, "b": {"dtype": "f32"}, "out": {"dtype": "f32"},
                                "tile": tile(128, 128, 64), "triton": {"tma": False}, "pipeline": {"ab_stages": 4}},
     None),  # 3 x 65536 = 196608
    ("SMEM001", "triton:sm90", {"a": {"dtype": "f32"}, "b": {"dtype": "f32"}, "out": {"dtype": "f32"},
                                "tile": tile(128, 128, 64), "triton": {"tma": False}, "pipeline": {"ab_stages": 5}},
     ("error", ["needs 262144 B of SMEM", "(A/B 4 x 65536 = 262144)"], ("pipeline", "ab_stages"))),
    ("SMEM001", "triton:sm100", {"a": {"dtype": "tf32"}, "b": {"dtype": "tf32", "major": "mn"}, "out": {"dtype": "f32"},
                                 "tile": tile(128, 128, 64), "pipeline": {"ab_stages": 3}},
     ("error", ["needs 262144 B of SMEM", "A/B 3 x 65536 = 196608", "tf32 K-major copies 65536"],
      ("pipeline", "ab_stages"))),
    ("SMEM001", "triton:sm100", {"a": {"dtype": "tf32"}, "b": {"dtype": "tf32", "major": "mn"}, "out": {"dtype": "f32"},
                                 "tile": tile(128, 128, 64), "triton": {"tma": False}, "pipeline": {"ab_stages": 3}},
     None),  # pointer loads pass through registers: no copy
    ("SMEM001", "triton:sm90", {"a": {"dtype": "tf32"}, "b": {"dtype": "tf32", "major": "mn"}, "out": {"dtype": "f32"},
                                "tile": tile(128, 128, 64), "pipeline": {"ab_stages": 3}},
     None),  # sm_90's wgmma takes them as they are
    # layout scratch: an FMA TMA kernel transposes an operand stored the other way (A MN-major here)
    ("SMEM001", "triton:sm90", {"a": {"dtype": "f32", "major": "mn"}, "b": {"dtype": "f32"}, "out": {"dtype": "f32"},
                                "tile": tile(128, 64, 64), "triton": {"num_warps": 4}, "schedule": {"persistent": True},
                                "pipeline": {"ab_stages": 4}}, None),  # 3 x 49152 + 32768 + 32768 = 212992
    ("SMEM001", "triton:sm90", {"a": {"dtype": "f32", "major": "mn"}, "b": {"dtype": "f32"}, "out": {"dtype": "f32"},
                                "tile": tile(128, 64, 64), "triton": {"num_warps": 4}, "schedule": {"persistent": True},
                                "pipeline": {"ab_stages": 5}},
     ("error", ["needs 262144 B of SMEM", "A/B 4 x 49152 = 196608", "layout scratch 32768"], ("pipeline", "ab_stages"))),
    # ... and an sm_90 persistent TMA kernel converts a residual of 1 KB rows a quarter tile at a time
    ("SMEM001", "triton:sm90", {"out": {"dtype": "f32"}, "tile": tile(128, 256, 64), "schedule": {"persistent": True},
                                "epilogue": [{"op": "residual", "dtype": "f32"}], "pipeline": {"ab_stages": 2}},
     ("error", ["needs 262144 B of SMEM", "epilogue 131072 + layout scratch 32768"], ("pipeline", "ab_stages"))),
    ("SMEM001", "triton:sm90", {"out": {"dtype": "f32"}, "tile": tile(128, 256, 64), "schedule": {"persistent": True},
                                "epilogue": [{"op": "residual", "dtype": "bf16"}], "pipeline": {"ab_stages": 2}},
     None),  # 512-byte rows: no scratch (229376 B)
    ("SMEM001", "triton:sm100", {"out": {"dtype": "f32"}, "tile": tile(128, 256, 64), "schedule": {"persistent": True},
                                 "epilogue": [{"op": "residual", "dtype": "f32"}], "pipeline": {"ab_stages": 2}},
     None),  # sm_100 converts it without
    # a pointer kernel converts it through a whole f32 tile, over the drained pipeline buffers, at
    # most 128 KB at a time (tests/data/grid_triton.jsonl: a 256 x 256 f32 residual took 131072 B)
    ("SMEM001", "triton:sm90", {"tile": tile(256, 256, 32), "triton": {"tma": False},
                                "epilogue": [{"op": "residual", "dtype": "f32"}], "pipeline": {"ab_stages": 2}},
     None),  # max(65536, 131072)
    ("SMEM001", "triton:sm90", {"tile": tile(256, 256, 64), "triton": {"tma": False},
                                "epilogue": [{"op": "residual", "dtype": "f32"}], "pipeline": {"ab_stages": 4}},
     ("error", ["needs 262144 B of SMEM", "A/B 4 x 65536 = 262144 + conversion scratch 131072 (reuses A/B)"],
      ("pipeline", "ab_stages"))),
    ("SMEM001", "triton:sm90", {"tile": tile(256, 256, 32), "triton": {"tma": False},
                                "epilogue": [{"op": "residual", "dtype": "bf16"}], "pipeline": {"ab_stages": 2}},
     None),
    # one program per tile with TMA: the store buffer reuses the pipeline buffers too
    ("SMEM001", "triton:sm90", {**F16, "tile": tile(128, 256, 64), "pipeline": {"ab_stages": 4}}, None),
    ("SMEM001", "triton:sm90", {**F16, "tile": tile(128, 256, 64), "pipeline": {"ab_stages": 5}},
     ("error", ["needs 245760 B of SMEM > 232448 B", "epilogue 65536 (reuses A/B)"], ("pipeline", "ab_stages"))),
    # a split-K kernel's store (its tile's last program) reuses the drained pipeline even when persistent
    ("SMEM001", "triton:sm90", {**F16, "tile": tile(128, 256, 64), "schedule": {"persistent": True, "split_k": 2},
                                "pipeline": {"ab_stages": 4}}, None),
    ("SMEM001", "triton:sm90", {**F16, "tile": tile(128, 256, 64), "schedule": {"persistent": True, "split_k": 2},
                                "pipeline": {"ab_stages": 5}},
     ("error", ["needs 245760 B of SMEM", "epilogue 65536 (reuses A/B)"], ("pipeline", "ab_stages"))),
    ("SMEM001", "triton:sm90", {**F16, "tile": tile(128, 256, 64), "schedule": {"persistent": True},
                                "pipeline": {"ab_stages": 4}},
     ("error", ["needs 262144 B of SMEM", "A/B 4 x 49152 = 196608 + epilogue 65536"], ("pipeline", "ab_stages"))),
    # swap_ab transposes the accumulator back over the drained pipeline buffers
    ("SMEM001", "triton:sm90", {**F16, "tile": tile(64, 256, 64), "triton": {"swap_ab": True},
                                "pipeline": {"ab_stages": 5}}, None),
    ("SMEM001", "triton:sm90", {**F16, "tile": tile(64, 256, 64), "triton": {"swap_ab": True},
                                "pipeline": {"ab_stages": 6}},
     ("error", ["needs 245760 B of SMEM", "conversion scratch 65536 (reuses A/B)"], ("pipeline", "ab_stages"))),
    # a flattened persistent loop converts a subtiled store's whole output tile through scratch beside
    # the pipeline and the half in flight (tests/data/grid_triton.jsonl: 262160 B compiled for the second)
    ("SMEM001", "triton:sm90", {**FP8, "out": {"dtype": "f32"}, "tile": tile(64, 256, 256),
                                "schedule": {"persistent": True}, "triton": {"epilogue_subtile": True},
                                "pipeline": {"ab_stages": 2}}, None),
    ("SMEM001", "triton:sm90", {**FP8, "out": {"dtype": "f32"}, "tile": tile(64, 256, 256),
                                "schedule": {"persistent": True}, "triton": {"epilogue_subtile": True, "flatten": True},
                                "pipeline": {"ab_stages": 2}},
     ("error", ["needs 262144 B of SMEM", "A/B 2 x 81920 = 163840 + epilogue 32768 + layout scratch 65536"],
      ("pipeline", "ab_stages"))),
    # sm_100's tf32 K-major copies live with the pipeline: a drained kernel's store reuses them too
    ("SMEM001", "triton:sm100", {"a": {"dtype": "tf32"}, "b": {"dtype": "tf32", "major": "mn"}, "out": {"dtype": "f32"},
                                 "tile": tile(128, 256, 16), "pipeline": {"ab_stages": 8}}, None),  # 196608 + 32768
    ("SMEM001", "triton:sm100", {"a": {"dtype": "tf32"}, "b": {"dtype": "tf32", "major": "mn"}, "out": {"dtype": "f32"},
                                 "tile": tile(128, 256, 16), "pipeline": {"ab_stages": 9}},
     ("error", ["needs 253952 B of SMEM", "A/B 9 x 24576 = 221184 + tf32 K-major copies 32768 + epilogue 131072 "
                "(reuses A/B)"], ("pipeline", "ab_stages"))),
    # a flattened pointer kernel converts its output for the store beside the pipeline (at most 32 KB;
    # tests/data/grid_triton.jsonl: 237584 B compiled for the second)
    ("SMEM001", "triton:sm100", {**FP8, "tile": tile(128, 128, 128), "schedule": {"persistent": True},
                                 "triton": {"tma": False, "flatten": True}, "pipeline": {"ab_stages": 6}}, None),
    ("SMEM001", "triton:sm100", {**FP8, "tile": tile(128, 128, 128), "schedule": {"persistent": True},
                                 "triton": {"tma": False, "flatten": True}, "pipeline": {"ab_stages": 7}},
     ("error", ["needs 262144 B of SMEM", "A/B 7 x 32768 = 229376 + layout scratch 32768"], ("pipeline", "ab_stages"))),
    # ... and its residual (sm_100: a quarter tile, in the same scratch; 196640 B compiled)
    ("SMEM001", "triton:sm100", {"a": {"dtype": "tf32"}, "b": {"dtype": "tf32"}, "tile": tile(64, 256, 64),
                                 "schedule": {"persistent": True}, "triton": {"flatten": True, "epilogue_subtile": True},
                                 "epilogue": [{"op": "residual", "dtype": "f32"}], "pipeline": {"ab_stages": 2}},
     None),  # 163840 + 16384 + max(32768, 16384) = 212992
    ("SMEM001", "triton:sm100", {"a": {"dtype": "tf32"}, "b": {"dtype": "tf32"}, "tile": tile(64, 256, 64),
                                 "schedule": {"persistent": True}, "triton": {"flatten": True, "epilogue_subtile": True},
                                 "epilogue": [{"op": "residual", "dtype": "f32"}], "pipeline": {"ab_stages": 3}},
     ("error", ["needs 294912 B of SMEM", "epilogue 16384 + layout scratch 32768"], ("pipeline", "ab_stages"))),
    # Mosaic GPU pads each SMEM buffer to whole KiB: 9 stages of a 48-wide B tile (9 x 4608 B) take 41472 B
    ("SMEM001", "pallas:gpu_sm90", {"out": {"dtype": "f32"}, "tile": tile(192, 48, 48), "pipeline": {"ab_stages": 8}},
     None),  # 209024 B, Mosaic GPU's own figure (tests/grids/mgpu.py)
    ("SMEM001", "pallas:gpu_sm90", {"out": {"dtype": "f32"}, "tile": tile(192, 48, 48), "pipeline": {"ab_stages": 9}},
     ("error", ["needs 232592 B of SMEM > 232448 B", "KiB alignment 512"], ("pipeline", "ab_stages"))),
    ("SMEM001", "cute:sm90", {"tile": tile(256, 256, 512)},
     ("error", ["needs 1067008 B of SMEM > 232448 B"], ("tile",))),
    # TMA001: the contiguous box dim is a multiple of 16 bytes
    ("TMA001", "cute:sm90", {"tile": tile(64, 64, 8)}, None),
    ("TMA001", "cute:sm90", {"tile": tile(64, 64, 4)},
     ("error", ["A's TMA box has 4 x 2 B = 8 B along its contiguous dim, not a multiple of 16"], ("a", "major"))),
    ("TMA001", "cute:sm100", {"a": {"dtype": "bf16", "major": "mn"}, "tile": tile(8, 64, 64)}, None),
    ("TMA001", "cute:sm100", {"a": {"dtype": "bf16", "major": "mn"}, "tile": tile(12, 64, 64)},
     ("error", ["A's TMA box has 12 x 2 B = 24 B"], ("a", "major"))),
    ("TMA001", "pallas:gpu_sm90", {**FP8, "b": {"dtype": "fp8_e4m3", "major": "mn"}, "tile": tile(64, 8, 64)},
     ("error", ["B's TMA box has 8 x 1 B = 8 B"], ("b", "major"))),
    ("TMA001", "cute:sm90", {"out": {"dtype": "f32"}, "tile": tile(64, 4, 64)}, None),
    ("TMA001", "cute:sm90", {"out": {"dtype": "f32"}, "tile": tile(64, 2, 64)},
     ("error", ["out's TMA box has 2 x 4 B = 8 B"], ("tile", "n"))),
    ("TMA001", "triton:sm90", {"tile": tile(64, 64, 4), "schedule": {"persistent": True}},
     ("error", ["A's TMA box has 4 x 2 B = 8 B"], ("a", "major"))),
    ("TMA001", "triton:sm90", {"tile": tile(64, 64, 4)},  # one program per tile, TMA too
     ("error", ["A's TMA box has 4 x 2 B = 8 B"], ("a", "major"))),
    ("TMA001", "triton:sm90", {"tile": tile(64, 64, 4), "triton": {"tma": False}}, None),  # pointer loads: no TMA
    ("TMA001", "triton:sm90", {"tile": tile(64, 64, 4), "schedule": {"persistent": True}, "triton": {"tma": False}},
     None),
    # TMA002: every box dim <= 256 (CuTe and Mosaic GPU; Triton splits its blocks)
    ("TMA002", "cute:sm90", {"tile": tile(256, 256, 256)}, None),
    ("TMA002", "cute:sm90", {"tile": tile(128, 512, 64)},
     ("error", ["B's TMA box 512x64 has a dim 512 > 256"], ("tile",))),
    ("TMA002", "pallas:gpu_sm90", {"tile": tile(128, 128, 257)}, ("error", ["A's TMA box 128x257 has a dim 257"], ("tile",))),
    # Mosaic GPU copies through its tiled GMEM view: (rows / 8, cols / swizzle, 8, swizzle) per box
    ("TMA002", "pallas:gpu_sm90", {"tile": tile(320, 128, 64)}, None),  # 40 row tiles (lowers: tests/grids/mgpu.py)
    ("TMA002", "pallas:gpu_sm90", {"tile": tile(2112, 128, 64)},
     ("error", ["A's TMA box 264x1x8x64 has a dim 264 > 256"], ("tile",))),
    # CLU001: portable 8, hardware 16; powers of two are the examples' convention
    ("CLU001", "cute:sm90", {"cluster": {"m": 2, "n": 4}}, None),
    ("CLU001", "cute:sm90", {"cluster": {"m": 4, "n": 4}},
     ("warning", ["cluster 4x4 = 16 CTAs > 8 (portable): needs the non-portable opt-in"], ("cluster",))),
    ("CLU001", "cute:sm100", {"cluster": {"m": 3, "n": 1}},
     ("warning", ["cluster 3x1: the CuTe examples use powers of two (convention, not hardware)"], ("cluster",))),
    ("CLU001", "triton:sm90", {"cluster": {"m": 1, "n": 1}}, None),
    ("CLU001", "triton:sm90", {"cluster": {"m": 2, "n": 1}},
     ("warning", ["cluster 2x1 is ignored by triton (it launches single CTAs)"], ("cluster",))),
    # REG001 on Triton: past 256 estimated registers per thread an error; 16 to 256 near the boundary (the
    # compiler settles it: tests/test_settle.py), which the model alone accepts under 255
    ("REG001", "triton:sm90", {"tile": tile(128, 256, 64), "triton": {"num_warps": 8}}, None),
    ("REG001", "triton:sm90", {"tile": tile(128, 256, 64), "triton": {"num_warps": 4}},
     ("error", ["accumulator needs 256 registers per thread (128 threads) > 255: ptxas spills to local memory"],
      ("triton", "num_warps"))),
    ("REG001", "triton:sm100", {"tile": tile(128, 192, 64), "triton": {"num_warps": 4}}, None),
    ("REG001", "triton:sm100", {"tile": tile(128, 256, 64), "triton": {"num_warps": 4}},
     ("error", ["accumulator needs 256 registers per thread"], ("triton", "num_warps"))),
    ("REG001", "triton:sm90", {"a": {"dtype": "f32"}, "b": {"dtype": "f32"}, "out": {"dtype": "f32"},
                               "tile": tile(64, 128, 32)}, None),  # 32 + (2 x 32 + 24) operand registers = 120
    ("REG001", "triton:sm90", {"a": {"dtype": "f32"}, "b": {"dtype": "f32"}, "out": {"dtype": "f32"},
                               "tile": tile(256, 128, 64)},
     ("error", ["accumulator needs 128 registers per thread (256 threads) + 352 for the FMA operands = 480 > 255"],
      ("triton", "num_warps"))),
    # CuTe sm90: the design's register model (accumulator + base + epilogue) against setmaxnreg's 232
    ("REG001", "cute:sm90", {"tile": tile(128, 192, 64), "cute": {"mma_warpgroups": 1}}, None),  # 192 + 39.68: 232
    ("REG001", "cute:sm90", {"tile": tile(128, 224, 64), "cute": {"mma_warpgroups": 1}},
     ("error", ["a consumer thread needs about 264 registers (224 accumulator + 39.68 base; 128 threads share the "
                "128x224 accumulator) > the 232 setmaxnreg gives it: ptxas spills"], ("tile",))),
    ("REG001", "cute:sm90", {"tile": tile(128, 256, 64), "cute": {"mma_warpgroups": 1}},
     ("error", ["about 296 registers (256 accumulator + 39.68 base;"], ("tile",))),
    # the catalogue's fp8 rowwise config: two prefetched vectors span 2 rows + 8 columns, 3.15 registers each
    ("REG001", "cute:sm90", {**FP8, "tile": tile(128, 192, 128), "cute": {"schedule": "pingpong"},
                             "epilogue": [{"op": "scale", "by": "rowcol"}]}, None),  # 192 + 8.5 + 31.5 = 232
    ("REG001", "cute:sm90", {"tile": tile(128, 192, 64), "cute": {"schedule": "pingpong"},
                             "epilogue": [{"op": "bias"}, {"op": "residual", "dtype": "bf16"}]},
     ("error", ["about 267 registers (192 accumulator + 8.5 base + 66.32 epilogue operands;"], ("tile",))),
    # two warpgroups sharing a tile: a base of 22.1 (fitted; see kinds/gemm/designs/cute_sm90/design.py)
    ("REG001", "cute:sm90", {"tile": tile(256, 192, 64)}, None),  # 192 + 22.1 = 215
    ("REG001", "cute:sm90", {"tile": tile(256, 192, 64), "epilogue": [{"op": "bias"}]},
     ("error", ["about 240 registers (192 accumulator + 22.1 base + 25.2 epilogue operands; 256 threads"], ("tile",))),
    # Mosaic GPU: two consumer warpgroups always split N (kinds/gemm/designs/pallas/design.py), so 256x128 is 128 each
    ("REG001", "pallas:gpu_sm90", {"tile": tile(256, 128, 64)}, None),
    ("REG001", "pallas:gpu_sm90", {"tile": tile(256, 256, 64)},
     ("error", ["accumulator needs 256 registers per thread (256 threads) > 255"], ("tile",))),
    # Mosaic GPU does not read the CuTe options: the default split stands
    ("REG001", "pallas:gpu_sm90", {"tile": tile(128, 256, 64), "cute": {"mma_warpgroups": 1}}, None),
    ("REG001", "pallas:gpu_sm90", {"tile": tile(128, 256, 64)}, None),  # 2 consumer warpgroups by default
    ("REG001", "cute:sm90", {**F16, "accumulator": "f16", "tile": tile(128, 256, 64), "cute": {"mma_warpgroups": 1}},
     None),  # f16 accumulators pack two per register
    ("REG001", "cute:sm90", {"tile": tile(128, 128, 64), "cute": {"schedule": "pingpong"}}, None),
    ("REG001", "cute:sm90", {"tile": tile(128, 256, 64), "cute": {"schedule": "pingpong"}},
     ("error", ["about 265 registers (256 accumulator + 8.5 base; 128 threads share the 128x256"], ("tile",))),
    # OPT001: each backend option against the targets of its backend
    ("OPT001", "cute:sm100", {"cute": {"two_cta": True}, "cluster": {"m": 2}}, None),
    ("OPT001", "cute:sm90", {"cute": {"two_cta": True}, "cluster": {"m": 2}},
     ("error", ["cute.two_cta = true needs tcgen05 2-CTA MMA (sm100); cute:sm90 has none"], ("cute", "two_cta"))),
    ("OPT001", "triton:sm90", {"cute": {"two_cta": True}}, None),  # another backend's option is inert
    ("OPT001", "cute:sm90", {"cute": {"mma_warpgroups": 2}}, None),
    ("OPT001", "cute:sm90", {"tile": tile(128, 128, 64), "cute": {"schedule": "pingpong"}}, None),
    ("OPT001", "cute:sm100", {"cute": {"schedule": "pingpong"}},
     ("error", ['cute.schedule = "pingpong" alternates wgmma warpgroups (sm90)'], ("cute", "schedule"))),
    ("OPT001", "cute:sm100", {"cute": {"mma_warpgroups": 2}},
     ("error", ["cute.mma_warpgroups = 2 splits a wgmma tile (sm90); cute:sm100"], ("cute", "mma_warpgroups"))),
    ("OPT001", "cute:sm90", {"tile": tile(16, 64, 64), "cute": {"swap_ab": True}}, None),
    ("OPT001", "cute:sm100", {"cute": {"swap_ab": True}},
     ("error", ["cute.swap_ab = true is rendered by the sm90 (wgmma) design only"], ("cute", "swap_ab"))),
    ("OPT001", "pallas:tpu_v5e", {"tile": tile(512, 512, 512), "pallas": {"vmem_limit_bytes": 1 << 26}}, None),
    ("OPT001", "pallas:gpu_sm90", {"pallas": {"vmem_limit_bytes": 1 << 26}},
     ("error", ["pallas.vmem_limit_bytes = 67108864 is a TPU setting; pallas:gpu_sm90"], ("pallas", "vmem_limit_bytes"))),
    ("OPT001", "triton:sm100", {"triton": {"epilogue_subtile": True}}, None),
    ("OPT001", "triton:sm100", {"triton": {"epilogue_subtile": True, "tma": False}},
     ("warning", ["triton.epilogue_subtile = true is ignored"], ("triton", "epilogue_subtile"))),
    ("OPT001", "triton:sm90", {"triton": {"flatten": True}, "schedule": {"persistent": True}}, None),
    ("OPT001", "triton:sm90", {"triton": {"flatten": True}},
     ("warning", ["triton.flatten = true is ignored"], ("triton", "flatten"))),
    # SPK001-003: split-K is Triton's and CuTe sm90's; f32 partials; a config serving every M warns (k_max bounds: below)
    ("SPK001", "cute:sm100", {"schedule": {"split_k": 1}}, None),
    ("SPK001", "pallas:tpu_v6e", {"schedule": {"split_k": 2}},
     ("error", ["schedule.split_k = 2: the Pallas design renders no split-K (the CuTe sm90 and Triton designs do)"],
      ("schedule", "split_k"))),
    ("SPK001", "cute:sm100", {"schedule": {"split_k": 2}},
     ("error", ["schedule.split_k = 2: the CuTe sm100 design renders no split-K"], ("schedule", "split_k"))),
    # TRN001: a training backward is the Triton, CuTe (sm90, sm100) and Pallas (TPU, Mosaic GPU) designs' (what the CuTe
    # sm100 design's refuses: tests/backends/cute/rule_cases_sm100.py)
    ("TRN001", "cute:sm100", {}, None),
    ("TRN001", "cute:sm100", {"training": {"save": "preact"}}, None),
    # ... and a gated epilogue's backward on every design that renders training (the Triton, CuTe sm90 and Pallas
    # designs: TPU and Mosaic GPU); a design without one: test_trn001_refuses_a_gated_op_where_no_gated_backward_is_rendered
    ("TRN001", "pallas:tpu_v6e", {"training": {"save": "preact"}}, None),
    ("TRN001", "pallas:tpu_v6e", {"training": {"save": "preact"}, "epilogue": [{"op": "gated", "fn": "silu", "layout": "halves"}]},
     None),
    # ... as are the other chains' (scale, residual, clamp, cast, bias along m, any order; unbatched: since session 33 the
    # Pallas design's too, tests/backends/pallas/test_training_*_chain.py)
    ("TRN001", "pallas:tpu_v6e", {"training": {"save": "preact"},
                                  "epilogue": [{"op": "residual", "dtype": "bf16"}, {"op": "clamp", "min": 0.0}]}, None),
    # ... and a batched GEMM's (batch = true: each backward GEMM per batch; since session 33 the Pallas design's too,
    # tests/backends/pallas/test_training_*_batch.py; the Triton side: tests/test_training_spec.py)
    ("TRN001", "pallas:tpu_v6e", {"training": {"save": "preact"}, "batch": True}, None),
]


# Each design's own rules are tested beside its other tests (tests/backends/*/rule_cases*.py, a CASES list
# in this form): collected here, so a new design adds its file and no line in this one.
DESIGN_CASE_FILES = sorted((ROOT / "tests" / "backends").glob("*/rule_cases*.py"))
for _file in DESIGN_CASE_FILES:
    CASES += importlib.import_module(f"backends.{_file.parent.name}.{_file.stem}").CASES


def _case_id(case) -> str:
    rule_id, target, _, expected = case
    return f"{rule_id}-{target}-{'pass' if expected is None else expected[0]}"


@pytest.mark.parametrize("case", CASES, ids=[f"{_case_id(c)}-{i}" for i, c in enumerate(CASES)])
def test_rule_boundary(case):
    rule_id, target, overrides, expected = case
    found = findings(rule_id, ctx_for(target, **overrides))
    if expected is None:
        assert found == []
        return
    severity, fragments, fld = expected
    assert found, f"{rule_id} found nothing"
    match = [f for f in found if all(frag in f.message for frag in fragments)]
    assert match, [f.message for f in found]
    f = match[0]
    assert (f.rule, f.severity) == (rule_id, severity)
    if fld is not None:
        assert f.field == fld


def _variant_ctx(target: str, when: dict, split_k: int) -> RuleContext:
    s = spec(variants=[{"when": when, "schedule": {"split_k": split_k}}])
    (v,) = rule_context(s, parse_target(target)).variants
    return v


@pytest.mark.parametrize(("k_max", "split_k", "bad"), [(256, 4, False), (256, 5, True), (193, 4, False),
                                                       (192, 4, True), (64, 1, False)])
def test_spk002_every_split_gets_a_k_tile_at_k_max(k_max: int, split_k: int, bad: bool):
    found = findings("SPK002", _variant_ctx("triton:sm90", {"m_max": 16, "k_max": k_max}, split_k))  # tile.k 64
    if not bad:
        assert found == []
        return
    (f,) = found
    tiles = -(-k_max // 64)
    assert (f.severity, f.field) == ("error", ("schedule", "split_k"))
    assert f"schedule.split_k = {split_k} > {tiles} K tiles at k_max = {k_max} (tile.k = 64)" in f.message


def test_spk003_is_quiet_for_a_variant_bounded_by_m():
    assert findings("SPK003", _variant_ctx("triton:sm90", {"m_max": 128}, 4)) == []
    (f,) = findings("SPK003", _variant_ctx("triton:sm90", {"n_max": 4096}, 4))
    assert f.severity == "warning" and "serves every M" in f.message


def test_every_rule_has_a_passing_and_a_failing_case():
    passing = {c[0] for c in CASES if c[3] is None}
    failing = {c[0] for c in CASES if c[3] is not None}
    # DT002: below, on a made-up device; EPI001: below, on a made-up design (every shipped design renders a gated op)
    assert passing | {"DT002", "EPI001"} == failing | {"DT002", "EPI001"} == set(RULE)


def test_epi001_refuses_a_design_without_a_gated_epilogue(monkeypatch):
    from specgen.kinds.gemm.designs.pallas.design import PallasGemmDesign

    monkeypatch.setattr(PallasGemmDesign, "renders_gated_on", lambda self, target: False)
    ctx = ctx_for("pallas:tpu_v6e", tile={"m": 512, "n": 512, "k": 512},
                  epilogue=[{"op": "gated", "fn": "silu", "layout": "halves"}])
    assert RULE["EPI001"].applies(parse_target("pallas:tpu_v6e"))
    (f,) = findings("EPI001", ctx)
    assert (f.severity, f.field) == ("error", ("epilogue",))
    assert "epilogue[0] is gated (silu, halves): the Pallas design renders no gated epilogue (the " in f.message
    assert findings("EPI001", ctx_for("pallas:tpu_v6e", tile={"m": 512, "n": 512, "k": 512})) == []


def test_trn001_refuses_a_gated_op_where_no_gated_backward_is_rendered(monkeypatch):
    """Every shipped design that renders training renders a gated op's backward too: a made-up Pallas design
    without one (on the TPU) is refused, naming the designs that have one."""
    from specgen.kinds.gemm.designs.pallas.design import PallasGemmDesign

    monkeypatch.setattr(PallasGemmDesign, "renders_gated_training_on", lambda self, target: False)
    monkeypatch.setattr(PallasGemmDesign, "renders_gated_training", False)
    monkeypatch.setattr(PallasGemmDesign, "gated_training_label", "")
    ctx = ctx_for("pallas:tpu_v6e", training={"save": "preact"},
                  epilogue=[{"op": "gated", "fn": "silu", "layout": "halves"}])
    (f,) = findings("TRN001", ctx)
    assert (f.severity, f.field) == ("error", ("training",))
    assert f.message == ("training with a gated epilogue (silu, halves): the Pallas (TPU, Mosaic GPU) design renders no "
                         "gated backward for pallas:tpu_v6e (the CuTe sm100, CuTe sm90 and Triton designs do)")


def _with_gpu(ctx: RuleContext, cc: int) -> RuleContext:
    return dataclasses.replace(ctx, gpu=dataclasses.replace(ctx.gpu, compute_capability=cc))


def test_dt002_fp8_needs_cc_89():
    ctx = ctx_for("triton:sm90", **FP8)
    assert findings("DT002", ctx) == []  # sm90 qualifies
    assert findings("DT002", ctx_for("triton:sm100", **FP8)) == []
    assert findings("DT002", _with_gpu(ctx, 89)) == []
    (a, b) = findings("DT002", _with_gpu(ctx, 86))
    assert (a.rule, a.severity, a.field, b.field) == ("DT002", "error", ("a", "dtype"), ("b", "dtype"))
    assert "A is fp8_e4m3: Triton's fp8 dot needs cc >= 89, triton:sm90 is cc 86" in a.message
    assert findings("DT002", _with_gpu(ctx_for("triton:sm90"), 80)) == []  # bf16 does not care


def test_dt005_names_each_stored_dtype_in_order():
    ctx = ctx_for("cute:sm100", **FP8, out={"dtype": "int8"}, epilogue=[
        {"op": "bias", "dtype": "tf32"}, {"op": "activation", "fn": "relu"}, {"op": "cast", "dtype": "tf32"},
        {"op": "cast", "dtype": "int32"}, {"op": "residual", "dtype": "tf32"}])
    assert [f.field for f in findings("DT005", ctx)] == [
        ("out", "dtype"), ("epilogue", 0, "dtype"), ("epilogue", 2, "dtype"), ("epilogue", 3, "dtype"),
        ("epilogue", 4, "dtype")]


def test_several_findings_of_one_rule():
    found = findings("MMA001", ctx_for("cute:sm90", tile=tile(96, 264, 24)))
    assert [f.field for f in found] == [("tile", "m"), ("tile", "n"), ("tile", "k")]
    tma = findings("TMA002", ctx_for("cute:sm90", tile=tile(512, 512, 64)))
    assert [f.message.split("'")[0] for f in tma] == ["A", "B"]  # out: stored by epilogue subtile


def test_mma001_hint_rounds_down_to_a_warpgroup():
    (f,) = findings("MMA001", ctx_for("cute:sm90", tile=tile(96, 128, 64)))
    assert f.hint == "use tile.m = 64"
    (f,) = findings("MMA001", ctx_for("cute:sm90", tile=tile(32, 128, 64)))
    assert f.hint == "use tile.m = 64"


def test_pow001_hint_names_the_neighbouring_powers():
    (f,) = findings("POW001", ctx_for("triton:sm90", tile=tile(96, 128, 64)))
    assert f.hint == "use 64 or 128"


def test_clu001_error_above_the_hardware_maximum():
    found = findings("CLU001", ctx_for("cute:sm90", cluster={"m": 17, "n": 1}))
    assert [(f.severity, f.message.split(":")[0]) for f in found] == [
        ("error", "cluster 17x1 = 17 CTAs > 16, the hardware maximum"),
        ("warning", "cluster 17x1"),
    ]
    (f,) = findings("CLU001", ctx_for("cute:sm90", cluster={"m": 16, "n": 1}))
    assert f.severity == "warning" and "> 8 (portable)" in f.message


def test_dt_and_tmem_hints():
    (f,) = findings("DT001", ctx_for("cute:sm100", a={"dtype": "f32"}, b={"dtype": "f32"}))
    assert f.hint == "use tf32 for f32 data"
    (f,) = findings("DT004", ctx_for("triton:sm90", a={"dtype": "int8"}, b={"dtype": "int8"}))
    assert f.hint == 'set accumulator = "int32"'
    (f,) = findings("DT005", ctx_for("cute:sm90", **FP8, out={"dtype": "int8"}))
    assert f.hint == 'set out.dtype = "f32" (or f16, bf16) and quantize to int8 after the kernel'
    (f,) = findings("DT005", ctx_for("triton:sm100", a={"dtype": "tf32"}, b={"dtype": "tf32"}, out={"dtype": "tf32"}))
    assert f.hint == 'set out.dtype = "f32"'
    (f,) = findings("DT005", ctx_for("triton:sm90", epilogue=[{"op": "residual", "dtype": "tf32"}]))
    assert f.hint == 'set its dtype = "f32"'
    (f,) = findings("DT005", ctx_for("triton:sm90", epilogue=[{"op": "cast", "dtype": "tf32"}]))
    assert f.hint.startswith("drop the cast")
    (f,) = findings("TMEM001", ctx_for("cute:sm100", tile=tile(128, 256, 64), pipeline={"acc_stages": 3}))
    assert f.hint == "use acc_stages = 1"
    (f,) = findings("TMEM001", ctx_for("cute:sm100", tile=tile(128, 1024, 64), pipeline={"acc_stages": 1}))
    assert f.hint == "shrink tile.n" and "1024 columns x 1 stages = 1024" in f.message


# --- TMEM ---------------------------------------------------------------------------------------------
def test_tmem_columns_per_mma_mode():
    assert tmem_columns(spec(tile=tile(128, 256, 64))) == 256  # 1-CTA M=128: N
    assert tmem_columns(spec(tile=tile(64, 256, 64))) == 256  # 1-CTA M=64: N columns on 64 lanes
    assert tmem_columns(spec(tile=tile(128, 256, 64), cute={"two_cta": True})) == 256  # 2-CTA M=256
    assert tmem_columns(spec(tile=tile(64, 256, 64), cute={"two_cta": True})) == 128  # 2-CTA M=128: N/2
    assert tmem_columns(spec(**F16, accumulator="f16", tile=tile(128, 256, 64))) == 256  # f16 is not packed


def test_tmem_worked_example_256_columns_by_stages():
    assert SM100.tmem_columns == 512
    base = {"tile": tile(128, 256, 64)}
    assert findings("TMEM001", ctx_for("cute:sm100", **base, pipeline={"acc_stages": 2})) == []
    assert findings("TMEM001", ctx_for("cute:sm100", **base, pipeline={"acc_stages": 3}))
    two = {"tile": tile(64, 256, 64), "cute": {"two_cta": True}, "cluster": {"m": 2}}
    assert findings("TMEM001", ctx_for("cute:sm100", **two, pipeline={"acc_stages": 4})) == []  # 128 x 4 = 512


def test_auto_acc_stages_double_buffer_when_tmem_allows():
    sm100 = parse_target("cute:sm100")
    assert resolve_acc_stages(spec(tile=tile(128, 256, 64)), sm100) == 2
    assert resolve_acc_stages(spec(tile=tile(128, 257, 64)), sm100) == 1
    assert resolve_acc_stages(spec(tile=tile(64, 512, 64), cute={"two_cta": True}), sm100) == 2
    assert resolve_acc_stages(spec(tile=tile(128, 64, 64), pipeline={"acc_stages": 3}), sm100) == 3
    for t in ("cute:sm90", "triton:sm100", "pallas:gpu_sm90", "pallas:tpu_v6e"):
        assert resolve_acc_stages(spec(tile=tile(128, 64, 64)), parse_target(t)) == 1


# --- the shared SMEM budget: HARDWARE.md's worked examples ----------------------------------------------
def test_worked_example_sm90_fp16_128x256x64_is_4_stages():
    cute_sm90 = parse_target("cute:sm90")
    assert (SM90.smem_per_block, SM90.barrier_reserve) == (232448, 1024)
    stage = (128 + 256) * 64 * 2
    assert stage == 49152 and (232448 - 1024) // stage == 4
    no_store = spec(**F16, tile=tile(128, 256, 64), cute={"tma_store": False})
    assert smem_budget(no_store, cute_sm90, 1).ab_stage_bytes == 49152
    assert max_ab_stages(no_store, cute_sm90) == (232448 - 1024) // 49152 == 4
    # the TMA-store epilogue (2 subtiles of 128 x 64 f16) still leaves room for 4
    assert max_ab_stages(spec(**F16, tile=tile(128, 256, 64)), cute_sm90) == (232448 - 1024 - 32768) // 49152 == 4


def test_smem_hint_names_the_deepest_pipeline_that_fits():
    target = parse_target("cute:sm90")
    s = spec(**F16, tile=tile(128, 256, 64), pipeline={"ab_stages": 7})
    (f,) = findings("SMEM001", rule_context(s, target))
    fit = max_ab_stages(s, target)
    assert fit == 4
    assert f.hint.startswith(f"ab_stages = {fit} fits ({smem_budget(s, target, fit).total} B)")
    assert smem_budget(s, target, fit).fits and not smem_budget(s, target, fit + 1).fits


def test_smem_hint_when_not_even_one_stage_fits():
    (f,) = findings("SMEM001", ctx_for("cute:sm90", tile=tile(256, 256, 512)))
    assert f.field == ("tile",)
    assert "ab_stages" not in f.hint


def test_mosaic_gpu_128x256x64_bf16_with_5_steps_is_rejected():
    """The Mosaic GPU SMEM model is calibrated on lowerings (bench/results/2026-11-22-h200-mgpu-smem.jsonl;
    tests/backends/pallas/test_mgpu_smem.py): a 128x256x64 CTA tile fits 4 steps (229440 B) and not 5
    (278608 B, the figure Mosaic GPU reported). (The old approximate model rejected 4 at 263168 B; the
    360512 B lowering behind that number ran a 128x512 CTA tile, 2 warpgroups of 128x256.)"""
    ctx = ctx_for("pallas:gpu_sm90", tile=tile(128, 256, 64), pipeline={"ab_stages": 5})
    (f,) = findings("SMEM001", ctx)
    assert f.severity == "error"
    assert "needs 278608 B of SMEM > 232448 B per block on pallas:gpu_sm90" in f.message
    assert ctx.budget.total == 5 * (49152 + 16) + 2 * 2 * 64 * 64 * 2
    # auto picks the deepest that fits instead, and check passes it
    auto = ctx_for("pallas:gpu_sm90", tile=tile(128, 256, 64))
    assert auto.ab_stages == 4 and auto.budget.total == 229440 and findings("SMEM001", auto) == []


def test_budget_breakdown_and_fits_at_exactly_the_capacity():
    ctx = ctx_for("cute:sm90", tile=tile(128, 740, 64), cute={"mma_warpgroups": 1}, pipeline={"ab_stages": 2})
    assert ctx.budget.total == ctx.budget.capacity == 232448 and ctx.budget.fits
    assert ctx.budget.breakdown() == "A/B 2 x 111104 = 222208 + epilogue 8192 + barriers 2048"


def test_tpu_budget_counts_vectors_and_residuals():
    base = ctx_for("pallas:tpu_v6e", tile=tile(256, 256, 256), pipeline={"ab_stages": 2}).budget
    epi = ctx_for("pallas:tpu_v6e", tile=tile(256, 256, 256), pipeline={"ab_stages": 2},
                  epilogue=[{"op": "bias", "dtype": "bf16"}, {"op": "scale", "by": "row"},
                            {"op": "residual", "dtype": "f32"}]).budget
    assert epi.capacity == TPUS["tpu_v6e"].vmem_bytes
    # double-buffered: the (1, 256) bf16 bias padded to one 32-byte-deep tile row per lane, the (256, 1) f32
    # row scale padded to 128 lanes, the (256, 256) f32 residual
    assert epi.total - base.total == 2 * 32 * 256 + 2 * 256 * 128 * 4 + 2 * 256 * 256 * 4


# --- auto stages come from the same budget --------------------------------------------------------------
def _brute_force_max(s: GemmSpec, target, limit: int = 64) -> int:
    best = 0
    for stages in range(1, limit + 1):
        if not smem_budget(s, target, stages).fits:
            break
        best = stages
    return best


dims = st.sampled_from([8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024, 2048])
dtypes = st.sampled_from(["f32", "tf32", "f16", "bf16", "fp8_e4m3", "int8"])


@st.composite
def budget_cases(draw):
    dt = draw(dtypes)
    overrides = {
        "a": {"dtype": dt}, "b": {"dtype": dt}, "out": {"dtype": draw(st.sampled_from(["f32", "f16", "bf16"]))},
        "tile": tile(draw(dims), draw(dims), draw(dims)),
        "schedule": {"persistent": draw(st.booleans())},
        "triton": {"tma": draw(st.booleans()), "epilogue_subtile": draw(st.booleans())},
        "cute": {"tma_store": draw(st.booleans())},
        "epilogue": draw(st.sampled_from([[], [{"op": "bias"}], [{"op": "residual", "dtype": "bf16"}]])),
    }
    if draw(st.booleans()):
        overrides["pipeline"] = {"epilogue_stages": draw(st.integers(1, 4))}
    return spec(**overrides), parse_target(draw(st.sampled_from(ALL_TARGETS)))


@settings(max_examples=300, deadline=None)
@given(budget_cases())
def test_auto_stages_never_exceed_what_fits(case):
    s, target = case
    fit = max_ab_stages(s, target)
    assert fit == _brute_force_max(s, target)
    stages = resolve_ab_stages(s, target)
    ctx = rule_context(s, target)
    assert ctx.ab_stages == stages and ctx.budget == smem_budget(s, target, stages)
    if target.arch.startswith("tpu"):
        assert stages == 2  # Pallas TPU double-buffers each block, whatever fits
    elif fit >= MIN_STAGES:
        assert MIN_STAGES <= stages <= fit
        assert stages == min(design_for(s.kind, target).max_auto_stages, fit)
        assert ctx.budget.fits
        assert not [f for f in run_rules(ctx) if f.rule in ("SMEM001", "VMEM001")]
    else:  # auto never goes below a two-stage pipeline: the budget rule then says what does fit
        assert stages == MIN_STAGES
        memory_rule = "VMEM001" if target.arch.startswith("tpu") else "SMEM001"
        assert any(f.rule == memory_rule and f.severity == "error" for f in run_rules(ctx))


def test_explicit_stages_are_taken_as_written():
    s = spec(tile=tile(128, 256, 64), pipeline={"ab_stages": 9})
    for t in ("triton:sm90", "cute:sm100", "pallas:tpu_v5e"):
        assert resolve_ab_stages(s, parse_target(t)) == 9


def test_auto_stages_are_capped_per_backend():
    small = spec(tile=tile(64, 64, 32))
    for t in ALL_TARGETS:
        target = parse_target(t)
        if target.arch.startswith("tpu"):
            continue
        assert resolve_ab_stages(small, target) == design_for(small.kind, target).max_auto_stages
    caps = {t: design_for("gemm", t).max_auto_stages for t in ("cute:sm90", "cute:sm100", "triton:sm90", "triton:sm100")}
    # cute:sm100: as deep as SMEM allows for every tcgen05 tile the catalogue uses (fp8 256x128x128: 8)
    assert caps == {"cute:sm90": 8, "cute:sm100": 16, "triton:sm90": 4, "triton:sm100": 4}


def test_max_ab_stages_respects_its_limit():
    small = spec(tile=tile(16, 16, 16))
    target = parse_target("pallas:tpu_v5e")
    assert max_ab_stages(small, target) == 64
    assert max_ab_stages(small, target, limit=5) == 5


# --- the shipped catalogue ------------------------------------------------------------------------------
def test_shipped_specs_pass_every_rule_on_their_targets():
    for ls in load_paths([ROOT / "specs"]):
        for target in ls.spec.targets:
            errors = [f for f in run_rules(rule_context(ls.spec, target)) if f.severity == "error"]
            assert errors == [], (ls.name, str(target), errors)


# --- resolve once per (spec, target) --------------------------------------------------------------------
def _count_resolutions(monkeypatch) -> list[str]:
    """Every `Resolved` built, by (spec, target): however it is reached, a resolution builds one."""
    from specgen.resolve import Resolved

    seen: list[str] = []
    init = Resolved.__init__

    def counting(self, *args, **kwargs):
        init(self, *args, **kwargs)
        seen.append(f"{self.spec.name} @ {self.target}" + ("" if self.variant is None else f" #{self.variant}"))

    monkeypatch.setattr(Resolved, "__init__", counting)
    return seen


def test_check_and_render_resolve_each_spec_target_pair_once(monkeypatch, tmp_path):
    from specgen.check import check_all
    from specgen.render.catalogue import render_catalogue

    specs = load_paths([ROOT / "specs"])

    def resolutions(ls, t) -> list[str]:  # the target's default config, each of its variants and companions
        design = design_for(ls.spec.kind, t)
        renders = design is not None and design.renders_training_on(target_info(t))  # per target (Pallas: TPU only)
        # ... and a gated epilogue's backward only where the design renders it (the Triton design's)
        renders = renders and (design.renders_gated_training_on(target_info(t)) or gated_op(getattr(ls.spec, "epilogue", [])) is None)
        companions = ls.spec.for_target(t).companions() if renders else ()
        return [f"{ls.name} @ {t}", *(f"{ls.name} @ {t} #{i}" for i in range(len(ls.spec.variants_on(t)))),
                *(f"{c.name} @ {t}" for _, c, _ in companions)]

    pairs = sorted(r for ls in specs for t in ls.spec.targets for r in resolutions(ls, t))
    assert any("#" in p for p in pairs)  # the shipped specs have variants
    seen = _count_resolutions(monkeypatch)
    render_catalogue(specs, tmp_path, check=True)  # check, then every design's plan and render
    assert sorted(seen) == pairs
    seen.clear()
    check_all(specs)  # plain check: the listed targets only
    assert sorted(seen) == pairs
    seen.clear()
    check_all(specs, notes=True)  # notes resolve every other target too, once each
    assert sorted(seen) == sorted(r for ls in specs for t in ALL_TARGETS if design_for(ls.spec.kind, t)
                                  for r in resolutions(ls, t))  # (a target no design of the kind serves: a note only)


def test_rules_run_only_on_the_kinds_they_name(monkeypatch):
    ctx = ctx_for("triton:sm90", tile=tile(96, 128, 64))
    assert any(f.rule == "POW001" for f in run_rules(ctx))
    kinds = {k.KIND for k in KINDS}  # a rule is its kind's and its designs' (a kind reusing it: theirs too), or every kind's
    assert all(set(r.kinds) <= kinds for r in RULES)
    only_other = [dataclasses.replace(r, kinds=("grouped_gemm",)) if r.id == "POW001" else r for r in RULES]
    monkeypatch.setattr("specgen.rules.table.RULES", only_other)
    assert not any(f.rule == "POW001" for f in run_rules(ctx))


def test_rules_select_targets_by_table_facts_not_arch_names():
    """No rule, resolve step or design tests an arch name: the target table says what each target is."""
    import re

    rules = [p.relative_to(ROOT) for p in [*(ROOT / "specgen" / "rules").glob("*.py"),
                                           *(ROOT / "specgen" / "kinds").glob("*/designs/*/[dr][eu]*.py")]]  # design.py, rules.py
    assert len(rules) > 10
    for rel in (*rules, "specgen/resolve.py", "specgen/envelope/budget.py", "specgen/check.py", "specgen/compile.py"):
        text = (ROOT / rel).read_text()
        assert not re.search(r"arch\s*==|arch\.startswith|\"tpu|\"sm\d+\"|\"gpu_sm", text), rel
