// Warp-scope operations: everything here is called by all 32 lanes of a warp together
// (the global<->shared copies optionally by W warps together).
#pragma once

#include "broadcast.cuh"
#include "convert.cuh"
#include "fill.cuh"
#include "global_register.cuh"
#include "global_shared.cuh"
#include "layout.cuh"
#include "maps.cuh"
#include "mask.cuh"
#include "mma.cuh"
#include "reduce.cuh"
#include "shared_register.cuh"
#include "slice.cuh"
