// XXH3-64 built for the avx512 target (xxh3_isa.h; CMake adds the -m flags).
#include "xxh3_isa.h"
#if VIPER_XXH3_X86_VARIANTS
#define VIPER_XXH3_ISA_VAR kXxh3Avx512
#define VIPER_XXH3_ISA_NAME "avx512"
#include "xxh3_isa.inc"
#endif
