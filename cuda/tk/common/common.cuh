// Everything in tk/common: element types, pairs, conversions, small helpers.
#pragma once

#include "base_types.cuh"
#include "convert.cuh"
#include "util.cuh"
