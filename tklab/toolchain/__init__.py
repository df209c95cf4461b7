"""Compile and inspect (no GPU needed): CUDA C++ -> NVRTC -> PTX, cubin, SASS, resources.

    locate      where NVRTC, the CUDA headers and the disassemblers are (pip wheels first)
    compiler    tklab.compile -> Module / Kernel; CompileError; the default-arch policy
    cache       the on-disk compile cache
    sass        disassembly, resources, instruction histogram, a kernel's main loop
    overlap     which exponentials the SASS issues while a wgmma group is in flight (chapter 10's overlap)
    signature   a kernel's declared parameter types, read from its source
    magic       the %%tk cell magic
"""
