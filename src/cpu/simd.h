#pragma once
// Highway kernels for the contiguous hot paths (one source, the best SIMD target chosen at run
// time). Each returns false when it has no kernel for the request, so callers fall back.
#include <cstdint>

#include "core/params.h"

namespace anvil::cpu::simd {

bool convert(DType to, DType from, void* dst, const void* src, int64_t n);
bool binary(BinaryOp op, DType t, void* out, const void* a, const void* b, double alpha, int64_t n);
// Sum of n contiguous float32 / bfloat16 values: float32 lanes per 4096-element block, blocks in double.
bool sum(DType t, const void* in, int64_t n, double* out);
const char* target_name();

}  // namespace anvil::cpu::simd
