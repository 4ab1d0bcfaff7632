// viper model-dir: list the versions in a PFS-tier model directory, check
// each one, name the version a polling consumer would serve, and optionally
// prune old versions.
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
  std::string layout = "flat";
  int keep = 0;
  desc.add_options()("help,h", "print this help")(
      "dir", po::value(&store_options.dir)->required(), "model directory (required)")(
      "layout", po::value(&layout)->default_value(layout),
      "flat: <dir>/model-v<version>.safetensors (what viper run writes) | tf-serving: "
      "<dir>/<version>/model.safetensors (TensorFlow Serving's numbered version directories)")(
      "require-checksum", po::bool_switch(&store_options.require_checksum),
      "refuse versions without Viper's checksum (e.g. written by the safetensors library); default: "
      "serve them, listed as unverified")(
      "keep", po::value(&keep)->default_value(keep),
      "after listing, remove all but the N newest versions, as a producer with keep N does; the served "
      "version is never removed (default 0: remove nothing)")(
      "o-direct", po::bool_switch(&store_options.o_direct),
      "read with O_DIRECT (bypass the page cache), as a consumer configured so would; default off")(
      "json", po::value(&json_path),
      "also write the listing as JSON to this path ('-' = stdout); keys: dir, layout, versions [{version, "
      "path, bytes, iteration, ok, verified, checksum (none|data only (legacy)|data+header), status}], "
      "served_version, served_verified, removed");
  po::variables_map vm;
  const int rc = ParseOrHelp(
      args, desc, &vm, "viper model-dir --dir DIR [--layout flat|tf-serving] [--require-checksum] [--keep N]",
      "Lists the complete versions in a PFS-tier model directory (temporaries are ignored), reads each one, "
      "checks it (safetensors header, Viper's data and header checksums, viper.version against the file "
      "name) and prints version, iteration, size and status: verified (data+header), verified (data only, "
      "legacy), unverified (a valid safetensors file without Viper's checksum), or the reason it is "
      "refused. The served version is the newest valid one, as a polling consumer picks it. Exit 1 when a "
      "version is corrupt or truncated or none is valid.");
  if (rc != 0) return rc < 0 ? kExitOk : rc;
  auto parsed_layout = transports::PfsStore::LayoutFromString(layout);
  if (!parsed_layout) {
    std::cerr << "viper model-dir: --layout: expected flat or tf-serving, got '" << layout << "'\n";
    return kExitUsage;
  }
  if (keep < 0) {
    std::cerr << "viper model-dir: --keep: must be >= 0 (0 = remove nothing), got " << keep << "\n";
    return kExitUsage;
  }
  store_options.layout = *parsed_layout;
  store_options.keep_versions = 0;
  std::string error;
  if (!store_options.IsValid(&error)) return Fail("model-dir", InvalidArgumentError(error));
  transports::PfsStore store(store_options);
  auto versions = store.ListVersions();
  if (!versions.ok()) return Fail("model-dir", versions.status());

  nlohmann::json j;
  j["dir"] = store_options.dir;
  j["layout"] = layout;
  j["versions"] = nlohmann::json::array();
  transports::AlignedBuffer buffer;
  bool any_bad = false;
  std::optional<uint64_t> served;
  bool served_verified = false;
  // --json -: stdout holds only the JSON document; the table goes to stderr.
  FILE* const table = JsonToStdout(json_path) ? stderr : stdout;
  std::fprintf(table, "%-10s %-12s %-14s %s\n", "version", "iteration", "bytes", "status");
  for (uint64_t v : *versions) {
    nlohmann::json row;
    row["version"] = v;
    row["path"] = store.PathFor(v);
    auto checked = store.ReadChecked(v, &buffer);
    int64_t iteration = -1;
    uint64_t bytes = 0;
    std::string status_text;
    if (checked.ok()) {
      iteration = checked->state.metadata.iteration;
      bytes = checked->bytes;
      status_text = checked->TrustText();
      served = v;
      served_verified = checked->verified();
      row["verified"] = checked->verified();
      row["checksum"] = safetensors::ToString(checked->info.checksum);
    } else {
      any_bad = true;
      status_text = checked.status().ToString();
      row["verified"] = false;
      row["checksum"] = nullptr;
      std::fprintf(stderr, "viper model-dir: %s\n", status_text.c_str());
    }
    row["bytes"] = bytes;
    row["iteration"] = iteration;
    row["ok"] = checked.ok();
    row["status"] = status_text;
    std::fprintf(table, "%-10llu %-12lld %-14llu %s\n", static_cast<unsigned long long>(v),
                static_cast<long long>(iteration), static_cast<unsigned long long>(bytes), status_text.c_str());
    j["versions"].push_back(row);
  }
  if (served) {
    std::fprintf(table, "served: version %llu (%s)%s\n", static_cast<unsigned long long>(*served),
                store.PathFor(*served).c_str(), served_verified ? "" : " UNVERIFIED: no Viper checksum");
    j["served_version"] = *served;
    j["served_verified"] = served_verified;
  } else {
    std::fprintf(table, "served: none (no valid version)\n");
    j["served_version"] = nullptr;
    j["served_verified"] = false;
  }
  j["removed"] = nlohmann::json::array();
  if (keep > 0) {
    std::vector<uint64_t> protect;
    if (served) protect.push_back(*served);
    auto removed = store.Prune(keep, protect);
    if (!removed.ok()) return Fail("model-dir", removed.status());
    for (uint64_t v : *removed) {
      std::fprintf(table, "removed: version %llu (%s)\n", static_cast<unsigned long long>(v), store.PathFor(v).c_str());
    }
    j["removed"] = *removed;
  }
  if (!json_path.empty()) {
    Status st = WriteJson(j, json_path, "model-dir");
    if (!st.ok()) return Fail("model-dir", st);
  }
  return (any_bad || !served) ? kExitFailure : kExitOk;
}

}  // namespace cli
}  // namespace viper
