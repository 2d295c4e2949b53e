#pragma once
// Every family's kernel list, for code that defines or walks all of them (src/cuda/stub.cpp).
// A new family adds its header and lists here.
#include "core/kernels/activation.h"
#include "core/kernels/attention.h"
#include "core/kernels/conv.h"
#include "core/kernels/decoder.h"
#include "core/kernels/dropout.h"
#include "core/kernels/elementwise.h"
#include "core/kernels/grouped_mm.h"
#include "core/kernels/index.h"
#include "core/kernels/linalg.h"
#include "core/kernels/linear.h"
#include "core/kernels/matmul.h"
#include "core/kernels/moe.h"
#include "core/kernels/norm.h"
#include "core/kernels/pad.h"
#include "core/kernels/random.h"
#include "core/kernels/reduce.h"
#include "core/kernels/rope.h"
#include "core/kernels/scaled_mm.h"
#include "core/kernels/softmax.h"
#include "core/kernels/topk.h"
#include "core/kernels/upsample.h"

#define ANVIL_ALL_KERNELS(X)                                                                         \
  ANVIL_ELEMENTWISE_KERNELS(X) ANVIL_REDUCE_KERNELS(X) ANVIL_INDEX_KERNELS(X) ANVIL_MATMUL_KERNELS(X) \
  ANVIL_RANDOM_KERNELS(X) ANVIL_LINEAR_KERNELS(X) ANVIL_SOFTMAX_KERNELS(X) ANVIL_NORM_KERNELS(X)      \
  ANVIL_ACTIVATION_KERNELS(X) ANVIL_ROPE_KERNELS(X) ANVIL_TOPK_KERNELS(X) ANVIL_SCALED_MM_KERNELS(X)  \
  ANVIL_GROUPED_MM_KERNELS(X) ANVIL_MOE_KERNELS(X) ANVIL_ATTENTION_KERNELS(X) \
  ANVIL_PAD_KERNELS(X) ANVIL_DROPOUT_KERNELS(X) ANVIL_UPSAMPLE_KERNELS(X) ANVIL_CONV_KERNELS(X) \
  ANVIL_LINALG_KERNELS(X)
#define ANVIL_ALL_FUSED(X) \
  ANVIL_LINEAR_FUSED(X) ANVIL_MOE_FUSED(X) ANVIL_CONV_FUSED(X) ANVIL_NORM_FUSED(X) ANVIL_LINALG_FUSED(X) \
  ANVIL_DECODER_FUSED(X)
