// viper model-dir: list the versions in a PFS-tier model directory, verify
// each one, and name the version a polling consumer would serve.
#include <cstdio>
#include <iostream>

#include "cli_util.h"
#include "commands.h"
#include "viper/core/safetensors.h"
#include "viper/transports/pfs_store.h"

namespace viper {
namespace cli {

int RunModelDir(const std::vector<std::string>& args) {
  po::options_description desc("Options");
  transports::PfsStore::Options store_options;
  std::string json_path;
  desc.add_options()("help,h", "print this help")(
      "dir", po::value(&store_options.dir)->required(),
      "model directory holding model-v<version>.safetensors files (required)")(
      "o-direct", po::bool_switch(&store_options.o_direct),
      "read with O_DIRECT (bypass the page cache), as a consumer configured so would; default off")(
      "json", po::value(&json_path), "also write the listing as JSON to this path ('-' = stdout)");
  po::variables_map vm;
  const int rc = ParseOrHelp(args, desc, &vm, "viper model-dir --dir DIR [options]",
                             "Lists the complete versions (model-v<N>.safetensors; temporaries are ignored) in a "
                             "PFS-tier model directory, reads each one, verifies its XXH3 data checksum, and prints "
                             "version, iteration, size and status. The served version is the newest valid one, as "
                             "a polling consumer picks it. Exit 1 when a version is corrupt or truncated or none "
                             "is valid.");
  if (rc != 0) return rc < 0 ? kExitOk : rc;
  store_options.keep_versions = 0;
  std::string error;
  if (!store_options.IsValid(&error)) return Fail("model-dir", InvalidArgumentError(error));
  transports::PfsStore store(store_options);
  auto versions = store.ListVersions();
  if (!versions.ok()) return Fail("model-dir", versions.status());

  nlohmann::json j;
  j["dir"] = store_options.dir;
  j["versions"] = nlohmann::json::array();
  transports::AlignedBuffer buffer;
  bool any_bad = false;
  std::optional<uint64_t> served;
  std::printf("%-10s %-12s %-14s %s\n", "version", "iteration", "bytes", "status");
  for (uint64_t v : *versions) {
    nlohmann::json row;
    row["version"] = v;
    row["path"] = store.PathFor(v);
    auto size = store.Read(v, &buffer);
    Status status = size.status();
    int64_t iteration = -1;
    if (size.ok()) {
      safetensors::ParseOptions po;
      po.require_checksum = true;
      std::shared_ptr<const void> no_owner;
      auto state = safetensors::Parse(no_owner, buffer.data(), *size, po);
      status = state.status();
      if (state.ok()) {
        iteration = state->metadata.iteration;
        if (state->metadata.version != v) {
          status = DataLossError("the file name says version " + std::to_string(v) + ", its metadata " +
                                 std::to_string(state->metadata.version));
        }
      }
      row["bytes"] = *size;
    }
    if (status.ok()) {
      served = v;
    } else {
      any_bad = true;
    }
    row["iteration"] = iteration;
    row["ok"] = status.ok();
    row["status"] = status.ToString();
    std::printf("%-10llu %-12lld %-14llu %s\n", static_cast<unsigned long long>(v),
                static_cast<long long>(iteration), static_cast<unsigned long long>(size.ok() ? *size : 0),
                status.ok() ? "ok" : status.ToString().c_str());
    if (!status.ok()) std::fprintf(stderr, "viper model-dir: %s: %s\n", store.PathFor(v).c_str(), status.ToString().c_str());
    j["versions"].push_back(row);
  }
  if (served) {
    std::printf("served: version %llu (%s)\n", static_cast<unsigned long long>(*served), store.PathFor(*served).c_str());
    j["served_version"] = *served;
  } else {
    std::printf("served: none (no valid version)\n");
    j["served_version"] = nullptr;
  }
  if (!json_path.empty()) {
    Status st = WriteJson(j, json_path, "model-dir");
    if (!st.ok()) return Fail("model-dir", st);
  }
  return (any_bad || !served) ? kExitFailure : kExitOk;
}

}  // namespace cli
}  // namespace viper
