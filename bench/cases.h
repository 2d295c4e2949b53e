#pragma once
// bench-ops cases: each knows the bytes it moves, the ceiling its fraction refers to, and a
// JSON spec from which scripts/torch_bench_ops.py builds the same case in PyTorch.
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "anvil/anvil.h"

namespace anvil::bench {

// run(i) makes call number i (a case rotates its own input copies); prepare() allocates the
// inputs and returns run, so only the running case holds device memory.
using Runner = std::function<void(int)>;
struct Case {
  std::string name;
  double bytes = 0;              // bytes read + written by one call
  std::string ceiling = "copy";  // "copy", "read" or "gemm" (flops against mm of `dtype`)
  std::function<Runner()> prepare;
  std::string group;             // cases of a group get a geometric-mean line (e.g. decode-linear)
  nlohmann::json spec;           // {"op": ..., shapes, dtype}: the torch script's recipe
  bool graphable = true;         // false: the op reads a result back to the host (bincount), no CUDA graph
  double flops = 0;              // "gemm" cases: floating-point operations of one call
  DType dtype = kFloat32;        // "gemm" cases: the dtype of the mm ceiling
};

// Copies of an input needed so that consecutive calls read from memory, not cache: the working
// set reaches 2x the GPU's L2, or 3x the CPU's 32 MiB L3.
int rotations_for(Device dev, double bytes_per_input);
// CUDA fractions are of copy bandwidth (PyTorch quotes it); CPU fractions are of read bandwidth.
inline std::string ceiling_for(Device dev) { return dev.is_cpu() ? "read" : "copy"; }

std::vector<Case> core_cases(Device dev);    // copy, casts, add, sum (bench/cases_core.cpp)
std::vector<Case> decode_cases(Device dev);  // linear suite, softmax, norms, RoPE, SwiGLU (bench/cases_decode.cpp)
std::vector<Case> moe_cases(Device dev);     // routing, combine, the whole experts block (bench/cases_moe.cpp)
std::vector<Case> pad_cases(Device dev);     // the models' pads and their backward (bench/cases_pad.cpp)
std::vector<Case> release_cases(Device dev);  // bincount, var_mean, losses (bench/cases_release.cpp)
std::vector<Case> conv_cases(Device dev);     // the models' convolutions, forward and backward (bench/cases_conv.cpp)
std::vector<Case> vision_cases(Device dev);   // dropout, batch norm, the decoders' upsampling (bench/cases_vision.cpp)
std::vector<Case> linalg_cases(Device dev);   // small inverses / solves, LU, solves (bench/cases_linalg.cpp)

}  // namespace anvil::bench
