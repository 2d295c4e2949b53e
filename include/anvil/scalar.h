#pragma once
// A host number that an op takes by value (fill value, clamp bound, alpha), like c10::Scalar.
#include <complex>
#include <cstdint>
#include <type_traits>

#include "anvil/dtype.h"
#include "anvil/export.h"

namespace anvil {

class ANVIL_API Scalar {
 public:
  enum class Kind : int8_t { Bool, Int, UInt, Double, Complex };
  Scalar() : kind_(Kind::Int), i_(0) {}
  Scalar(bool v) : kind_(Kind::Bool), i_(v) {}  // NOLINT
  template <typename T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Scalar(T v) {  // NOLINT
    if constexpr (std::is_unsigned_v<T>) {
      if (static_cast<uint64_t>(v) > static_cast<uint64_t>(INT64_MAX)) {
        kind_ = Kind::UInt;
        u_ = static_cast<uint64_t>(v);
        return;
      }
    }
    kind_ = Kind::Int;
    i_ = static_cast<int64_t>(v);
  }
  Scalar(float v) : kind_(Kind::Double), d_(v) {}   // NOLINT
  Scalar(double v) : kind_(Kind::Double), d_(v) {}  // NOLINT
  Scalar(Half v) : kind_(Kind::Double), d_(static_cast<float>(v)) {}      // NOLINT
  Scalar(BFloat16 v) : kind_(Kind::Double), d_(static_cast<float>(v)) {}  // NOLINT
  Scalar(std::complex<double> v) : kind_(Kind::Complex), d_(v.real()), im_(v.imag()) {}  // NOLINT
  Scalar(std::complex<float> v) : kind_(Kind::Complex), d_(v.real()), im_(v.imag()) {}   // NOLINT

  Kind kind() const { return kind_; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_integral() const { return kind_ == Kind::Int || kind_ == Kind::UInt; }
  bool is_floating_point() const { return kind_ == Kind::Double; }
  bool is_complex() const { return kind_ == Kind::Complex; }
  double to_double() const;
  int64_t to_int64() const;
  uint64_t to_uint64() const;
  bool to_bool() const;
  std::complex<double> to_complex() const;
  // The dtype a Python number of this kind takes in promotion: bool, int64, float32 (default), complex64.
  DType default_dtype() const;

 private:
  Kind kind_;
  union {
    int64_t i_;
    uint64_t u_;
    double d_;
  };
  double im_ = 0.0;
};

}  // namespace anvil
