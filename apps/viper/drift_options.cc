#include "drift_options.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <vector>

namespace viper {
namespace cli {

Status ParseSwapClasses(const std::string& text, workflow::Trainer::Options* o) {
  int a = -1, b = -1;
  char tail = 0;
  if (std::sscanf(text.c_str(), "%d,%d%c", &a, &b, &tail) != 2) {
    return InvalidArgumentError("--drift-swap-classes: expected two classes as 'a,b' (e.g. 0,6), got '" + text +
                                "'");
  }
  o->drift_swap_class_a = a;
  o->drift_swap_class_b = b;
  return Status::Ok();
}

Status ParsePriorClasses(const std::string& text, workflow::Trainer::Options* o) {
  std::vector<int> classes;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0 || v > 9) {
      return InvalidArgumentError("--drift-prior-classes: '" + item + "' is not a class in [0, 9] (expected e.g. 0,2,4,6)");
    }
    classes.push_back(static_cast<int>(v));
  }
  o->drift_prior_classes = classes;
  return Status::Ok();
}

}  // namespace cli
}  // namespace viper
