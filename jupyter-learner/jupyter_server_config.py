"""The learner's lab (`make lab` puts this folder on JUPYTER_CONFIG_PATH): its terminals run the workbook's
Python first on PATH, even when the learner's own shell setup (pyenv, conda, ~/.bashrc) puts another first.

The server runs from the workbook's .venv, so its interpreter's folder is the one to put first; the terminal's
bash reads the learner's ~/.bashrc as usual, then terminal.bashrc (beside this file) restores that order.
"""

import os
import shutil
import sys
from pathlib import Path

os.environ["TKLAB_PYTHON_BIN"] = str(Path(sys.executable).parent)
c = get_config()  # noqa: F821 - provided by Jupyter when it loads this file
c.ServerApp.terminado_settings = {
    "shell_command": [shutil.which("bash") or "/bin/bash", "--rcfile", str(Path(__file__).with_name("terminal.bashrc")),
                      "-i"],
}

# The learner's lab defaults (lab-settings/overrides.json; a learner's own settings still win): Markdown files
# (notebooks/README.md, the workbook's index) open rendered, not as source; running a chapter does not save it
# (no autosave: the chapters stay as shipped unless the learner saves); the file browser gives the whole width
# to names (no Modified column), so 09_flash_attention and 11_flash_attention_backward read apart.
c.LabApp.app_settings_dir = str(Path(__file__).with_name("lab-settings"))
