"""Run and time on a GPU: the driver, launches, TMA descriptors, timing, ceilings, the course's arrays.

    gpu         is there a GPU, which arch, its properties: the one module that asks the driver
    launch      launching a compiled kernel on CuPy arrays / torch tensors / scalars; prepare
    tma         TMA tensor maps built from Python
    bench       tklab.bench: CUDA events, median, L2 flush, against this GPU's ceilings
    ceilings    measured and datasheet ceilings of known GPUs (data)
    arrays      NumPy or CuPy, bf16 as uint16 bits, the one tolerance rule, poisoned outputs
    baselines   the libraries kernels are timed against (cuBLAS bf16, a device copy)
"""
