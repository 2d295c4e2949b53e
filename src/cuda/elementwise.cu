// unary, binary, where and clamp on CUDA. Per-element semantics come from core/element.h, so
// results match the CPU backend except integer division by zero: the CPU throws, CUDA cannot
// report from the device without a sync and returns apply_binary's 0, as documented.
#include <cstring>

#include "core/dispatch.h"
#include "core/element.h"
#include "core/kernels/elementwise.h"
#include "cuda/device/map.cuh"
#include "cuda/map_launch.cuh"
#include "cuda/runtime.h"

namespace anvil::cuda_backend {
namespace {

template <typename T>
struct UnaryFn {
  UnaryOp op;
  __device__ T operator()(T x) const {
    using M = opmath_t<T>;
    return static_cast<T>(apply_unary<M>(op, static_cast<M>(x)));
  }
};

template <typename Out, typename T>
struct LogicalNotFn {
  __device__ Out operator()(T x) const { return convert<Out>(!convert<bool>(x)); }
};

template <typename T>
struct BinaryFn {
  BinaryOp op;
  opmath_t<T> alpha;
  __device__ T operator()(T a, T b) const {
    using M = opmath_t<T>;
    bool div_by_zero = false;  // integer x / 0 gives 0 here; see the file comment
    return static_cast<T>(apply_binary<M>(op, static_cast<M>(a), static_cast<M>(b), alpha, &div_by_zero));
  }
};

template <typename T>
struct CompareFn {
  BinaryOp op;
  __device__ bool operator()(T a, T b) const {
    using M = opmath_t<T>;
    return apply_compare<M>(op, static_cast<M>(a), static_cast<M>(b));
  }
};

// where moves elements, so it runs per element size on host-made bit patterns. The condition
// is read as bytes (!= 0) so that a non-canonical bool byte cannot reach a select.
template <typename U>
struct WhereFn {
  bool a_tensor, b_tensor;
  U a_scalar, b_scalar;
  __device__ void operator()(const ElementwiseParams& p, const int64_t* off) const {
    bool c = static_cast<const uint8_t*>(p.ptr[1])[off[1]] != 0;
    U v;
    if (c) v = a_tensor ? static_cast<const U*>(p.ptr[2])[off[2]] : a_scalar;
    else v = b_tensor ? static_cast<const U*>(p.ptr[3])[off[3]] : b_scalar;
    static_cast<U*>(p.ptr[0])[off[0]] = v;
  }
};

template <typename T>
struct ClampScalarFn {
  bool has_lo, has_hi;
  opmath_t<T> lo, hi;
  __device__ T operator()(T x) const {
    using M = opmath_t<T>;
    return static_cast<T>(apply_clamp<M>(static_cast<M>(x), has_lo, lo, has_hi, hi));
  }
};

template <typename T>
struct ClampTensorFn {
  bool has_lo, has_hi;
  opmath_t<T> lo_scalar, hi_scalar;
  __device__ void operator()(const ElementwiseParams& p, const int64_t* off) const {
    using M = opmath_t<T>;
    M x = static_cast<M>(static_cast<const T*>(p.ptr[1])[off[1]]);
    M lo = p.ptr[2] ? static_cast<M>(static_cast<const T*>(p.ptr[2])[off[2]]) : lo_scalar;
    M hi = p.ptr[3] ? static_cast<M>(static_cast<const T*>(p.ptr[3])[off[3]]) : hi_scalar;
    static_cast<T*>(p.ptr[0])[off[0]] = static_cast<T>(apply_clamp<M>(x, has_lo, lo, has_hi, hi));
  }
};

template <typename U>
U scalar_bits(DType t, const ScalarArg& s) {
  return dispatch_all_types(t, "[where]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    U bits{};
    if constexpr (sizeof(T) == sizeof(U)) {
      T v = scalar_as<T>(s);
      std::memcpy(&bits, &v, sizeof(T));
    }
    return bits;
  });
}

}  // namespace

void unary(const ElementwiseParams& p) {
  if (p.numel == 0) return;
  KernelLaunch launch(p.ptr[0]);
  auto op = static_cast<UnaryOp>(p.op);
  if (op == UnaryOp::LogicalNot) {
    dispatch_all_types(p.dtype, "[logical_not]", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (p.out_dtype == kBool)
        cuda_device::launch_map1<bool, T>(p, LogicalNotFn<bool, T>{}, launch.stream(), launch.sm_count());
      else
        cuda_device::launch_map1<T, T>(p, LogicalNotFn<T, T>{}, launch.stream(), launch.sm_count());
    });
  } else {
    dispatch_arith_types(p.dtype, "[unary]", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (is_arith_v<T>)
        cuda_device::launch_map1<T, T>(p, UnaryFn<T>{op}, launch.stream(), launch.sm_count());
    });
  }
  launch.check("[unary]");
}

// With nargs 2 the second operand is the number p.scalar0 (a tensor op a Python number), bound
// into the functor: one map over a, no 0-d tensor on the device.
template <typename F, typename T>
struct ScalarB {
  F f;
  T b;
  __device__ auto operator()(T a) const { return f(a, b); }
};

void binary(const ElementwiseParams& p) {
  if (p.numel == 0) return;
  KernelLaunch launch(p.ptr[0]);
  auto op = static_cast<BinaryOp>(p.op);
  const bool scalar_b = p.nargs == 2;
  dispatch_arith_types(p.dtype, "[binary]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!is_arith_v<T>) {
      return;
    } else {
      const T b = scalar_b ? static_cast<T>(scalar_op<T>(p.scalar0)) : T{};
      const BinaryFn<T> fn{op, scalar_op<T>(p.alpha)};
      if (is_compare(op) && scalar_b)
        cuda_device::launch_map1<bool, T>(p, ScalarB<CompareFn<T>, T>{CompareFn<T>{op}, b}, launch.stream(),
                                          launch.sm_count());
      else if (is_compare(op)) cuda_device::launch_map2<bool, T>(p, CompareFn<T>{op}, launch.stream(), launch.sm_count());
      else if (scalar_b) cuda_device::launch_map1<T, T>(p, ScalarB<BinaryFn<T>, T>{fn, b}, launch.stream(), launch.sm_count());
      else cuda_device::launch_map2<T, T>(p, fn, launch.stream(), launch.sm_count());
    }
  });
  launch.check("[binary]");
}

// a = in2, or scalar0 when slot 2 is absent (null, has_a false); b = in3 when has_b, else the
// next unused scalar (scalar0, or scalar1 when a took scalar0). Values are of out_dtype.
void where(const ElementwiseParams& p) {
  if (p.numel == 0) return;
  KernelLaunch launch(p.ptr[0]);
  bool a_tensor = p.has_a || p.ptr[2] != nullptr;
  bool b_tensor = p.has_b;
  dispatch_element_size(element_size(p.out_dtype), "[where]", [&](auto tag) {
    using U = typename decltype(tag)::type;
    U a_scalar = a_tensor ? U{} : scalar_bits<U>(p.out_dtype, p.scalar0);
    U b_scalar = b_tensor ? U{} : scalar_bits<U>(p.out_dtype, a_tensor ? p.scalar0 : p.scalar1);
    cuda_device::launch_map_slots<4>(p, WhereFn<U>{a_tensor, b_tensor, a_scalar, b_scalar}, launch.stream(),
                                     launch.sm_count());
  });
  launch.check("[where]");
}

template <typename T>
struct FrexpFn {
  __device__ void operator()(const ElementwiseParams& p, const int64_t* off) const {
    using M = opmath_t<T>;
    const M x = static_cast<M>(static_cast<const T*>(p.ptr[2])[off[2]]);
    static_cast<T*>(p.ptr[0])[off[0]] = static_cast<T>(frexp_of<M>(x, static_cast<int32_t*>(p.ptr[1]) + off[1]));
  }
};

void frexp(const ElementwiseParams& p) {
  if (p.numel == 0) return;
  KernelLaunch launch(p.ptr[0]);
  dispatch_float_types(p.dtype, "[frexp]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda_device::launch_map_slots<3>(p, FrexpFn<T>{}, launch.stream(), launch.sm_count());
  });
  launch.check("[frexp]");
}

// has_a / has_b say whether lo / hi exist; each comes from its tensor slot (2 / 3) when that
// pointer is set, else from scalar0 / scalar1.
void clamp(const ElementwiseParams& p) {
  if (p.numel == 0) return;
  KernelLaunch launch(p.ptr[0]);
  dispatch_real_types(p.dtype, "[clamp]", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_real_arith_v<T>) {
      auto lo = scalar_op<T>(p.scalar0), hi = scalar_op<T>(p.scalar1);
      if (p.ptr[2] == nullptr && p.ptr[3] == nullptr) {
        cuda_device::launch_map1<T, T>(p, ClampScalarFn<T>{p.has_a, p.has_b, lo, hi}, launch.stream(),
                                       launch.sm_count());
      } else {
        cuda_device::launch_map_slots<4>(p, ClampTensorFn<T>{p.has_a, p.has_b, lo, hi}, launch.stream(),
                                         launch.sm_count());
      }
    }
  });
  launch.check("[clamp]");
}

}  // namespace anvil::cuda_backend
