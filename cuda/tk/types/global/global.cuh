// Global-memory types.
#pragma once

#include "gl.cuh"
