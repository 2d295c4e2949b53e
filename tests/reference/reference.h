#pragma once
// The loop-only float64 references, all in one include.
#include "reference/ref_array.h"
#include "reference/ref_elementwise.h"
#include "reference/ref_float.h"
#include "reference/ref_index.h"
#include "reference/ref_linalg.h"
#include "reference/ref_matmul.h"
#include "reference/ref_nn.h"
#include "reference/ref_pad.h"
#include "reference/ref_reduce.h"
