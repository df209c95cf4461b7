// Proxy fences: ordering between ordinary loads/stores and the asynchronous units (TMA, wgmma).
//
// Hopper's copy engine and tensor cores access shared memory through the *async proxy*, which does not
// see ordinary stores in program order. Whenever threads write shared memory with plain stores and TMA
// or wgmma reads it next, each writing thread must run fence_proxy_async() before the barrier that
// publishes the data; likewise before a TMA store of a tile the threads just wrote.
#pragma once

namespace tk {

/// Make this thread's earlier shared-memory writes visible to the async proxy (TMA, wgmma).
__device__ inline void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

}  // namespace tk
