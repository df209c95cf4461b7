"""The learner's own kernel as the CPU emulator saw it (issue 29): data model, analysis, source view.

``tklab.trace(...)`` lives in :mod:`tklab.trace.run`; the data in :mod:`tklab.trace.model`.
"""
