// anvil logits: float32 logits [len(ids), vocab] of a checkpoint as a .npy file, by one prefill
// over the ids or by feeding them one at a time through the KV cache (decode).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <unistd.h>
#include <fstream>
#include <string>

#include "anvil/anvil.h"
#include "commands.h"
#include "runtime/config.h"
#include "runtime/media.h"
#include "runtime/model.h"

namespace anvil::cli {

bool set_dtype(const std::string& s, runtime::LoadOptions& lo, const char* op) {
  using runtime::Fp8Weights;
  const bool fp8 = s == "fp8" || s == "fp8-block";
  lo.fp8_weights = s.empty() || s == "fp8-block" ? Fp8Weights::Checkpoint : s == "fp8" ? Fp8Weights::Quantize
                                                                                        : Fp8Weights::Dequantize;
  if (s.empty() || s == "bfloat16" || s == "bf16" || fp8) lo.dtype = kBFloat16;
  else if (s == "float16" || s == "fp16" || s == "half") lo.dtype = kFloat16;
  else if (s == "float32" || s == "fp32" || s == "float") lo.dtype = kFloat32;
  else throw Error(std::string(op) + " --dtype must be bfloat16, float16, float32, fp8 or fp8-block, got \"" + s + "\"");
  return s == "fp8-block";
}

void set_progress(runtime::LoadOptions& lo) {
  if (isatty(fileno(stderr))) lo.progress = runtime::stderr_load_progress();
}

int cmd_logits(const LogitsOptions& o) {
  const std::vector<int32_t> ids32 = parse_ids(o.ids, "[logits]");
  ANVIL_CHECK(!ids32.empty(), Error, "[logits] --ids is empty");
  ANVIL_CHECK(o.mode == "prefill" || o.mode == "decode", Error, "[logits] --mode must be prefill or decode, got \"",
              o.mode, "\"");
  check_model_dir(o.model, "[logits]");
  check_output_file(o.out, "[logits]", "-o");
  const int64_t T = static_cast<int64_t>(ids32.size());
  runtime::LoadOptions lo;
  lo.device = parse_device(o.device, "[logits]");
  set_dtype(o.dtype, lo, "[logits]");
  lo.allow_unread = o.allow_unread;
  set_progress(lo);
  lo.max_context = T;
  const int64_t vocab = runtime::load_config(o.model).vocab_size;  // the ids checked before the weights load
  for (int32_t id : ids32)
    ANVIL_CHECK(id < vocab, Error, "[logits] --ids: ", id, " is outside the vocabulary of ", vocab);
  auto model = runtime::load_model(o.model, lo);
  Tensor ids = empty({T}, TensorOptions(kInt64));
  std::copy(ids32.begin(), ids32.end(), ids.data_ptr<int64_t>());
  Tensor logits;
  if (o.mode == "prefill") {
    logits = model->forward(ids, 0);
  } else {
    std::vector<Tensor> rows;
    for (int64_t i = 0; i < T; ++i) rows.push_back(model->forward(ids.narrow(0, i, 1), i));
    logits = cat(rows, 0);
  }
  runtime::write_npy(o.out, logits, "[logits]");
  std::fprintf(stderr, "[logits] %lld x %lld float32 logits (%s, %s) -> %s\n", static_cast<long long>(logits.size(0)),
               static_cast<long long>(logits.size(1)), o.mode.c_str(), o.dtype.c_str(), o.out.c_str());
  return 0;
}

}  // namespace anvil::cli
