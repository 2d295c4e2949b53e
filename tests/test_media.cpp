// The runtime's .npy and PNG files: PNG decoding against Pillow's convert("RGB") of the same files
// (tests/data/png/expected.json), writes read back exactly, and the errors of broken files.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "expect_throws.h"
#include "harness.h"
#include "runtime/media.h"

namespace {

using namespace anvil;
namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("anvil_media_" + std::to_string(::getpid()) + "_" + name)).string();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::vector<float> floats(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

TEST(Media, PngMatchesPillow) {
  const std::string dir = th::source_dir() + "/tests/data/png/";
  std::ifstream in(dir + "expected.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  for (const auto& [name, e] : j["images"].items()) {
    SCOPED_TRACE(name + " (" + e["mode"].get<std::string>() + ")");
    const Tensor x = runtime::read_png(dir + name, "[test]");
    const std::vector<int64_t> hwc = e["shape"].get<std::vector<int64_t>>();
    ASSERT_EQ(x.sizes(), (Shape{1, 3, hwc[0], hwc[1]}));
    const std::vector<int> rgb = e["rgb"].get<std::vector<int>>();
    const std::vector<float> got = floats(x);
    const int64_t plane = hwc[0] * hwc[1];
    for (int64_t p = 0; p < plane; ++p)
      for (int64_t c = 0; c < 3; ++c)
        ASSERT_EQ(got[static_cast<size_t>(c * plane + p)],
                  static_cast<float>(rgb[static_cast<size_t>(p * 3 + c)]) / 255.0f * 2.0f - 1.0f)
            << "pixel " << p << " channel " << c;
  }
}

// [-1, 1] -> round((x / 2 + 0.5) * 255) (clamped; NaN -> 0) -> the read gives v / 255 * 2 - 1.
TEST(Media, PngWriteReadBack) {
  th::Gen g(31);
  const int64_t H = 5, W = 7;
  Tensor x = empty({1, 3, H, W}, TensorOptions(kFloat32));
  std::vector<float> want;
  for (int64_t i = 0; i < x.numel(); ++i) {
    float v = static_cast<float>(g.uniform(-1.3, 1.3));
    if (i == 3) v = NAN;
    if (i == 4) v = 1.0f;
    if (i == 5) v = -1.0f;
    x.data_ptr<float>()[i] = v;
    const float u = std::isnan(v) ? 0.0f : std::clamp(v / 2.0f + 0.5f, 0.0f, 1.0f);
    want.push_back(std::nearbyint(u * 255.0f) / 255.0f * 2.0f - 1.0f);
  }
  const std::string path = temp_path("rt.png");
  runtime::write_png(path, x, "[test]");
  EXPECT_EQ(floats(runtime::read_png(path, "[test]")), want);
  runtime::write_png(path, x.squeeze(0), "[test]");  // [3, H, W] too
  EXPECT_EQ(floats(runtime::read_png(path, "[test]")), want);
  EXPECT_THROWS_SAYING(ShapeError, "test", "[3, H, W] or [1, 3, H, W], got [1, 4, 5, 7]",
                       runtime::write_png(path, zeros({1, 4, H, W}), "[test]"));
  write_bytes(path, "\x89PNG\r\n\x1a\n garbage after the signature");
  EXPECT_THROWS_SAYING(FormatError, "test", "PNG decoding failed", runtime::read_png(path, "[test]"));
  write_bytes(path, "not a png");
  EXPECT_THROWS_SAYING(FormatError, "test", "not a PNG file", runtime::read_png(path, "[test]"));
  fs::remove(path);
  EXPECT_THROWS_SAYING(Error, "test", "cannot open", runtime::read_png(path, "[test]"));
}

TEST(Media, NpyRoundTripAndErrors) {
  const std::string path = temp_path("a.npy");
  const Tensor x = arange(0, 24, 1, TensorOptions(kFloat32)).view({2, 3, 4});
  runtime::write_npy(path, x, "[test]");
  const Tensor back = runtime::read_npy(path, "[test]");
  EXPECT_EQ(back.sizes(), (Shape{2, 3, 4}));
  EXPECT_EQ(floats(back), floats(x));
  runtime::write_npy(path, x.view({24}), "[test]");  // 1-d: the shape tuple "(24,)"
  EXPECT_EQ(runtime::read_npy(path, "[test]").sizes(), (Shape{24}));

  // Hand-made files: a header dict padded to 64 bytes with a newline, then the data.
  auto npy = [](const std::string& dict, const std::string& data, char version = 1) {
    std::string h = dict;
    const size_t pre = version == 1 ? 10 : 12;
    h.append(64 - (pre + h.size() + 1) % 64, ' ');
    h += '\n';
    std::string s = std::string("\x93NUMPY", 6) + version + '\0';
    s += static_cast<char>(h.size() & 0xff);
    s += static_cast<char>(h.size() >> 8);
    if (version != 1) s += std::string(2, '\0');
    return s + h + data;
  };
  const std::string two_f8(16, '\0');
  write_bytes(path, npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", two_f8, 2));
  EXPECT_EQ(runtime::read_npy(path, "[test]").dtype(), kFloat64);
  write_bytes(path, npy("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", two_f8));
  EXPECT_THROWS_SAYING(FormatError, "test", "holds 16 data bytes; shape (3,) of float64 needs 24",
                       runtime::read_npy(path, "[test]"));
  write_bytes(path, npy("{'descr': '>f4', 'fortran_order': False, 'shape': (4,), }", two_f8));
  EXPECT_THROWS_SAYING(FormatError, "test", "dtype '>f4' is not supported", runtime::read_npy(path, "[test]"));
  write_bytes(path, npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", two_f8));
  EXPECT_THROWS_SAYING(FormatError, "test", "Fortran-order", runtime::read_npy(path, "[test]"));
  write_bytes(path, npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }", two_f8));
  EXPECT_THROWS_SAYING(FormatError, "test", "bad shape (2, x)", runtime::read_npy(path, "[test]"));
  write_bytes(path, npy("{'descr': '<f4', 'fortran_order': False, }", two_f8));
  EXPECT_THROWS_SAYING(FormatError, "test", "no 'shape'", runtime::read_npy(path, "[test]"));
  write_bytes(path, "PK\x03\x04 a zip, not an array");
  EXPECT_THROWS_SAYING(FormatError, "test", "not a .npy file", runtime::read_npy(path, "[test]"));
  fs::remove(path);
}

}  // namespace
