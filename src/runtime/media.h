// Files the runtimes read and write besides checkpoints: NumPy .npy arrays and PNG images
// (libpng). Errors are "[op] FILE: what" (FormatError for a file that is not what it claims,
// Error when it cannot be opened or written).
#pragma once

#include <string>

#include "anvil/anvil.h"

namespace anvil::runtime {

// A .npy array (format 1.0-3.0, C order, little-endian float16 / float32 / float64 / int64) on the
// CPU in its own dtype.
Tensor read_npy(const std::string& path, const char* op);
// t as float32 .npy (1.0), C order.
void write_npy(const std::string& path, const Tensor& t, const char* op);

// A PNG as float32 [1, 3, H, W] in [-1, 1] (value / 255 * 2 - 1, as diffusers' image processor):
// grey and palette images expanded to RGB, alpha dropped, 16-bit samples scaled to 8 bits.
Tensor read_png(const std::string& path, const char* op);
// An image [3, H, W] or [1, 3, H, W] in [-1, 1] as an 8-bit RGB PNG: round((x / 2 + 0.5) clamped
// to [0, 1] * 255), as diffusers' postprocess to PIL.
void write_png(const std::string& path, const Tensor& image, const char* op);

}  // namespace anvil::runtime
