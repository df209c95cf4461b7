"""Checking a learner's file, and grading a class: ``tklab.check(...)``, ``python -m tklab check|grade``.

    check       find the exercise, compile, static checks, run it isolated; the CLI
    verdict     CheckResult (one list of rows, shown as text and HTML), Evidence
    runner      the parent: the run's folder, the sandboxed child, the time limit
    child       python -m tklab.grading.child: runs the learner's kernel, sends raw outputs; its modes
    channel     the pipe between them (frames, .npy outputs, dtype/shape checked)
    judge       inputs drawn by the parent, outputs compared (tklab.run.arrays.isclose), the outcome
    sandbox     bubblewrap or a clean process tree; limits, wall clock for the whole tree
    unseen      what a run may not see of the workbook: every folder but the package and the tile library
    intake      reading a class folder (the students') in a child with limits: no link, FIFO or device read
    specs/      the registry: one module per exercise (inputs, reference, launch, static checks, baseline,
                target), the drills in specs/drills.py
    drills      drills: a Python function per hardware rule, run in the child (mode cpu), judged by the models
    hints       hint ladders (tklab.hint): concept, question, recipe, code; the learner's state in exercises/.hints.json
    spoilers    an exercise's answer lines, and where they show before the exercise
    exercises   solutions/ -> exercises/, never overwriting a learner's edits; the index (--list, --index)
    grade       instructor mode: a class folder -> CSV; grade_shards: a class in parallel shards, merged
    nbgrade     the exercises as nbgrader assignments, autograded outside the notebooks
"""
