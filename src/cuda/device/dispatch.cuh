#pragma once
// Device-side dtype dispatch, for a dtype that is uniform per launch but read in the kernel (an
// output's or a mask's): one kernel instance serves every dtype of the list, at the cost of one
// well-predicted branch per access, where a host dispatch would multiply the instances. The lists
// are core/dispatch.h's (ANVIL_*_DTYPES); the launcher checks the dtype with that host helper
// first, which throws DTypeError, so a dtype outside the list never reaches the device, and the
// helpers tell the compiler so (__builtin_unreachable). A __trap() there instead cost 3-6 % on
// small kernels (H200: softmax f32 32x128 3.25 -> 3.36 us, attention decode hd80 ctx 4096 10.0
// -> 10.4 us).
#include "core/dispatch.h"

namespace anvil::cuda_device {

#define ANVIL_DEVICE_CASE(enum_value, cpp_type) \
  case enum_value:                              \
    f(TypeTag<cpp_type>{});                     \
    return;
#define ANVIL_DEVICE_IF(enum_value, cpp_type) \
  if (t == enum_value) return f(TypeTag<cpp_type>{});

// float16, bfloat16, float32, float64 (dispatch_float_types on the host).
template <typename F>
__device__ __forceinline__ void dispatch_float_types_device(DType t, F&& f) {
  ANVIL_FLOAT_DTYPES(ANVIL_DEVICE_IF)
  __builtin_unreachable();
}

// Every dtype (dispatch_all_types on the host).
template <typename F>
__device__ __forceinline__ void dispatch_all_types_device(DType t, F&& f) {
  switch (t) {
    ANVIL_ALL_DTYPES(ANVIL_DEVICE_CASE)
    default:
      __builtin_unreachable();
  }
}

#undef ANVIL_DEVICE_CASE
#undef ANVIL_DEVICE_IF

}  // namespace anvil::cuda_device
