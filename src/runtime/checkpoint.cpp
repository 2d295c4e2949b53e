// Memory-mapped safetensors files and checkpoint folders (single file or sharded).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "anvil/error.h"
#include "anvil/ops.h"
#include "runtime/io.h"
#include "runtime/safetensors.h"

namespace anvil::runtime {
namespace {
constexpr const char* kOp = "[safetensors]";
}  // namespace

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(std::string(kOp) + " cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(std::string(kOp) + " " + path + " is not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw Error(std::string(kOp) + " cannot map " + path + ": " + std::strerror(err));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

SafetensorsFile::SafetensorsFile(const std::string& path)
    : file_(std::make_shared<MappedFile>(path)), header_(parse_safetensors(file_->data(), file_->size(), path)) {
  for (size_t i = 0; i < header_.tensors.size(); ++i) index_[header_.tensors[i].name] = i;
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

Tensor SafetensorsFile::tensor(const SafetensorsEntry& e) const {
  const uint8_t* p = file_->data() + header_.data_offset + e.begin;
  const size_t bytes = static_cast<size_t>(e.end - e.begin);
  if (bytes == 0 || reinterpret_cast<uintptr_t>(p) % element_size(e.dtype) != 0) {
    Tensor t = empty(e.shape, TensorOptions(e.dtype));
    if (bytes) std::memcpy(t.raw_data_ptr(), p, bytes);
    return t;
  }
  std::shared_ptr<MappedFile> keep = file_;
  return from_blob(const_cast<uint8_t*>(p), e.shape, e.dtype, [keep](void*) {});
}

Checkpoint::Checkpoint(const std::string& dir, const std::string& stem) : dir_(dir) {
  namespace fs = std::filesystem;
  const fs::path d(dir);
  if (!fs::is_directory(d)) throw Error(std::string(kOp) + " " + dir + " is not a directory");
  const fs::path index = d / (stem + ".safetensors.index.json"), single = d / (stem + ".safetensors");
  if (fs::exists(index)) {
    const std::string where = index.string();
    std::map<std::string, size_t> shard_of;
    for (const auto& [name, f] : parse_weight_map(read_file(where, kOp), where)) {
      auto it = shard_of.find(f);
      if (it == shard_of.end()) {
        files_.push_back(std::make_unique<SafetensorsFile>((d / f).string()));
        it = shard_of.emplace(f, files_.size() - 1).first;
      }
      if (!files_[it->second]->find(name))
        throw FormatError(std::string(kOp) + " " + where + ": tensor \"" + name + "\" is listed in " + f +
                          " but that file does not hold it");
      where_[name] = it->second;
    }
  } else if (fs::exists(single)) {
    files_.push_back(std::make_unique<SafetensorsFile>(single.string()));
    for (const SafetensorsEntry& e : files_[0]->header().tensors) where_[e.name] = 0;
  } else {
    throw Error(std::string(kOp) + " " + dir + " holds neither " + stem + ".safetensors nor " + stem +
                ".safetensors.index.json");
  }
}

const SafetensorsEntry& Checkpoint::entry(const std::string& name) const {
  const auto it = where_.find(name);
  if (it == where_.end()) throw FormatError(std::string(kOp) + " " + dir_ + ": the checkpoint has no tensor \"" + name + "\"");
  return *files_[it->second]->find(name);
}

Tensor Checkpoint::tensor(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  return files_[where_.at(name)]->tensor(e);
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> r;
  for (const auto& [name, f] : where_) r.push_back(name);
  return r;
}

uint64_t Checkpoint::total_bytes() const {
  uint64_t t = 0;
  for (const auto& [name, f] : where_) {
    const SafetensorsEntry* e = files_[f]->find(name);
    t += e->end - e->begin;
  }
  return t;
}

}  // namespace anvil::runtime
