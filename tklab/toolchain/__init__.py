"""Compile and inspect (no GPU needed): CUDA C++ -> NVRTC -> PTX, cubin, SASS, resources.

    locate      where NVRTC, the CUDA headers and the disassemblers are (pip wheels first)
    compiler    tklab.compile -> Module / Kernel; CompileError; the default-arch policy
    cache       the on-disk compile cache
    sass        disassembly, resources, instruction histogram, a kernel's main loop
    overlap     which exponentials the SASS issues while a wgmma group is in flight (chapter 10's overlap)
    loop_events a main loop as events in order and counts by kind (what bench/sass_vs_fa4.py reports)
    signature   a kernel's declared parameter types, read from its source
    magic       the %%tk cell magic
"""
