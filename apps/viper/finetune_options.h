// The trainer's fine-tuning options (--init-model, --freeze) as `viper train`
// and `viper run` spell them.
#pragma once

#include <string>

#include "viper/core/status.h"
#include "viper/workflow/trainer.h"

namespace viper {
namespace cli {

// Help texts shared by both commands.
extern const char* const kInitModelHelp;
extern const char* const kFreezeHelp;

// --freeze: "N" (the first N layers: Options::freeze_layers) or a
// comma-separated list of tensor names (Options::freeze_tensors); which
// names exist and whether N leaves a layer to train is Trainer::Options::IsValid's.
// InvalidArgument naming --freeze and the item.
Status ParseFreeze(const std::string& text, workflow::Trainer::Options* o);

// Rewrites a Trainer::Options::IsValid message about a fine-tuning field
// ("freeze_layers ...", prefixed by `prefix`, e.g. "trainer.") to name the
// flag; true when it did.
bool NameFinetuneFlag(const std::string& prefix, std::string* error);

}  // namespace cli
}  // namespace viper
