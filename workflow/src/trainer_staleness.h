// Internal: a version the staleness table keeps (Trainer::KeptVersion),
// shared by trainer.cc (which owns Trainer's members) and
// trainer_staleness.cc (which records the table).
#pragma once

#include <cstdint>
#include <vector>

#include "viper/workflow/mlp.h"
#include "viper/workflow/trainer.h"

namespace viper {
namespace workflow {

struct Trainer::KeptVersion {
  int64_t iteration = 0;  // the version: the model as after this iteration
  int64_t point = 0;      // index of its validation point (0 = the first)
  Mlp model;
  // Evaluations already made, by the traffic they were made on (equal
  // traffic, equal bits: reused rather than recomputed).
  struct Measured {
    TrafficState traffic;
    Evaluation val, test;
  };
  std::vector<Measured> measured;
};

}  // namespace workflow
}  // namespace viper
