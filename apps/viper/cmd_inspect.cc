// viper inspect: list the tensors and metadata of a .safetensors file and
// verify its checksums (data, and header in format 2); or list a PFS delta
// file (model-v<N>.delta, viper/transports/delta.h) and check its own checksums.
#include <cstdio>
#include <cstring>
#include <iostream>

#include "cli_util.h"
#include "commands.h"
#include "viper/core/checksum.h"
#include "viper/core/safetensors.h"
#include "viper/core/units.h"
#include "viper/transports/delta.h"

namespace viper {
namespace cli {
namespace {

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// A delta file: what it rebuilds from what, and its records.
int InspectDelta(const std::string& file, const std::byte* data, uint64_t size, const std::string& json_path) {
  namespace delta = transports::delta;
  auto contents = delta::ReadContents(data, size);
  if (!contents.ok()) return Fail("inspect", contents.status().WithContext(file));
  const delta::DeltaHeader& h = contents->header;
  FILE* const table = JsonToStdout(json_path) ? stderr : stdout;
  std::fprintf(table, "file          %s\n", file.c_str());
  std::fprintf(table, "kind          delta: rebuilds version %llu (checksum %s, %s) from version %llu (checksum %s)\n",
               static_cast<unsigned long long>(h.target_version), ChecksumToHex(h.target_checksum).c_str(),
               FormatBytes(h.target_image_bytes).c_str(), static_cast<unsigned long long>(h.base_version),
               ChecksumToHex(h.base_checksum).c_str());
  std::fprintf(table, "size          %s (%llu bytes)\n", FormatBytes(size).c_str(), static_cast<unsigned long long>(size));
  std::fprintf(table, "checksum      delta header and body verified; the rebuilt image is verified against "
                      "its own checksum when applied\n");
  std::fprintf(table, "header        a %llu-byte patch of the base's header (%llu JSON bytes shared)\n",
               static_cast<unsigned long long>(contents->header_patch_bytes),
               static_cast<unsigned long long>(contents->header_shared_bytes));
  if (contents->header_shared_bytes == 0) {
    std::fprintf(table, "metadata      %zu entries (of the rebuilt image)\n", contents->target_metadata.size());
  } else {
    std::fprintf(table, "metadata      (of the rebuilt image: needs the base; `viper inspect` the rebuilt version)\n");
  }
  for (const auto& [key, value] : contents->target_metadata) {
    std::fprintf(table, "  %s = %s\n", key.c_str(), value.c_str());
  }
  std::fprintf(table, "records       %zu (tensors not listed are unchanged)\n", contents->records.size());
  std::fprintf(table, "  %-8s  %-12s  %-16s  %s\n", "tensor", "encoding", "elements", "bytes");
  for (const auto& r : contents->records) {
    std::fprintf(table, "  %-8u  %-12s  %-16llu  %llu\n", r.tensor_index, delta::ToString(r.encoding),
                 static_cast<unsigned long long>(r.changed_elements), static_cast<unsigned long long>(r.payload_bytes));
  }
  if (!json_path.empty()) {
    nlohmann::json j;
    j["file"] = file;
    j["kind"] = "delta";
    j["size_bytes"] = size;
    j["base_version"] = h.base_version;
    j["base_checksum"] = ChecksumToHex(h.base_checksum);
    j["version"] = h.target_version;
    j["checksum"] = ChecksumToHex(h.target_checksum);
    j["image_bytes"] = h.target_image_bytes;
    j["header_patch_bytes"] = contents->header_patch_bytes;
    if (contents->header_shared_bytes == 0) j["metadata"] = contents->target_metadata;
    j["records"] = nlohmann::json::array();
    for (const auto& r : contents->records) {
      j["records"].push_back({{"tensor", r.tensor_index},
                              {"encoding", delta::ToString(r.encoding)},
                              {"elements", r.changed_elements},
                              {"bytes", r.payload_bytes}});
    }
    Status st = WriteJson(j, json_path, "inspect");
    if (!st.ok()) return Fail("inspect", st);
  }
  return kExitOk;
}

}  // namespace

int RunInspect(const std::vector<std::string>& args) {
  po::options_description desc("Options");
  std::string file;
  std::string json_path;
  bool no_verify = false;
  bool require_checksum = false;
  bool follow_symlinks = false;
  desc.add_options()("help,h", "print this help")("file", po::value(&file)->required(),
                                                  "the .safetensors file to inspect (required)")(
      "json", po::value(&json_path),
      "also write the listing as JSON to this path ('-' = stdout); keys: file, size_bytes, header_bytes "
      "(N: the JSON header's length, as the specification counts it), data_offset (8 + N), data_bytes, "
      "checksum {value, header_value, kind: none|data only (legacy)|data+header, status: "
      "verified|skipped|unverified}, metadata {key: value}, tensors [{name, dtype, shape, bytes, offset}] "
      "(offset = bytes from the start of the data section)")(
      "no-verify", po::bool_switch(&no_verify),
      "do not hash the data section against viper.checksum (default: verify when the file has one; the "
      "header checksum is always checked)")(
      "require-checksum", po::bool_switch(&require_checksum),
      "refuse (exit 1) a file without Viper's checksum, e.g. one written by the safetensors library "
      "(default: list it as unverified, exit 0)")(
      "follow-symlinks", po::bool_switch(&follow_symlinks),
      "read the file a symbolic link at --file points to (default: refuse a link, exit 1, so that a link "
      "planted in a shared directory cannot make this command read another file)");
  po::variables_map vm;
  const int rc = ParseOrHelp(
      args, desc, &vm, "viper inspect --file X.safetensors [--json PATH] [--no-verify] [--require-checksum]",
      "Parses a safetensors file (the layout Viper sends and stores), checks every header field, lists "
      "its tensors (name, dtype, shape, bytes) and __metadata__, and verifies Viper's checksums: "
      "viper.checksum (XXH3-64 of the data section) and, in format 2, viper.header_checksum (the tensor "
      "table and metadata). A file without any viper.* key is valid but listed as unverified. Exit 1 with "
      "the parser's message on a malformed or corrupt file, including one whose viper.* keys are damaged "
      "(e.g. a checksum key that no longer reads viper.checksum). A PFS delta file (model-v<N>.delta) is "
      "listed as one: the version it rebuilds and its base (version and checksum), its records (tensor, "
      "encoding, changed elements, bytes), its own checksums verified. Only a regular file is read (a FIFO or "
      "device is refused without blocking; a symbolic link unless --follow-symlinks); messages never quote "
      "the file's bytes before they parse as a safetensors header.");
  if (rc != 0) return rc < 0 ? kExitOk : rc;

  // Never blocks on a FIFO, reads only a regular file, and (unless
  // --follow-symlinks) refuses a symbolic link at the last component.
  safetensors::ReadFileOptions read_options;
  read_options.follow_symlinks = follow_symlinks;
  auto buffer = safetensors::ReadFileBuffer(file, read_options);
  if (!buffer.ok()) return Fail("inspect", buffer.status());
  const std::byte* data = buffer->bytes.get();
  if (buffer->size >= sizeof(transports::delta::kMagic) &&
      (std::memcmp(data, transports::delta::kMagic, sizeof(transports::delta::kMagic)) == 0 ||
       std::memcmp(data, transports::delta::kMagicVersion1, sizeof(transports::delta::kMagic)) == 0)) {
    return InspectDelta(file, data, buffer->size, json_path);
  }
  safetensors::ParseOptions options;
  options.verify_checksum = !no_verify;
  options.require_checksum = require_checksum;
  safetensors::ParseInfo info;
  auto state = safetensors::Parse(std::shared_ptr<const void>(buffer->bytes, data), data, buffer->size,
                                  options, &info);
  if (!state.ok()) return Fail("inspect", state.status().WithContext(file));
  const std::map<std::string, std::string>& metadata = info.metadata;

  const uint64_t data_bytes = buffer->size - info.data_offset;  // the parser checked full coverage
  auto checksum_it = metadata.find(safetensors::kChecksumKey);
  auto header_it = metadata.find(safetensors::kHeaderChecksumKey);
  const bool has_checksum = info.checksum != safetensors::ChecksumKind::kNone;
  const char* checksum_status = !has_checksum ? "unverified" : info.data_verified ? "verified" : "skipped";
  std::string checksum_line;
  if (!has_checksum) {
    checksum_line = "unverified (no viper.* keys: not written by Viper, nothing to verify against)";
  } else {
    const std::string value = checksum_it != metadata.end() ? checksum_it->second : "(device checksum)";
    const std::string what = info.checksum == safetensors::ChecksumKind::kDataAndHeader
                                 ? "data+header: XXH3-64 of the data section and of the tensor table and "
                                   "metadata match"
                                 : "data only (legacy file without viper.header_checksum): XXH3-64 of the "
                                   "data section matches";
    if (info.data_verified) {
      checksum_line = value + " (verified, " + what + ")";
    } else {
      checksum_line = value + " (data not verified: --no-verify" +
                      (info.header_verified ? "; header checksum verified)" : ")");
    }
  }

  // --json -: stdout holds only the JSON document; the table goes to stderr.
  FILE* const table = JsonToStdout(json_path) ? stderr : stdout;
  std::fprintf(table, "file          %s\n", file.c_str());
  std::fprintf(table, "size          %s (%llu bytes: 8-byte length prefix, header %llu, data %llu)\n",
              FormatBytes(buffer->size).c_str(), static_cast<unsigned long long>(buffer->size),
              static_cast<unsigned long long>(info.json_header_bytes), static_cast<unsigned long long>(data_bytes));
  std::fprintf(table, "checksum      %s\n", checksum_line.c_str());
  std::fprintf(table, "metadata      %zu entries\n", metadata.size());
  for (const auto& [key, value] : metadata) std::fprintf(table, "  %s = %s\n", key.c_str(), value.c_str());
  std::fprintf(table, "tensors       %zu\n", state->size());
  std::size_t name_width = 4;
  for (const Tensor& t : state->tensors()) name_width = std::max(name_width, t.name.size());
  std::fprintf(table, "  %-*s  %-7s  %-20s  %s\n", static_cast<int>(name_width), "name", "dtype", "shape", "bytes");
  for (const Tensor& t : state->tensors()) {
    std::fprintf(table, "  %-*s  %-7s  %-20s  %zu\n", static_cast<int>(name_width), t.name.c_str(), ToString(t.dtype),
                ShapeText(t.shape).c_str(), t.size_bytes);
  }

  if (!json_path.empty()) {
    nlohmann::json j;
    j["file"] = file;
    j["size_bytes"] = buffer->size;
    j["header_bytes"] = info.json_header_bytes;
    j["data_offset"] = info.data_offset;
    j["data_bytes"] = data_bytes;
    j["checksum"] = {
        {"value", checksum_it == metadata.end() ? nlohmann::json(nullptr) : nlohmann::json(checksum_it->second)},
        {"header_value", header_it == metadata.end() ? nlohmann::json(nullptr) : nlohmann::json(header_it->second)},
        {"kind", safetensors::ToString(info.checksum)},
        {"status", checksum_status}};
    j["metadata"] = metadata;
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
