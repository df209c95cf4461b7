// Warpgroup-scope operations (sm_90a): ids and barriers, register rebalancing, wgmma, stores.
#pragma once

#include "mma.cuh"
#include "scope.cuh"
#include "store.cuh"
