// Stub for the emulator's preprocessing step: the real declarations come from tkemu/prelude.h.
#pragma once
