// Stub for the emulator's preprocessing step: assert() reports the failing thread.
#pragma once
#define assert(e) ((e) ? (void)0 : ::tkemu::assert_fail(#e, __FILE__, __LINE__))
