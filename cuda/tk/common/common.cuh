// Everything in tk/common: element types, pairs, conversions, fast special functions, small helpers.
#pragma once

#include "base_types.cuh"
#include "convert.cuh"
#include "fast_math.cuh"
#include "util.cuh"
