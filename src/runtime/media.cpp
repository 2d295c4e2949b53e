// .npy and PNG files (see media.h).
#include "runtime/media.h"

#include <png.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

#include "runtime/io.h"

namespace anvil::runtime {
namespace {

// The value of 'key' in a .npy header dict (text up to the next ',' outside parentheses, or '}').
std::string header_value(const std::string& header, const std::string& key, const std::string& path, const char* op) {
  const size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) format_fail(op, path, "the .npy header has no '", key, "'");
  size_t i = header.find(':', k);
  if (i == std::string::npos) format_fail(op, path, "the .npy header's '", key, "' has no value");
  ++i;
  int depth = 0;
  size_t j = i;
  for (; j < header.size(); ++j) {
    const char c = header[j];
    if (c == '(') ++depth;
    else if (c == ')') --depth;
    else if ((c == ',' && depth == 0) || c == '}') break;
  }
  std::string v = header.substr(i, j - i);
  v.erase(0, v.find_first_not_of(" "));
  v.erase(v.find_last_not_of(" ") + 1);
  return v;
}

// libpng's errors land here: the message is kept and control returns to the setjmp point.
struct PngError {
  char message[256] = "";
};
void on_png_error(png_structp png, png_const_charp msg) {
  auto* e = static_cast<PngError*>(png_get_error_ptr(png));
  std::snprintf(e->message, sizeof e->message, "%s", msg);
  png_longjmp(png, 1);
}
void on_png_warning(png_structp, png_const_charp) {}

// Decodes the open file f into 8-bit RGB rows; false with err set when libpng fails. No C++
// objects with destructors live across the setjmp (libpng returns by longjmp).
bool decode_png(std::FILE* f, PngError& err, std::vector<uint8_t>& rgb, png_uint_32& w, png_uint_32& h) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &err, on_png_error, on_png_warning);
  if (!png) return std::snprintf(err.message, sizeof err.message, "out of memory"), false;
  png_infop info = png_create_info_struct(png);
  png_bytep* rows = nullptr;
  if (!info || setjmp(png_jmpbuf(png))) {
    delete[] rows;
    png_destroy_read_struct(&png, &info, nullptr);
    if (!err.message[0]) std::snprintf(err.message, sizeof err.message, "out of memory");
    return false;
  }
  png_init_io(png, f);
  png_read_info(png, info);
  w = png_get_image_width(png, info);
  h = png_get_image_height(png, info);
  const int color = png_get_color_type(png, info);
  png_set_expand(png);  // palette -> RGB, grey < 8 bits -> 8, tRNS -> alpha
  png_set_scale_16(png);
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
  png_set_strip_alpha(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != static_cast<size_t>(w) * 3) {
    std::snprintf(err.message, sizeof err.message, "unexpected row size after conversion to RGB");
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  rgb.resize(static_cast<size_t>(w) * h * 3);
  rows = new png_bytep[h];
  for (png_uint_32 y = 0; y < h; ++y) rows[y] = rgb.data() + static_cast<size_t>(y) * w * 3;
  png_read_image(png, rows);
  png_read_end(png, nullptr);
  delete[] rows;
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

bool encode_png(std::FILE* f, PngError& err, const std::vector<uint8_t>& rgb, png_uint_32 w, png_uint_32 h) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &err, on_png_error, on_png_warning);
  if (!png) return std::snprintf(err.message, sizeof err.message, "out of memory"), false;
  png_infop info = png_create_info_struct(png);
  png_bytep* rows = nullptr;
  if (!info || setjmp(png_jmpbuf(png))) {
    delete[] rows;
    png_destroy_write_struct(&png, &info);
    if (!err.message[0]) std::snprintf(err.message, sizeof err.message, "out of memory");
    return false;
  }
  png_init_io(png, f);
  png_set_IHDR(png, info, w, h, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  rows = new png_bytep[h];
  for (png_uint_32 y = 0; y < h; ++y) rows[y] = const_cast<uint8_t*>(rgb.data()) + static_cast<size_t>(y) * w * 3;
  png_write_image(png, rows);
  png_write_end(png, nullptr);
  delete[] rows;
  png_destroy_write_struct(&png, &info);
  return true;
}

}  // namespace

Tensor read_npy(const std::string& path, const char* op) {
  const std::string bytes = read_file(path, op);
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) format_fail(op, path, "not a .npy file");
  const int major = static_cast<uint8_t>(bytes[6]);
  size_t header_len = 0, start = 0;
  if (major == 1) {
    header_len = static_cast<uint8_t>(bytes[8]) | static_cast<size_t>(static_cast<uint8_t>(bytes[9])) << 8;
    start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) format_fail(op, path, "truncated .npy header");
    for (int i = 3; i >= 0; --i) header_len = header_len << 8 | static_cast<uint8_t>(bytes[8 + i]);
    start = 12;
  } else {
    format_fail(op, path, ".npy format version ", major, " is not supported (1, 2 and 3 are)");
  }
  if (bytes.size() < start + header_len) format_fail(op, path, "truncated .npy header");
  const std::string header = bytes.substr(start, header_len);
  const std::string descr = header_value(header, "descr", path, op);
  DType t = kFloat32;
  if (descr == "'<f4'") t = kFloat32;
  else if (descr == "'<f2'") t = kFloat16;
  else if (descr == "'<f8'") t = kFloat64;
  else if (descr == "'<i8'") t = kInt64;
  else format_fail(op, path, "dtype ", descr, " is not supported (little-endian float16, float32, float64, int64 are)");
  if (header_value(header, "fortran_order", path, op) != "False")
    format_fail(op, path, "a Fortran-order array is not supported (save it C-contiguous)");
  std::string dims = header_value(header, "shape", path, op);
  if (dims.size() < 2 || dims.front() != '(' || dims.back() != ')') format_fail(op, path, "bad shape ", dims);
  Shape shape;
  std::string cur;
  for (char c : dims.substr(1, dims.size() - 2) + ",") {
    if (c == ',') {
      if (!cur.empty()) {
        size_t used = 0;
        long long v = -1;
        try {
          v = std::stoll(cur, &used);
        } catch (const std::exception&) {
        }
        if (v < 0 || used != cur.size()) format_fail(op, path, "bad shape ", dims);
        shape.push_back(v);
      }
      cur.clear();
    } else if (c != ' ') {
      cur += c;
    }
  }
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d != 0 && numel > (int64_t{1} << 40) / d) format_fail(op, path, "shape ", dims, " is too large");
    numel *= d;
  }
  const size_t data = start + header_len, need = static_cast<size_t>(numel) * element_size(t);
  if (bytes.size() - data != need)
    format_fail(op, path, "holds ", bytes.size() - data, " data bytes; shape ", dims, " of ", dtype_name(t), " needs ",
                need);
  Tensor out = empty(shape, TensorOptions(t));
  if (need) std::memcpy(out.raw_data_ptr(), bytes.data() + data, need);
  return out;
}

void write_npy(const std::string& path, const Tensor& t, const char* op) {
  const Tensor c = t.to(kCPU, kFloat32).contiguous();
  std::string shape = "(";
  for (int64_t d : c.sizes()) shape += std::to_string(d) + ", ";
  if (c.dim() > 1) shape.resize(shape.size() - 1), shape.back() = ')';
  else shape += ")";
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
  header.append(64 - (10 + header.size() + 1) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  if (!out.good()) throw Error(std::string(op) + " cannot write " + path);
  const uint16_t n = static_cast<uint16_t>(header.size());
  const char len[2] = {static_cast<char>(n & 0xff), static_cast<char>(n >> 8)};
  out.write("\x93NUMPY\x01\x00", 8);
  out.write(len, 2);
  out << header;
  out.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
  if (!out.good()) throw Error(std::string(op) + " writing " + path + " failed");
}

Tensor read_png(const std::string& path, const char* op) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw Error(std::string(op) + " cannot open " + path);
  uint8_t sig[8] = {};
  const bool is_png = std::fread(sig, 1, 8, f) == 8 && png_sig_cmp(sig, 0, 8) == 0;
  std::rewind(f);
  PngError err;
  std::vector<uint8_t> rgb;
  png_uint_32 w = 0, h = 0;
  const bool ok = is_png && decode_png(f, err, rgb, w, h);
  std::fclose(f);
  if (!is_png) format_fail(op, path, "not a PNG file");
  if (!ok) format_fail(op, path, "PNG decoding failed: ", err.message);
  Tensor out = empty({1, 3, static_cast<int64_t>(h), static_cast<int64_t>(w)}, TensorOptions(kFloat32));
  float* o = out.data_ptr<float>();
  const size_t plane = static_cast<size_t>(w) * h;
  for (size_t p = 0; p < plane; ++p)
    for (size_t c = 0; c < 3; ++c) o[c * plane + p] = static_cast<float>(rgb[p * 3 + c]) / 255.0f * 2.0f - 1.0f;
  return out;
}

void write_png(const std::string& path, const Tensor& image, const char* op) {
  ANVIL_CHECK((image.dim() == 3 && image.size(0) == 3) || (image.dim() == 4 && image.size(0) == 1 && image.size(1) == 3),
              ShapeError, op, " a PNG is written from [3, H, W] or [1, 3, H, W], got ", shape_str(image.sizes()));
  const Tensor c = image.to(kCPU, kFloat32).contiguous();
  const int64_t H = c.size(-2), W = c.size(-1);
  const size_t plane = static_cast<size_t>(H * W);
  std::vector<uint8_t> rgb(plane * 3);
  const float* x = c.data_ptr<float>();
  for (size_t p = 0; p < plane; ++p)
    for (size_t ch = 0; ch < 3; ++ch) {
      const float v = std::clamp(x[ch * plane + p] / 2.0f + 0.5f, 0.0f, 1.0f);  // NaN -> 0 below
      rgb[p * 3 + ch] = static_cast<uint8_t>(std::isnan(v) ? 0.0f : std::nearbyint(v * 255.0f));
    }
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw Error(std::string(op) + " cannot write " + path);
  PngError err;
  const bool ok = encode_png(f, err, rgb, static_cast<png_uint_32>(W), static_cast<png_uint_32>(H));
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed) throw Error(std::string(op) + " writing " + path + " failed" + (ok ? "" : std::string(": ") + err.message));
}

}  // namespace anvil::runtime
