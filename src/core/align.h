#pragma once
// The 16-byte alignment that the 16-byte vector load paths need (CUDA launchers, op front ends):
// one definition.
#include <cstddef>
#include <cstdint>

namespace anvil {

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Rows of `elem`-byte elements read with 16-byte loads: an aligned base and, when a second row
// is read, a row stride of whole 16 bytes.
inline bool rows_aligned16(const void* p, int64_t rows, int64_t stride_row, size_t elem) {
  return aligned16(p) && (rows <= 1 || (stride_row * static_cast<int64_t>(elem)) % 16 == 0);
}

}  // namespace anvil
