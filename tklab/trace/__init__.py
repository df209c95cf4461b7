"""The learner's own kernel as the CPU emulator saw it (issue 29): ``tklab.trace(...)``.

Modules: ``model`` (the data: ``Trace`` and its parts, JSON), ``collect`` (the emulator's trace mode, one launch),
``analyze`` (bank wavefronts through ``tklab.models.banks``, sectors, timeline, loop mix), ``view`` (the source view,
text and HTML, and the check report's "why" lines), ``run`` (``trace``: one launch of CUDA source). An exercise
traced in the sandboxed child is the grader's: ``tklab.grading.traced``.
"""

from .model import Trace
from .run import TraceUnavailable, trace

__all__ = ["Trace", "TraceUnavailable", "trace"]
