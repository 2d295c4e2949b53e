#pragma once
// Atomic read-modify-write of 8- and 16-bit elements, which the hardware lacks: a CAS loop
// on the aligned 32-bit word that contains the element. The word never leaves the allocation:
// device allocations are at least 256-byte aligned and sized in 512-byte steps.
#include <cstdint>
#include <cstring>

namespace anvil::cuda_device {

// *addr = f(*addr), atomically. T is a 1- or 2-byte trivially copyable type.
template <typename T, typename F>
__device__ __forceinline__ void atomic_update_narrow(T* addr, const F& f) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2, "narrow atomics are for 8/16-bit types");
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  unsigned int* word = reinterpret_cast<unsigned int*>(a & ~uintptr_t{3});
  const unsigned shift = static_cast<unsigned>(a & 3) * 8;
  const unsigned mask = (sizeof(T) == 1 ? 0xFFu : 0xFFFFu) << shift;
  unsigned old = *word, assumed;
  do {
    assumed = old;
    unsigned bits = (assumed & mask) >> shift;
    T cur;
    memcpy(&cur, &bits, sizeof(T));  // little-endian: the low bytes
    T next = f(cur);
    unsigned next_bits = 0;
    memcpy(&next_bits, &next, sizeof(T));
    old = atomicCAS(word, assumed, (assumed & ~mask) | (next_bits << shift));
  } while (old != assumed);
}

}  // namespace anvil::cuda_device
