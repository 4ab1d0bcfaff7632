#include "finetune_options.h"

#include <cstdlib>
#include <sstream>

namespace viper {
namespace cli {

const char* const kInitModelHelp =
    "fine-tune: start from the parameters in this .safetensors file (e.g. one `viper train --save-model` wrote; "
    "datasets/pretrained/ ships one) instead of the seeded initialisation; it must hold exactly this MLP's "
    "tensors (0.weight, 0.bias, 2.weight, ...), F32, with the shapes --hidden implies, every value finite";
const char* const kFreezeHelp =
    "fine-tune: keep these parameters fixed. N = the first N layers, input side first: layer k's weight and bias, "
    "the tensors '<2k>.weight' and '<2k>.bias' (--freeze 1 = 0.weight, 0.bias; --freeze 2 = those and 2.weight, "
    "2.bias); N must leave the output layer to train. Or a comma-separated list of tensor names (e.g. "
    "0.weight,2.bias). A frozen tensor takes no step and keeps no optimiser state (no momentum, no Adam "
    "moments), so its bytes are identical in every version; its gradient is still computed. Default: none";

Status ParseFreeze(const std::string& text, workflow::Trainer::Options* o) {
  if (text.empty()) return Status::Ok();
  const bool all_digits = text.find_first_not_of("0123456789") == std::string::npos;
  if (all_digits) {
    if (text.size() > 6) return InvalidArgumentError("--freeze " + text + ": too many layers");
    o->freeze_layers = std::strtoll(text.c_str(), nullptr, 10);
    return Status::Ok();
  }
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) return InvalidArgumentError("--freeze '" + text + "': empty tensor name in the list");
    if (item.find_first_not_of("0123456789") == std::string::npos) {
      return InvalidArgumentError("--freeze '" + text + "': '" + item +
                                  "' is a number in a list of names; give either N (layers) or tensor names");
    }
    o->freeze_tensors.push_back(item);
  }
  if (text.back() == ',') return InvalidArgumentError("--freeze '" + text + "': empty tensor name in the list");
  return Status::Ok();
}

bool NameFinetuneFlag(const std::string& prefix, std::string* error) {
  for (const char* field : {"freeze_layers", "freeze_tensors"}) {
    const std::string f = prefix + field;
    if (error->rfind(f, 0) == 0) {
      *error = "--freeze: " + f.substr(prefix.size()) + error->substr(f.size());
      return true;
    }
  }
  return false;
}

}  // namespace cli
}  // namespace viper
