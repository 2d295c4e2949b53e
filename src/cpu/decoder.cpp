// The persistent decoder step is a CUDA kernel: on the CPU the step always runs as its
// composition of ops (PersistentDecoder's eager step).
#include "core/kernels/decoder.h"

namespace anvil::cpu {

FusedPlan decoder_step_plan(const DecoderStepParams&) { return FusedPlan::Composed; }

void decoder_step(const DecoderStepParams&) {
  throw Error("[decoder_step] the CPU backend has no persistent decoder step (its plan is composed)");
}

}  // namespace anvil::cpu
