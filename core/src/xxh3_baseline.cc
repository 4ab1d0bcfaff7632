// XXH3-64 built for the baseline target (xxh3_isa.h).
#include "xxh3_isa.h"
#define VIPER_XXH3_ISA_VAR kXxh3Baseline
#define VIPER_XXH3_ISA_NAME "baseline"
#include "xxh3_isa.inc"
