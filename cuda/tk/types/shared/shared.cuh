// Shared-memory types: swizzle policies, tiles, vectors, the dynamic allocator.
#pragma once

#include "allocator.cuh"
#include "st.cuh"
#include "sv.cuh"
#include "swizzle.cuh"
