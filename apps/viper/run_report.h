// viper run's report of a live run: the JSON document (--json, schema
// viper.run) and the human table (per version, then the run's totals), both
// from workflow::LiveRun::Summary. MPI builds only (the live workflow's).
#pragma once

#include "viper/config.h"
#if VIPER_HAVE_MPI
#include <cstdio>

#include <nlohmann/json.hpp>

#include "viper/workflow/live.h"

namespace viper {
namespace cli {

nlohmann::json RunSummaryJson(const workflow::LiveRun::Summary& s);
void PrintRunSummary(const workflow::LiveRun::Summary& s, FILE* out);

}  // namespace cli
}  // namespace viper
#endif
