#pragma once
// Device side of programmatic dependent launch (PDL): kernels launched through launch_pdl
// (cuda/runtime.h) may start while the previous kernel in the stream drains.

namespace anvil::cuda_device {

// Lets the next kernel in the stream start launching its blocks (they run up to their own
// pdl_wait while this grid finishes).
__device__ __forceinline__ void pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
// Waits until the previous kernel in the stream has completed and its writes are visible. A
// kernel launched with launch_pdl reads nothing an earlier kernel writes, and writes nothing an
// earlier kernel reads, before this.
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

}  // namespace anvil::cuda_device
