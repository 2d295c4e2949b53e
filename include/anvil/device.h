#pragma once
#include <cstdint>
#include <string>

#include "anvil/export.h"

namespace anvil {

enum class DeviceType : int8_t { CPU, CUDA };
inline constexpr DeviceType kCPU = DeviceType::CPU;
inline constexpr DeviceType kCUDA = DeviceType::CUDA;

struct ANVIL_API Device {
  DeviceType type = kCPU;
  int index = 0;
  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(t == kCPU ? 0 : i) {}  // NOLINT: implicit like libtorch
  explicit Device(const std::string& spec);  // "cpu", "cuda", "cuda:1"
  constexpr bool is_cpu() const { return type == kCPU; }
  constexpr bool is_cuda() const { return type == kCUDA; }
  constexpr bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  std::string str() const;  // "cpu", "cuda:0"
};

}  // namespace anvil
