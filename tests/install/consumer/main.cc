// Links against the installed viper::core and viper::datasets.
#include <cstdio>

#include "viper/config.h"
#include "viper/core/model_state.h"
#include "viper/core/units.h"
#include "viper/datasets/log_reader.h"

int main() {
  viper::ModelState state;
  if (!state.Add(viper::Tensor::Allocate("w", viper::DType::kF32, {2, 3})).ok()) return 1;
  auto log = viper::datasets::LogReader::Parse("iteration,loss\n1,2\n2,1\n", "inline.csv", {});
  if (!log.ok()) return 1;
  std::printf("viper %s: %zu bytes, %zu log rows\n", VIPER_VERSION, state.TotalBytes(), log->records.size());
  return state.TotalBytes() == 24 && log->records.size() == 2 ? 0 : 1;
}
