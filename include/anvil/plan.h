#pragma once
// How a fused op runs for given arguments: as its backend's one kernel (Fused), or as the
// composition of public ops its comment in anvil/nn.h gives (Composed). Each fused op asks its
// backend before it runs, and has a *_plan query that asks the same question; the answer depends
// on the device, dtypes, shapes, strides and alignment, never on values.
#include <cstdint>

namespace anvil {

enum class FusedPlan : int8_t { Fused, Composed };

constexpr const char* plan_name(FusedPlan p) { return p == FusedPlan::Fused ? "fused" : "composed"; }

}  // namespace anvil
