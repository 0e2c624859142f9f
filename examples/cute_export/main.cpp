// Calls one exported CuTe kernel from C++ with no Python: out = A @ B (gemm_bf16, A (M, K) and B stored
// (N, K), both K-major), checked against a float reference on the host. `main M N K [--bench CALLS]`
// prints the first result's time from process start, and with --bench the host cost per launch.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "specgen_kernels.h"

static const auto process_start = std::chrono::steady_clock::now();

static uint16_t to_bf16(float f) {  // round to nearest even (finite inputs)
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

static float from_bf16(uint16_t h) {
    uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

static double ms_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

int main(int argc, char **argv) {
    const int M = argc > 3 ? std::atoi(argv[1]) : 256, N = argc > 3 ? std::atoi(argv[2]) : 512, K = argc > 3 ? std::atoi(argv[3]) : 128;
    const int calls = argc > 5 && std::strcmp(argv[4], "--bench") == 0 ? std::atoi(argv[5]) : 0;
    std::vector<uint16_t> a(size_t(M) * K), b(size_t(N) * K), out(size_t(M) * N);
    for (size_t i = 0; i < a.size(); ++i) a[i] = to_bf16(float(int(i * 7 % 13) - 6) / 8);
    for (size_t i = 0; i < b.size(); ++i) b[i] = to_bf16(float(int(i * 5 % 11) - 5) / 8);
    void *da, *db, *dout;
    cudaMalloc(&da, a.size() * 2);
    cudaMalloc(&db, b.size() * 2);
    cudaMalloc(&dout, out.size() * 2);
    cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice);
    // a[m * lda + k]; B is (K, N) K-major: b[n * ldb + k]; out[m * ldout + n]
    int rc = specgen_gemm_bf16(M, N, K, da, K, db, K, dout, N, nullptr);
    if (rc == 0) rc = cudaDeviceSynchronize();
    if (rc != 0) { std::fprintf(stderr, "specgen_gemm_bf16 failed: %d\n", rc); return 1; }
    std::printf("first result %.1f ms after process start\n", ms_since(process_start));
    cudaMemcpy(out.data(), dout, out.size() * 2, cudaMemcpyDeviceToHost);
    double worst = 0;
    for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n) {
            float ref = 0;
            for (int k = 0; k < K; ++k) ref += from_bf16(a[size_t(m) * K + k]) * from_bf16(b[size_t(n) * K + k]);
            worst = std::fmax(worst, std::fabs(from_bf16(out[size_t(m) * N + n]) - ref) / (1 + std::fabs(ref)));
        }
    std::printf("max relative error %.3g over %dx%dx%d\n", worst, M, N, K);
    if (calls > 0) {
        auto t = std::chrono::steady_clock::now();
        for (int i = 0; i < calls; ++i) specgen_gemm_bf16(M, N, K, da, K, db, K, dout, N, nullptr);
        double host_us = ms_since(t) * 1000 / calls;
        cudaDeviceSynchronize();
        std::printf("host cost %.2f us per call over %d calls\n", host_us, calls);
    }
    return worst < 1e-2 ? 0 : 2;
}
