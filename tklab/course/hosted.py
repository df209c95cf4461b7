"""The hosted path (Colab and other pip-only notebooks): which GitHub repository README's Colab badge opens and
chapter 00's first cell clones. ``make hosted`` (``python -m tklab.course.hosted``) writes it into both.

A hosted notebook has no checkout around it: the badge must name the repository's owner, and so must the cell
that clones the workbook (``TKLAB_GIT``). Neither can be found out from inside Colab, so they are written into
the files: from ``git remote get-url origin`` (a clone of your fork names your fork), or ``--repo OWNER/NAME``.
Run it once where the workbook is published and commit the two files; a clone of that repository then finds
them right, and a fork names itself by running it again. Until then the files hold the placeholder
``OWNER/tklab``: the badge cannot open, and the cell stops with a message that says where to put the URL.

Public API: ``PLACEHOLDER``, ``github_repo(url)``, ``named(root)``, ``write(repo, root)``, ``main(argv)``.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

from ..paths import REPO

PLACEHOLDER = "OWNER/tklab"
README = Path("README.md")
CHAPTER = Path("notebooks") / "00_the_machine.ipynb"
#: The two places: README's badge link, and the clone URL's default in chapter 00's hosted-start cell.
BADGE = re.compile(r"(https://colab\.research\.google\.com/github/)([\w.-]+/[\w.-]+)(/blob/main/notebooks/"
                   r"00_the_machine\.ipynb)")
CLONE = re.compile(r'(os\.environ\.get\("TKLAB_GIT", "https://github\.com/)([\w.-]+/[\w.-]+)("\))')


def github_repo(url: str) -> str | None:
    """``OWNER/NAME`` of a GitHub remote URL (https, ssh or git@ form, with or without ``.git``); None otherwise."""
    m = re.fullmatch(r"(?:https?://(?:[^@/]+@)?github\.com/|(?:ssh://)?git@github\.com[:/])([\w.-]+)/([\w.-]+?)"
                     r"(?:\.git)?/?", url.strip())
    return f"{m[1]}/{m[2]}" if m else None


def origin(root: Path = REPO) -> str | None:
    """The GitHub repository ``origin`` points at, if it is one."""
    try:
        out = subprocess.run(["git", "remote", "get-url", "origin"], cwd=root, capture_output=True, text=True,
                             check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired):  # no git here (a tarball, a minimal image)
        return None
    return github_repo(out.stdout) if out.returncode == 0 else None


def _cell(nb: dict) -> dict:
    cells = [c for c in nb["cells"] if "hosted-start" in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise ValueError(f"{CHAPTER}: expected one cell tagged hosted-start, found {len(cells)}")
    return cells[0]


def named(root: Path = REPO) -> tuple[str | None, str | None]:
    """(the repository README's badge opens, the one chapter 00's cell clones): None where it is not found."""
    import nbformat

    badge = BADGE.search((root / README).read_text())
    clone = CLONE.search(_cell(nbformat.read(root / CHAPTER, as_version=4))["source"])
    return (badge[2] if badge else None), (clone[2] if clone else None)


def write(repo: str, root: Path = REPO) -> list[Path]:
    """Name ``repo`` (``OWNER/NAME``) in README's badge and chapter 00's cell; returns the files it changed."""
    import nbformat

    if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo):
        raise ValueError(f"{repo!r} is not OWNER/NAME")
    changed = []
    readme = root / README
    text = readme.read_text()
    if not BADGE.search(text):
        raise ValueError(f"{readme}: no Colab badge link to chapter 00 found")
    new = BADGE.sub(lambda m: m[1] + repo + m[3], text)
    if new != text:
        readme.write_text(new)
        changed.append(readme)
    path = root / CHAPTER
    raw = path.read_text()
    nb = nbformat.read(path, as_version=4)
    cell = _cell(nb)
    if not CLONE.search(cell.source):
        raise ValueError(f"{path}: the hosted-start cell has no TKLAB_GIT default to set")
    source = CLONE.sub(lambda m: m[1] + repo + m[3], cell.source)
    if source != cell.source:
        cell.source = source
        out = nbformat.writes(nb)
        path.write_text(out if out.endswith("\n") or not raw.endswith("\n") else out + "\n")
        changed.append(path)
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tklab.course.hosted", description=__doc__.splitlines()[0])
    ap.add_argument("--repo", help="OWNER/NAME on GitHub (default: from `git remote get-url origin`)")
    ap.add_argument("--check", action="store_true", help="only say which repository the files name (exit 1 when "
                    "they still hold the placeholder, disagree, or differ from origin)")
    ap.add_argument("--notice", action="store_true", help="one line, only when origin is on GitHub and the files "
                    "name another repository (what `make install` prints); always exit 0")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    badge, clone = named()
    remote = origin()
    if args.notice:
        if remote is not None and (badge, clone) != (remote, remote):
            print(f"README's Colab badge and chapter 00 name github.com/{badge}, origin is github.com/{remote}: "
                  "`make hosted` points them at it (for the hosted notebook; commit the two files)")
        return 0
    if args.check:
        print(f"README's Colab badge opens {badge}; chapter 00 clones {clone}; origin is {remote or 'not GitHub'}")
        wanted = args.repo or remote
        bad = PLACEHOLDER in (badge, clone) or badge != clone or (wanted is not None and wanted != badge)
        if bad:
            print("run `make hosted` (or python -m tklab.course.hosted --repo OWNER/NAME) to name the repository")
        return 1 if bad else 0
    repo = args.repo or remote
    if repo is None:
        print("origin is not a GitHub repository: name it with --repo OWNER/NAME (e.g. make hosted "
              "HOSTED_REPO=you/tklab)", file=sys.stderr)
        return 2
    changed = write(repo)
    for p in changed:
        print(f"{p.relative_to(REPO)} now names github.com/{repo}")
    print("commit them: a hosted notebook opens and clones that repository" if changed else
          f"README and chapter 00 already name github.com/{repo}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
