// Register types: fragment layout, tiles, vectors.
#pragma once

#include "layout.cuh"
#include "rt.cuh"
#include "rv.cuh"
