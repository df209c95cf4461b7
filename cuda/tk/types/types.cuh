// All tile-library types: register, shared and global.
#pragma once

#include "global/global.cuh"
#include "register/register.cuh"
#include "shared/shared.cuh"
