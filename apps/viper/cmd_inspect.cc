// viper inspect: list the tensors and metadata of a .safetensors file and
// verify its checksum.
#include <cstdio>
#include <iostream>

#include "cli_util.h"
#include "commands.h"
#include "viper/core/checksum.h"
#include "viper/core/safetensors.h"
#include "viper/core/units.h"

namespace viper {
namespace cli {
namespace {

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

}  // namespace

int RunInspect(const std::vector<std::string>& args) {
  po::options_description desc("Options");
  std::string file;
  std::string json_path;
  bool no_verify = false;
  desc.add_options()("help,h", "print this help")("file", po::value(&file)->required(),
                                                  "the .safetensors file to inspect (required)")(
      "json", po::value(&json_path),
      "also write the listing as JSON to this path ('-' = stdout); keys: file, size_bytes, header_bytes, "
      "data_bytes, checksum {value, status: verified|skipped|absent}, metadata {key: value}, tensors [{name, "
      "dtype, shape, bytes, offset}] (offset = bytes from the start of the data section)")(
      "no-verify", po::bool_switch(&no_verify),
      "do not hash the data section against viper.checksum (default: verify when the file has one)");
  po::variables_map vm;
  const int rc =
      ParseOrHelp(args, desc, &vm, "viper inspect --file X.safetensors [--json PATH] [--no-verify]",
                  "Parses a safetensors file (the layout Viper sends and stores), checks every "
                  "header field, lists its tensors (name, dtype, shape, bytes) and __metadata__, and "
                  "verifies the XXH3-64 checksum of the data section when the file carries one. "
                  "Exit 1 with the parser's message on a malformed or corrupt file.");
  if (rc != 0) return rc < 0 ? kExitOk : rc;

  auto buffer = safetensors::ReadFileBuffer(file);
  if (!buffer.ok()) return Fail("inspect", buffer.status());
  const std::byte* data = buffer->bytes.get();
  safetensors::ParseOptions options;
  options.verify_checksum = !no_verify;
  auto state =
      safetensors::Parse(std::shared_ptr<const void>(buffer->bytes, data), data, buffer->size, options);
  if (!state.ok()) return Fail("inspect", state.status().WithContext(file));
  auto metadata = safetensors::ParseMetadata(data, buffer->size);
  if (!metadata.ok()) return Fail("inspect", metadata.status().WithContext(file));

  const uint64_t data_bytes = state->TotalBytes();  // the parser checked full coverage
  const uint64_t header_bytes = buffer->size - data_bytes;
  auto checksum_it = metadata->find("viper.checksum");
  const char* checksum_status = checksum_it == metadata->end() ? "absent"
                                : no_verify                    ? "skipped"
                                                               : "verified";

  std::printf("file          %s\n", file.c_str());
  std::printf("size          %s (%llu bytes: header %llu, data %llu)\n", FormatBytes(buffer->size).c_str(),
              static_cast<unsigned long long>(buffer->size), static_cast<unsigned long long>(header_bytes),
              static_cast<unsigned long long>(data_bytes));
  if (checksum_it == metadata->end()) {
    std::printf("checksum      absent (no viper.checksum in __metadata__)\n");
  } else {
    std::printf("checksum      %s (%s)\n", checksum_it->second.c_str(),
                no_verify ? "not verified: --no-verify" : "verified: XXH3-64 of the data section matches");
  }
  std::printf("metadata      %zu entries\n", metadata->size());
  for (const auto& [key, value] : *metadata) std::printf("  %s = %s\n", key.c_str(), value.c_str());
  std::printf("tensors       %zu\n", state->size());
  std::size_t name_width = 4;
  for (const Tensor& t : state->tensors()) name_width = std::max(name_width, t.name.size());
  std::printf("  %-*s  %-7s  %-20s  %s\n", static_cast<int>(name_width), "name", "dtype", "shape", "bytes");
  for (const Tensor& t : state->tensors()) {
    std::printf("  %-*s  %-7s  %-20s  %zu\n", static_cast<int>(name_width), t.name.c_str(), ToString(t.dtype),
                ShapeText(t.shape).c_str(), t.size_bytes);
  }

  if (!json_path.empty()) {
    nlohmann::json j;
    j["file"] = file;
    j["size_bytes"] = buffer->size;
    j["header_bytes"] = header_bytes;
    j["data_bytes"] = data_bytes;
    j["checksum"] = {{"value", checksum_it == metadata->end() ? nlohmann::json(nullptr)
                                                              : nlohmann::json(checksum_it->second)},
                     {"status", checksum_status}};
    j["metadata"] = *metadata;
    j["tensors"] = nlohmann::json::array();
    uint64_t offset = 0;
    for (const Tensor& t : state->tensors()) {
      j["tensors"].push_back({{"name", t.name},
                              {"dtype", ToString(t.dtype)},
                              {"shape", t.shape},
                              {"bytes", t.size_bytes},
                              {"offset", offset}});
      offset += t.size_bytes;
    }
    Status st = WriteJson(j, json_path, "inspect");
    if (!st.ok()) return Fail("inspect", st);
  }
  return kExitOk;
}

}  // namespace cli
}  // namespace viper
