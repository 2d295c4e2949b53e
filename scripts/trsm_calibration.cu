// Calibration of CUDA's blocked triangular-solve plan (src/cuda/linalg.cu, use_blocked_triangular):
// cuBLAS trsm against the recursive blocked solve (gemm between trsm leaves of 64 / 128 / 256 /
// 512) for left lower unit float32 / float64 systems, times from CUDA events, the largest
// difference to trsm's result. Build and run on the GPU machine:
//   nvcc -O2 -arch=sm_90 scripts/trsm_calibration.cu -o cal -lcublas && ./cal
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <vector>
#include <algorithm>
#include <random>
template <typename T> cublasStatus_t trsm(cublasHandle_t h, int m, int n, const T* a, int lda, T* b, int ldb);
template <> cublasStatus_t trsm<float>(cublasHandle_t h, int m, int n, const float* a, int lda, float* b, int ldb) {
  const float one = 1; return cublasStrsm(h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, CUBLAS_DIAG_UNIT, m, n, &one, a, lda, b, ldb); }
template <> cublasStatus_t trsm<double>(cublasHandle_t h, int m, int n, const double* a, int lda, double* b, int ldb) {
  const double one = 1; return cublasDtrsm(h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, CUBLAS_DIAG_UNIT, m, n, &one, a, lda, b, ldb); }
template <typename T> void gemm(cublasHandle_t h, int m, int n, int k, const T* a, int lda, const T* b, int ldb, T* c, int ldc);
template <> void gemm<float>(cublasHandle_t h, int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc) {
  const float one = 1, m1 = -1; cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &m1, a, lda, b, ldb, &one, c, ldc); }
template <> void gemm<double>(cublasHandle_t h, int m, int n, int k, const double* a, int lda, const double* b, int ldb, double* c, int ldc) {
  const double one = 1, m1 = -1; cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &m1, a, lda, b, ldb, &one, c, ldc); }
template <typename T>
void rec(cublasHandle_t h, int n, int k, int leaf, const T* a, T* x, int lo, int hi) {
  if (hi - lo <= leaf) { trsm<T>(h, hi - lo, k, a + lo + (size_t)lo * n, n, x + lo, n); return; }
  int mid = lo + std::max(leaf, (hi - lo) / 2 / leaf * leaf);
  rec<T>(h, n, k, leaf, a, x, lo, mid);
  gemm<T>(h, hi - mid, k, mid - lo, a + mid + (size_t)lo * n, n, x + lo, n, x + mid, n);
  rec<T>(h, n, k, leaf, a, x, mid, hi);
}
template <typename T>
void run(cublasHandle_t h, int n, int k) {
  std::vector<T> ha((size_t)n * n), hb((size_t)n * k);
  std::mt19937 g(1); std::normal_distribution<double> d;
  for (auto& v : ha) v = d(g) / n;
  for (auto& v : hb) v = d(g);
  T *a, *b, *x;
  cudaMalloc(&a, ha.size() * sizeof(T)); cudaMalloc(&b, hb.size() * sizeof(T)); cudaMalloc(&x, hb.size() * sizeof(T));
  cudaMemcpy(a, ha.data(), ha.size() * sizeof(T), cudaMemcpyHostToDevice);
  cudaMemcpy(b, hb.data(), hb.size() * sizeof(T), cudaMemcpyHostToDevice);
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  auto time = [&](auto fn) {
    for (int i = 0; i < 2; ++i) fn();
    cudaEventRecord(e0); const int reps = 10;
    for (int i = 0; i < reps; ++i) fn();
    cudaEventRecord(e1); cudaEventSynchronize(e1); float ms; cudaEventElapsedTime(&ms, e0, e1); return ms * 1000 / reps; };
  const float t_lib = time([&] { cudaMemcpyAsync(x, b, hb.size() * sizeof(T), cudaMemcpyDeviceToDevice); trsm<T>(h, n, k, a, n, x, n); });
  std::vector<T> r1(hb.size()), r2(hb.size());
  cudaMemcpy(r1.data(), x, hb.size() * sizeof(T), cudaMemcpyDeviceToHost);
  printf("%s n %5d k %5d  trsm %9.1f us", sizeof(T) == 4 ? "f32" : "f64", n, k, t_lib);
  for (int leaf : {64, 128, 256, 512}) {
    if (leaf >= n) continue;
    const float t = time([&] { cudaMemcpyAsync(x, b, hb.size() * sizeof(T), cudaMemcpyDeviceToDevice); rec<T>(h, n, k, leaf, a, x, 0, n); });
    cudaMemcpy(r2.data(), x, hb.size() * sizeof(T), cudaMemcpyDeviceToHost);
    double diff = 0, mx = 0;
    for (size_t i = 0; i < r1.size(); ++i) { diff = std::max(diff, (double)std::abs(r1[i] - r2[i])); mx = std::max(mx, (double)std::abs(r1[i])); }
    printf(" | leaf %3d %9.1f us (%.2fx, rel %.1e)", leaf, t, t_lib / t, diff / mx);
  }
  printf("\n");
  cudaFree(a); cudaFree(b); cudaFree(x);
}
int main() {
  cublasHandle_t h; cublasCreate(&h);
  for (int n : {256, 512, 1024, 2048, 4096, 8192})
    for (int k : {1, 16, 64, 512, 4096}) { run<float>(h, n, k); }
  for (int n : {512, 1024, 4096})
    for (int k : {1, 64, 1024}) run<double>(h, n, k);
}
