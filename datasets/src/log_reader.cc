#include "viper/datasets/log_reader.h"
