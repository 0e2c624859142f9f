// The C entry's argument checks, run on a machine without a GPU (tests/export/test_export.py): every call
// here is refused (or is empty) before the entry loads a kernel or touches the CUDA runtime, on either
// arch's export. The pointers are never read: the checks look at their values only.
#include <cstdint>
#include <cstdio>

#include "specgen_kernels.h"

alignas(16) static char buffer[256];

static int failures = 0;

static void expect(const char *what, int got, int want) {
    if (got != want) {
        std::printf("FAIL %s: %d, want %d\n", what, got, want);
        ++failures;
    }
}

int main() {
    const void *a = buffer, *b = buffer + 64;
    void *out = buffer + 128;
    const void *odd = buffer + 2;  // 2-byte aligned: bf16, not 16 bytes
    // gemm_bf16: A (M, K) and B (K, N) both K-major (a[m * lda + k], b[n * ldb + k]), out (M, N) row-major
    expect("negative M", specgen_gemm_bf16(-1, 64, 64, a, 64, b, 64, out, 64, nullptr), SPECGEN_ERROR_INVALID_VALUE);
    expect("negative K", specgen_gemm_bf16(64, 64, -1, a, 64, b, 64, out, 64, nullptr), SPECGEN_ERROR_INVALID_VALUE);
    expect("M = 0", specgen_gemm_bf16(0, 64, 64, nullptr, 0, nullptr, 0, nullptr, 0, nullptr), SPECGEN_SUCCESS);
    expect("N = 0", specgen_gemm_bf16(64, 0, 64, nullptr, 0, nullptr, 0, nullptr, 0, nullptr), SPECGEN_SUCCESS);
    expect("null a", specgen_gemm_bf16(64, 64, 64, nullptr, 64, b, 64, out, 64, nullptr), SPECGEN_ERROR_INVALID_VALUE);
    expect("lda < K", specgen_gemm_bf16(64, 64, 64, a, 32, b, 64, out, 64, nullptr), SPECGEN_ERROR_INVALID_VALUE);
    expect("ldb < K", specgen_gemm_bf16(64, 64, 64, a, 64, b, 32, out, 64, nullptr), SPECGEN_ERROR_INVALID_VALUE);
    expect("null out", specgen_gemm_bf16(64, 64, 64, a, 64, b, 64, nullptr, 64, nullptr), SPECGEN_ERROR_INVALID_VALUE);
    expect("ldout < N", specgen_gemm_bf16(64, 64, 64, a, 64, b, 64, out, 32, nullptr), SPECGEN_ERROR_INVALID_VALUE);
    expect("a off 16 bytes", specgen_gemm_bf16(64, 64, 64, odd, 64, b, 64, out, 64, nullptr), SPECGEN_ERROR_MISALIGNED);
    expect("lda * 2 bytes off 16", specgen_gemm_bf16(64, 64, 64, a, 65, b, 64, out, 64, nullptr), SPECGEN_ERROR_MISALIGNED);
    expect("out off 16 bytes", specgen_gemm_bf16(64, 64, 64, a, 64, b, 64, buffer + 130, 64, nullptr),
           SPECGEN_ERROR_MISALIGNED);
    expect("ldout * 2 bytes off 16", specgen_gemm_bf16(64, 64, 64, a, 64, b, 64, out, 66, nullptr), SPECGEN_ERROR_MISALIGNED);
    // bmm_bf16 (batched): the batch count and each operand's batch stride
    expect("negative batch", specgen_bmm_bf16(64, 64, 64, -1, a, 64, 4096, b, 64, 4096, out, 64, 4096, nullptr),
           SPECGEN_ERROR_INVALID_VALUE);
    expect("batch = 0", specgen_bmm_bf16(64, 64, 64, 0, a, 64, 4096, b, 64, 4096, out, 64, 4096, nullptr), SPECGEN_SUCCESS);
    expect("batch_stride_a * 2 bytes off 16", specgen_bmm_bf16(64, 64, 64, 2, a, 64, 4097, b, 64, 4096, out, 64, 4096, nullptr),
           SPECGEN_ERROR_MISALIGNED);
    expect("batch_stride_out * 2 bytes off 16",
           specgen_bmm_bf16(64, 64, 64, 2, a, 64, 4096, b, 64, 4096, out, 64, 4100, nullptr), SPECGEN_ERROR_MISALIGNED);
    std::printf("%s\n", failures ? "FAILED" : "all refused");
    return failures ? 1 : 0;
}
