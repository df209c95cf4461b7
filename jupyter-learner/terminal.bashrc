# The lab's terminal (see jupyter_server_config.py): the learner's usual bash setup, then the workbook's
# Python first on PATH, so the README's `python -m tklab check ...` runs the Python that has the packages.
if [ -f "$HOME/.bashrc" ]; then . "$HOME/.bashrc"; fi
if [ -n "$TKLAB_PYTHON_BIN" ]; then
    export PATH="$TKLAB_PYTHON_BIN:$PATH"
    hash -r
fi
