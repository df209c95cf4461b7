"""Models the lessons explain and the widgets draw, each checked against measurements (no GPU needed).

    banks       shared-memory banks: wavefronts of one warp-wide access (fitted to ncu)
    layouts     fragment layouts (mma, ldmatrix, stmatrix, wgmma), swizzles, tile -> shared maps, TMA boxes
    occupancy   blocks per SM by the occupancy calculator's per-quadrant register rule
    schedules   consumer warpgroups sharing the tensor cores and the SFUs (chapter 10)
"""
