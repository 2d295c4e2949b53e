// safetensors checkpoints: the header parsed with the reference implementation's checks, files
// memory-mapped, sharded checkpoints through model.safetensors.index.json.
//
// File layout: an 8-byte little-endian header length N, N bytes of UTF-8 JSON (an object: one
// entry per tensor {"dtype", "shape", "data_offsets": [begin, end]} plus an optional
// "__metadata__" object of strings), then the data section. The checks (each a FormatError
// naming the file and the problem): N <= 100 MB and inside the file; the header is a UTF-8 JSON
// object with no duplicate key at any level; metadata values are strings; dtypes are known;
// shapes are non-negative integers whose element and byte counts do not overflow 64 bits; each
// tensor's byte count equals its offsets' span; sorted by offset, the tensors are contiguous,
// start at 0 and end exactly at the end of the file (no gap, overlap or trailing bytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "anvil/tensor.h"

namespace anvil::runtime {

inline constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

struct SafetensorsEntry {
  std::string name;
  DType dtype = kFloat32;
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the data section
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;  // sorted by begin (data order)
  std::map<std::string, std::string> metadata;
  uint64_t data_offset = 0;  // 8 + N: where the data section starts in the file
};

// Validates a whole file's bytes. `where` names the file in messages.
SafetensorsHeader parse_safetensors(const uint8_t* data, size_t size, const std::string& where);

// model.safetensors.index.json's weight_map as (tensor, file) pairs, each file a plain name
// (no directory part): FormatError otherwise, or on a duplicate key, or without a weight_map.
std::vector<std::pair<std::string, std::string>> parse_weight_map(const std::string& text, const std::string& where);

// A read-only memory map of a whole file (empty files map to nothing).
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// One .safetensors file, mapped and validated.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  const SafetensorsHeader& header() const { return header_; }
  const std::string& path() const { return file_->path(); }
  // nullptr when absent.
  const SafetensorsEntry* find(const std::string& name) const;
  // A CPU tensor over the mapped bytes (it keeps the mapping alive); a copy when the bytes are
  // not aligned to the element size. Read-only: writing into it is undefined.
  Tensor tensor(const SafetensorsEntry& e) const;

 private:
  std::shared_ptr<MappedFile> file_;
  SafetensorsHeader header_;
  std::map<std::string, size_t> index_;
};

// A checkpoint folder: model.safetensors, or the shards listed by model.safetensors.index.json
// (its weight_map names plain file names inside the folder; every listed tensor must be in its
// shard). Tensors present in a shard but not in the weight_map are ignored, as transformers does.
class Checkpoint {
 public:
  // DIR/STEM.safetensors or the shards of DIR/STEM.safetensors.index.json: "model" for
  // transformers' folders, "diffusion_pytorch_model" for diffusers'.
  explicit Checkpoint(const std::string& dir, const std::string& stem = "model");
  bool has(const std::string& name) const { return where_.count(name) != 0; }
  // Throws FormatError naming the tensor and the folder when absent.
  const SafetensorsEntry& entry(const std::string& name) const;
  Tensor tensor(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted
  const std::string& dir() const { return dir_; }
  uint64_t total_bytes() const;  // of every listed tensor

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // tensor -> index into files_
};

}  // namespace anvil::runtime
