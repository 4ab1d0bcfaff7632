// The trainer's drift options as `viper train` and `viper run` spell them.
#pragma once

#include <string>

#include "viper/core/status.h"
#include "viper/workflow/trainer.h"

namespace viper {
namespace cli {

// "a,b": the two classes a label swap exchanges (range checked by
// Trainer::Options::IsValid). InvalidArgument naming --drift-swap-classes.
Status ParseSwapClasses(const std::string& text, workflow::Trainer::Options* o);

// "a,b,...": the classes a prior shift favours, each in [0, 9].
// InvalidArgument naming --drift-prior-classes and the item.
Status ParsePriorClasses(const std::string& text, workflow::Trainer::Options* o);
// --lr-milestones: 'ITER:FACTOR[,ITER:FACTOR...]' (empty = none) into
// o->lr_milestones; range checks are Options::IsValid's.
Status ParseLrMilestones(const std::string& text, workflow::Trainer::Options* o);

}  // namespace cli
}  // namespace viper
