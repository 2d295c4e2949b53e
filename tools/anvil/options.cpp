// The option checks the commands share, run before anything is read: Error "[op] OPTION ...".
#include <filesystem>
#include <string>

#include "anvil/anvil.h"
#include "commands.h"

namespace anvil::cli {

namespace fs = std::filesystem;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void check_model_dir(const std::string& dir, const char* op) {
  ANVIL_CHECK(fs::exists(dir), Error, op, " -m ", dir, " does not exist");
  ANVIL_CHECK(fs::is_directory(dir), Error, op, " -m ", dir, " is not a folder");
  ANVIL_CHECK(fs::is_regular_file(fs::path(dir) / "config.json"), Error, op, " -m ", dir,
              " holds no config.json (is it a Hugging Face checkpoint folder?)");
}

void check_input_file(const std::string& path, const char* op, const char* option) {
  ANVIL_CHECK(fs::exists(path), Error, op, " ", option, " ", path, " does not exist");
  ANVIL_CHECK(!fs::is_directory(path), Error, op, " ", option, " ", path, " is a folder, not a file");
}

void check_output_file(const std::string& path, const char* op, const char* option) {
  const fs::path dir = fs::path(path).parent_path();
  ANVIL_CHECK(!path.empty() && !fs::is_directory(path), Error, op, " ", option, " \"", path, "\" is not a file name");
  ANVIL_CHECK(dir.empty() || fs::is_directory(dir), Error, op, " ", option, " ", path, ": the folder ", dir.string(),
              " does not exist");
}

Device parse_device(const std::string& s, const char* op) {
  Device d;
  try {
    d = Device(s);
  } catch (const DeviceError&) {
    throw Error(std::string(op) + " --device must be cpu, cuda or cuda:N, got \"" + s + "\"");
  }
  if (d.is_cuda()) {
    ANVIL_CHECK(cuda::is_available(), Error, op, " --device ", s, ": CUDA is not available (",
                cuda::unavailable_reason(), ")");
    ANVIL_CHECK(d.index < cuda::device_count(), Error, op, " --device ", s, ": this machine has ", cuda::device_count(),
                " CUDA device(s)");
  }
  return d;
}

}  // namespace anvil::cli
