#pragma once
// Everything public in anvil.
#include "anvil/cuda.h"
#include "anvil/device.h"
#include "anvil/dtype.h"
#include "anvil/error.h"
#include "anvil/memory.h"
#include "anvil/nn.h"
#include "anvil/numeric.h"
#include "anvil/ops.h"
#include "anvil/scalar.h"
#include "anvil/stream.h"
#include "anvil/tensor.h"
#include "anvil/version.h"
