#include "drift_options.h"

#include <cerrno>
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

Status ParseLrMilestones(const std::string& text, workflow::Trainer::Options* o) {
  std::vector<workflow::Trainer::Options::LrMilestone> milestones;
  std::stringstream ss(text);
  std::string item;
  while (!text.empty() && std::getline(ss, item, ',')) {
    const std::size_t colon = item.find(':');
    char* end_i = nullptr;
    char* end_f = nullptr;
    workflow::Trainer::Options::LrMilestone m;
    bool ok = colon != std::string::npos && colon > 0 && colon + 1 < item.size();
    if (ok) {
      const std::string it = item.substr(0, colon), f = item.substr(colon + 1);
      errno = 0;
      m.iteration = std::strtoll(it.c_str(), &end_i, 10);
      ok = *end_i == '\0' && errno == 0;
      m.factor = std::strtod(f.c_str(), &end_f);
      ok = ok && *end_f == '\0' && errno == 0;
    }
    if (!ok) {
      return InvalidArgumentError("--lr-milestones: '" + item +
                                  "' is not ITER:FACTOR (expected e.g. 1500:0.1 or 1500:0.1,3000:0.1)");
    }
    milestones.push_back(m);
  }
  o->lr_milestones = milestones;
  return Status::Ok();
}

}  // namespace cli
}  // namespace viper
