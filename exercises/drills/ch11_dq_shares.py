# GENERATED from solutions/drills/ch11_dq_shares.py by `python -m tklab exercises`: fill in the TODOs.
"""Drill ch11_dq_shares (chapter 11, dQ summed over key blocks): how many shares land on one row of dQ?

Chapter 11's backward gives each block ``block_keys`` keys of one head; the block walks over the query
blocks of 64 rows that see its keys, and for each one adds its share of dQ into all 64 rows of that
query block (a whole tile at a time: with TMA reduce-add, a box). Return how many key blocks add a share
into dQ row ``row`` of a sequence of ``seq`` tokens, with a causal mask (``causal = 1``) or without.
(This is how many fp32 additions, in an order the blocks' timing decides, make up each element of dQ.)

Check: ``tklab.check("ch11_dq_shares")``.
"""


def dq_shares(row: int, seq: int, block_keys: int, causal: int) -> int:
    # TODO: your code here (about 4 lines).
    # Goal: a key block visits whole query blocks: count the key blocks that see any row of row's query
    #       block
    # Stuck? tklab.hint("ch11_dq_shares") in a notebook, or python -m tklab hint ch11_dq_shares.
    pass
