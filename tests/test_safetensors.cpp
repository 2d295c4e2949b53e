// safetensors: a valid file parsed field by field and read back through the memory map (aligned
// and misaligned data), a corpus of corrupt files each rejected with its own message, sharded
// checkpoints through model.safetensors.index.json and their bad indexes.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "harness.h"
#include "runtime/safetensors.h"

namespace {

using namespace anvil;
using anvil::runtime::Checkpoint;
using anvil::runtime::parse_safetensors;
using anvil::runtime::SafetensorsFile;
namespace fs = std::filesystem;

// 8-byte little-endian length, header, data.
std::string file_bytes(const std::string& header, const std::string& data, uint64_t length) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>((length >> (8 * i)) & 0xFF);
  return s + header + data;
}
std::string file_bytes(const std::string& header, const std::string& data) {
  return file_bytes(header, data, header.size());
}

std::string floats(std::initializer_list<float> v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), std::data(v), s.size());
  return s;
}

// A fresh folder under the temp dir, removed with the object.
struct TempDir {
  fs::path path;
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = fs::temp_directory_path() / ("anvil_st_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path / name, std::ios::binary) << bytes;
    return (path / name).string();
  }
};

// parse_safetensors on `bytes` throws FormatError starting with "[safetensors]" and containing `what`.
::testing::AssertionResult rejects(const std::string& bytes, const std::string& what) {
  try {
    parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "f.safetensors");
  } catch (const FormatError& e) {
    const std::string m = e.what();
    if (m.rfind("[safetensors] f.safetensors: ", 0) != 0) return ::testing::AssertionFailure() << "prefix: " << m;
    if (m.find(what) == std::string::npos) return ::testing::AssertionFailure() << "expected \"" << what << "\" in: " << m;
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "wrong exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "accepted; expected \"" << what << "\"";
}

const std::string kValidHeader =
    R"({"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[2],"data_offsets":[24,28]},)"
    R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"z":{"dtype":"U8","shape":[0],"data_offsets":[28,28]},)"
    R"("s":{"dtype":"I64","shape":[],"data_offsets":[28,36]}})";

std::string valid_data() {
  std::string d = floats({1, 2, 3, 4, 5, -6.5f});
  d += std::string("\x80\x3f\x00\xc0", 4);  // bfloat16 1, -2
  int64_t s = -7;
  d += std::string(reinterpret_cast<const char*>(&s), 8);
  return d;
}

TEST(Safetensors, ParsesAValidFile) {
  const std::string bytes = file_bytes(kValidHeader, valid_data());
  const auto h = parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "f");
  ASSERT_EQ(h.tensors.size(), 4u);
  EXPECT_EQ(h.data_offset, 8 + kValidHeader.size());
  EXPECT_EQ(h.metadata.at("format"), "pt");
  // Data order; the zero-size tensor sorts before the one that starts at the same byte.
  const std::vector<std::string> order = {"a", "b", "z", "s"};
  for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(h.tensors[i].name, order[i]);
  EXPECT_EQ(h.tensors[0].dtype, kFloat32);
  EXPECT_EQ(h.tensors[0].shape, (Shape{2, 3}));
  EXPECT_EQ(h.tensors[1].dtype, kBFloat16);
  EXPECT_EQ(h.tensors[2].shape, (Shape{0}));
  EXPECT_EQ(h.tensors[3].dtype, kInt64);
  EXPECT_EQ(h.tensors[3].shape, Shape{});
  EXPECT_EQ(h.tensors[3].begin, 28u);
  EXPECT_EQ(h.tensors[3].end, 36u);
}

TEST(Safetensors, ReadsTensorsThroughTheMapAlignedOrNot) {
  TempDir dir;
  // The header padded with spaces so the data starts at a multiple of 64 (views of the map; mmap
  // returns page-aligned memory), then at 1 mod 4 (float32 / int64 misaligned: copies).
  const size_t base = kValidHeader.size() + 8;
  for (size_t header_size : {kValidHeader.size() + (64 - base % 64) % 64, kValidHeader.size() + (5 - base % 4) % 4}) {
    SCOPED_TRACE("header bytes " + std::to_string(header_size));
    std::string header = kValidHeader;
    header.resize(header_size, ' ');
    const std::string path = dir.write("model.safetensors", file_bytes(header, valid_data()));
    const SafetensorsFile f(path);
    ASSERT_EQ(f.header().data_offset, 8 + header_size);
    const Tensor a = f.tensor(*f.find("a"));
    EXPECT_EQ(a.sizes(), (Shape{2, 3}));
    const float* pa = a.data_ptr<float>();
    EXPECT_EQ(pa[0], 1.f);
    EXPECT_EQ(pa[5], -6.5f);
    const Tensor b = f.tensor(*f.find("b")).to(kFloat32);
    EXPECT_EQ(b.data_ptr<float>()[0], 1.f);
    EXPECT_EQ(b.data_ptr<float>()[1], -2.f);
    EXPECT_EQ(f.tensor(*f.find("s")).data_ptr<int64_t>()[0], -7);
    EXPECT_EQ(f.tensor(*f.find("z")).numel(), 0);
    EXPECT_EQ(f.find("missing"), nullptr);
    const Checkpoint c(dir.path.string());
    EXPECT_EQ(c.names(), (std::vector<std::string>{"a", "b", "s", "z"}));
    EXPECT_EQ(c.total_bytes(), 36u);
    EXPECT_EQ(c.tensor("a").data_ptr<float>()[4], 5.f);
    EXPECT_THROWS_OP(FormatError, "safetensors", c.entry("nope"));
  }
}

// Each corrupt file gives its own message.
TEST(Safetensors, RejectsCorruptFiles) {
  const std::string d = valid_data();
  auto with = [&](const std::string& header) { return file_bytes(header, d); };
  const std::string ok_a = R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]})";
  const std::string ok_rest =
      R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[24,28]},"s":{"dtype":"I64","shape":[],"data_offsets":[28,36]})";
  EXPECT_TRUE(rejects("12345", "shorter than the 8-byte header length"));
  EXPECT_TRUE(rejects(file_bytes("{}", "", 100'000'001), "exceeds the limit of 100000000 bytes"));
  EXPECT_TRUE(rejects(file_bytes("{}", "", 3000), "runs past the end of the file"));
  EXPECT_TRUE(rejects(file_bytes(std::string(1, '\xff') + "{}", "", 3), "the header is not valid JSON"));
  EXPECT_TRUE(rejects(with("{\"a\":"), "the header is not valid JSON"));
  EXPECT_TRUE(rejects(file_bytes("[1, 2]", ""), "the header is not a JSON object"));
  EXPECT_TRUE(rejects(with("{\"\xc3\x28\":{}}"), "the header is not valid JSON"));  // ill-formed UTF-8
  EXPECT_TRUE(rejects(with(R"({"__metadata__":{"k":1},)" + ok_a + "," + ok_rest + "}"),
                      "__metadata__ value of \"k\" is not a string"));
  EXPECT_TRUE(rejects(with(R"({"__metadata__":[],)" + ok_a + "," + ok_rest + "}"), "__metadata__ is not a JSON object"));
  EXPECT_TRUE(rejects(with("{" + ok_a + "," + ok_a + "," + ok_rest + "}"), "the header has the key \"a\" twice"));
  // Tensor "a" replaced by each defect (the rest of the file valid).
  const std::vector<std::pair<std::string, std::string>> bad_a = {
      {R"({"dtype":"F32","dtype":"F32","shape":[2,3],"data_offsets":[0,24]})", "the header has the key \"dtype\" twice"},
      {R"({"dtype":"F8_E8M0","shape":[24],"data_offsets":[0,24]})", "tensor \"a\": dtype F8_E8M0 is not supported"},
      {R"({"dtype":7,"shape":[24],"data_offsets":[0,24]})", "tensor \"a\": dtype is not a string"},
      {R"({"dtype":"F32","shape":[-2,3],"data_offsets":[0,24]})", "holds a value that is not a size"},
      {R"({"dtype":"F32","shape":[2.5],"data_offsets":[0,24]})", "holds a value that is not a size"},
      {R"({"dtype":"F32","shape":6,"data_offsets":[0,24]})", "tensor \"a\": shape is not an array"},
      {R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,24]})", "overflows 64-bit sizes"},
      {R"({"dtype":"F32","shape":[2305843009213693952],"data_offsets":[0,24]})", "overflows 64-bit sizes"},
      {R"({"dtype":"F32","shape":[5],"data_offsets":[0,24]})",
       "data_offsets [0, 24] hold 24 bytes, shape [5] of float32 needs 20"},
      {R"({"dtype":"F32","shape":[2,3],"data_offsets":[24,0]})", "end before they begin"},
      {R"({"dtype":"F32","shape":[2,3],"data_offsets":[0]})", "data_offsets must be two non-negative integers"},
      {R"({"dtype":"F32","shape":[2,3],"data_offsets":[-24,0]})", "data_offsets must be two non-negative integers"},
      {R"({"dtype":"F32","shape":[2,3]})", "tensor \"a\" has no \"data_offsets\""},
      {"[1]", "tensor \"a\" is not a JSON object"},
      // Offsets: a gap, an overlap, a first tensor not at 0.
      {R"({"dtype":"F32","shape":[5],"data_offsets":[0,20]})",
       "tensor \"b\" starts at byte 24 of the data but \"a\" ends at 20 (a gap)"},
      {R"({"dtype":"F32","shape":[7],"data_offsets":[0,28]})",
       "tensor \"b\" starts at byte 24 of the data but \"a\" ends at 28 (an overlap)"},
      {R"({"dtype":"F32","shape":[5],"data_offsets":[4,24]})", "the first tensor \"a\" starts at byte 4 of the data, not 0"},
  };
  for (const auto& [a, what] : bad_a) EXPECT_TRUE(rejects(with("{\"a\":" + a + "," + ok_rest + "}"), what)) << a;
  // Past the data, trailing bytes.
  EXPECT_TRUE(rejects(file_bytes("{" + ok_a + "," + ok_rest + "}", d.substr(0, 30)),
                      "the tensors end at byte 36 of the data but the file holds 30"));
  EXPECT_TRUE(rejects(file_bytes("{" + ok_a + "," + ok_rest + "}", d + "xy"), "2 trailing bytes follow"));
  EXPECT_TRUE(rejects(file_bytes(R"({"__metadata__":{}})", "x"), "1 trailing bytes follow"));
  // The same pieces in a valid arrangement parse (the corpus tests one defect at a time).
  const std::string good = with("{" + ok_a + "," + ok_rest + "}");
  EXPECT_NO_THROW(parse_safetensors(reinterpret_cast<const uint8_t*>(good.data()), good.size(), "f"));
}

TEST(Safetensors, ShardedCheckpoints) {
  TempDir dir;
  dir.write("model-00001-of-00002.safetensors",
            file_bytes(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"extra":{"dtype":"U8","shape":[1],"data_offsets":[8,9]}})",
                       floats({3, 4}) + "e"));
  dir.write("model-00002-of-00002.safetensors",
            file_bytes(R"({"y":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", floats({9})));
  auto index = [&](const std::string& map) {
    dir.write("model.safetensors.index.json", R"({"metadata":{"total_size":12},"weight_map":)" + map + "}");
  };
  index(R"({"x":"model-00001-of-00002.safetensors","y":"model-00002-of-00002.safetensors"})");
  {
    const Checkpoint c(dir.path.string());
    EXPECT_EQ(c.names(), (std::vector<std::string>{"x", "y"}));  // "extra" is not listed
    EXPECT_FALSE(c.has("extra"));
    EXPECT_EQ(c.tensor("x").data_ptr<float>()[1], 4.f);
    EXPECT_EQ(c.tensor("y").data_ptr<float>()[0], 9.f);
    EXPECT_EQ(c.total_bytes(), 12u);
  }
  const std::string d = dir.path.string();
  index(R"({"x":"../model-00001-of-00002.safetensors"})");
  EXPECT_THROWS_OP(FormatError, "safetensors", Checkpoint(d));
  index(R"({"x":"/etc/passwd"})");
  EXPECT_THROWS_OP(FormatError, "safetensors", Checkpoint(d));
  index(R"({"y":"model-00001-of-00002.safetensors"})");  // y is in the other shard
  EXPECT_THROWS_OP(FormatError, "safetensors", Checkpoint(d));
  index(R"({"x":3})");
  EXPECT_THROWS_OP(FormatError, "safetensors", Checkpoint(d));
  index(R"({"x":"model-00001-of-00002.safetensors","x":"model-00001-of-00002.safetensors"})");
  EXPECT_THROWS_OP(FormatError, "safetensors", Checkpoint(d));
  dir.write("model.safetensors.index.json", R"({"metadata":{}})");
  EXPECT_THROWS_OP(FormatError, "safetensors", Checkpoint(d));
  index(R"({"x":"model-00003-of-00002.safetensors"})");  // missing shard: an I/O error
  EXPECT_THROWS_OP(Error, "safetensors", Checkpoint(d));
  fs::remove(dir.path / "model.safetensors.index.json");
  EXPECT_THROWS_OP(Error, "safetensors", Checkpoint(d));  // neither file
  EXPECT_THROWS_OP(Error, "safetensors", Checkpoint((dir.path / "no-such-dir").string()));
  // A corrupt shard reports its own file.
  dir.write("model.safetensors", "1234");
  try {
    Checkpoint c(d);
    ADD_FAILURE() << "accepted a 4-byte file";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("model.safetensors: the file is 4 bytes"), std::string::npos) << e.what();
  }
}

}  // namespace
