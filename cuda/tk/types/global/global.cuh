// Global-memory types.
#pragma once

#include "gl.cuh"
#include "tile_order.cuh"
