"""Dense tensor-core peaks (TFLOP/s) by GPU and operand width, for a bench row's "% of peak". Datasheet
figures (BASELINES.md: H200 bf16 ~990, B200 bf16 ~2250 and fp8 ~4500); a GPU not listed has no
percentage rather than a wrong one."""

from __future__ import annotations

# substring of torch.cuda.get_device_name() -> operand bits -> dense TFLOP/s
PEAKS: dict[str, dict[int, float]] = {
    "H200": {32: 494.7, 16: 989.4, 8: 1978.9},
    "H100": {32: 494.7, 16: 989.4, 8: 1978.9},  # SXM; the PCIe card is lower and reads as "H100 PCIe"
    "B200": {32: 1125.0, 16: 2250.0, 8: 4500.0},
}
SKIP = ("PCIe", "NVL")


def peak_tflops(gpu: str, operand_bits: int) -> float | None:
    if any(s in gpu for s in SKIP):
        return None
    for key, by_bits in PEAKS.items():
        if key in gpu:
            return by_bits.get(operand_bits)
    return None
