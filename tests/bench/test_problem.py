"""The GEMM kind's problem module (specgen/kinds/gemm/problem.py), which bench and tune reach through the
kinds' line-up: its shapes and their parsing, its flops and bytes, its peers per dtype and target, and the
kind-neutral front (bench/problem.py, bench/shapes.py) that finds it. On a CPU: no torch is needed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from specgen.bench import shapes as bench_shapes
from specgen.bench.problem import ShapeError, problem_for, problem_of, shape_text
from specgen.kinds.gemm import problem
from specgen.kinds.gemm.problem import Shape
from specgen.kinds.lineup import KINDS
from specgen.spec.load import load_paths
from specgen.spec.models import parse_target

ROOT = Path(__file__).resolve().parents[2]
SPECS = {ls.name: ls.spec for ls in load_paths([ROOT / "specs"])}
API = ("Shape", "shape", "parse_shapes", "default_shapes", "slot_for", "runs_at", "flops", "bytes_moved",
       "operand_bits", "record_shape", "config_label", "inputs", "peer_name", "peer_call")


def test_every_kind_has_a_problem_module_with_the_api():
    for kind in KINDS:
        module = problem_for(kind.KIND)
        assert [name for name in API if not callable(getattr(module, name, None))] == []
    assert problem_for("gemm") is problem and problem_of(SPECS["gemm_bf16"]) is problem
    with pytest.raises(ValueError, match="no kind 'attention'"):
        problem_for("attention")


def test_flops_count_two_per_multiply_add_per_batch():
    assert problem.flops(Shape(8192, 8192, 8192)) == 2 * 8192**3 == 1_099_511_627_776
    assert problem.flops(Shape(16, 8192, 8192)) == 2_147_483_648
    assert problem.flops(Shape(2048, 2048, 2048, 8)) == 8 * 2 * 2048**3
    assert problem.flops(Shape(1, 1, 1)) == 2


def test_bytes_moved_counts_operands_output_and_epilogue_tensors():
    mb = 4096 * 4096
    assert problem.bytes_moved(SPECS["gemm_bf16"], Shape(4096, 4096, 4096)) == 3 * 2 * mb  # A, B, out in bf16
    assert problem.bytes_moved(SPECS["bmm_bf16"], Shape(4096, 4096, 4096, 4)) == 4 * 3 * 2 * mb
    m, n, k = 16, 8192, 4096
    # fp8 A and B (1 byte), a bf16 output, f32 scales along M and along N
    assert problem.bytes_moved(SPECS["gemm_fp8_rowwise"], Shape(m, n, k)) == m * k + k * n + 2 * m * n + 4 * m + 4 * n
    # a bias along N in bf16
    assert problem.bytes_moved(SPECS["gemm_bias_gelu_bf16"], Shape(m, n, k)) == 2 * (m * k + k * n + m * n) + 2 * n
    # alpha is a scalar (no bytes), the residual C an (M, N) matrix per batch
    assert problem.bytes_moved(SPECS["gemm_residual_tpu"], Shape(m, n, k)) == 2 * (m * k + k * n) + 4 * m * n * 2


def test_operand_bits_record_shape_and_runs_at():
    assert problem.operand_bits(SPECS["gemm_bf16"]) == 16
    assert problem.operand_bits(SPECS["gemm_fp8_rowwise"]) == 8
    assert problem.record_shape(Shape(16, 8192, 4096)) == ((16, 8192, 4096), 1)
    assert problem.record_shape(Shape(128, 4096, 4096, 8)) == ((128, 4096, 4096), 8)
    assert problem.runs_at(SPECS["gemm_bf16"], Shape(8, 8, 8)) and not problem.runs_at(SPECS["gemm_bf16"], Shape(8, 8, 8, 2))
    assert problem.runs_at(SPECS["bmm_bf16"], Shape(8, 8, 8, 2)) and problem.runs_at(SPECS["bmm_bf16"], Shape(8, 8, 8))


def test_shapes_parse_print_and_round_trip():
    got = problem.parse_shapes("8192x8192x8192, 16X8192x8192,8x128x256x64,,")
    assert got == [Shape(8192, 8192, 8192), Shape(16, 8192, 8192), Shape(128, 256, 64, 8)]
    assert [str(s) for s in got] == ["8192x8192x8192", "16x8192x8192", "8x128x256x64"]
    assert problem.parse_shapes(",".join(map(str, problem.MODEL_SHAPES + problem.BATCHED))) == \
        list(problem.MODEL_SHAPES + problem.BATCHED)
    assert problem.parse_shapes("0064x2x3") == [Shape(64, 2, 3)]
    assert problem.shape((1, 2, 3)) == Shape(1, 2, 3) and problem.shape((1, 2, 3, 4)).batch == 4
    assert shape_text(Shape(3, 4, 5, 2)) == "2x3x4x5" and shape_text((13, 64, 64)) == "13x64x64"


@pytest.mark.parametrize(("text", "message"), [
    ("8192x8192", "shape '8192x8192' is not MxNxK or BxMxNxK with positive integers in ASCII digits "
                  "(in --shapes '8192x8192')"),
    ("1x2x3x4x5", "shape '1x2x3x4x5' is not MxNxK or BxMxNxK"),
    ("0x8x8", "shape '0x8x8' is not MxNxK"),
    ("8x-8x8", "shape '8x-8x8' is not MxNxK"),
    ("axbxc", "shape 'axbxc' is not MxNxK"),
    ("8x8x8.5", "shape '8x8x8.5' is not MxNxK"),
    ("１２８x8x8", "is not MxNxK or BxMxNxK with positive integers in ASCII digits"),
    ("2²x8x8", "in ASCII digits"),
    ("2147483648x8x8", "shape '2147483648x8x8': a size past 2147483647, the largest a launcher takes (int32)"),
    ("8x8x" + "9" * 4400, "a size past 2147483647"),
    ("", "--shapes '' names no shape"),
    (" , ,", "--shapes ' , ,' names no shape"),
])
def test_shape_errors_say_what_is_wrong(text: str, message: str):
    with pytest.raises(ShapeError) as e:
        problem.parse_shapes(text)
    assert message in str(e.value)
    assert problem.parse_shapes("2147483647x1x1") == [Shape(2147483647, 1, 1)]  # int32's largest is a size


def test_peer_per_dtype_epilogue_and_target():
    sm90, tpu = parse_target("triton:sm90"), parse_target("pallas:tpu_v5e")
    peers = {name: problem.peer_name(SPECS[name], sm90) for name in
             ("gemm_bf16", "gemm_relu_f16", "bmm_bf16", "gemm_fp8_rowwise", "gemm_bias_gelu_bf16", "gemm_residual_bf16")}
    assert peers == {"gemm_bf16": "cuBLAS (torch.matmul)", "gemm_relu_f16": "eager torch", "bmm_bf16": "cuBLAS (torch.matmul)",
                     "gemm_fp8_rowwise": "torch._scaled_mm", "gemm_bias_gelu_bf16": "eager torch",
                     "gemm_residual_bf16": "eager torch"}
    fp8 = SPECS["gemm_fp8_rowwise"]
    chained = fp8.model_copy(update={"epilogue": [*fp8.epilogue, *SPECS["gemm_bias_gelu_bf16"].epilogue[1:]]})
    assert len(chained.epilogue) > 1 and problem.peer_name(chained, sm90) == "torch._scaled_mm + eager"
    assert {problem.peer_name(SPECS[n], tpu) for n in ("gemm_bf16_tpu", "gemm_bias_gelu_tpu")} == {"XLA (jax.jit)"}


def test_default_shapes_and_slots_through_the_kind_neutral_front():
    spec, t = SPECS["gemm_bf16"], parse_target("triton:sm90")
    assert bench_shapes.default_shapes(spec, t) == problem.default_shapes(spec, t)
    assert bench_shapes.default_shapes(SPECS["bmm_bf16"], t)[-3:] == list(problem.BATCHED)
    for s in problem.MODEL_SHAPES:
        assert bench_shapes.slot_for(spec, t, s) == problem.slot_for(spec, t, s)
    assert bench_shapes.parse_shapes("8x8x8", "gemm") == [Shape(8, 8, 8)]


def test_config_label_is_the_tile_and_split():
    spec = SPECS["gemm_bf16"]
    tile = spec.tile
    assert problem.config_label(spec).startswith(f"{tile.m}x{tile.n}x{tile.k}")
    split = spec.model_copy(update={"schedule": spec.schedule.model_copy(update={"split_k": 4})})
    assert problem.config_label(split) == f"{tile.m}x{tile.n}x{tile.k} split-K 4" + (
        " atomic" if split.schedule.split_k_reduction == "atomic" else "")


def test_the_problem_module_imports_no_gpu_library_and_no_bench():
    """`check` reads config_label from it: it must stay light (peers.py holds torch and jax, imported late)."""
    code = ("import sys; import specgen.kinds.gemm.problem as p; p.config_label; "
            "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'triton', 'jax', 'cutlass', 'numpy'}); "
            "print(heavy, sorted(m for m in sys.modules if m.startswith('specgen.bench')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == "[] []"
