// Global-memory types.
#pragma once

#include "gl.cuh"
#include "tile_order.cuh"
#include "tile_scheduler.cuh"
