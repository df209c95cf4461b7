"""deploy/: the Helm values name the images and the GPU resources consistently, and the grading job scripts
really grade a class in shards and merge it into the sheet of a single run.

The Slurm scripts run here as plain bash (``#SBATCH`` lines are comments to bash) with the variables
Slurm would set; the Kubernetes Jobs' commands run here through ``sh -c`` with the variables the Job
sets (``JOB_COMPLETION_INDEX`` from the indexed Job). What cannot run here: the images' build (no
docker daemon on CI; ``make image-test`` builds the CPU image where there is one), and Kubernetes itself.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tklab.paths import solution

yaml = pytest.importorskip("yaml", reason="PyYAML is in the dev extra")

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
VALUES = DEPLOY / "jupyterhub" / "values.yaml"
DOC = ROOT / "docs" / "CLASSROOM.md"
#: NVIDIA's MIG profiles (name: SMs, memory in GB as named, instances per card), from the MIG user guide and
#: `nvidia-smi mig -lgip` on an H100 80GB; the H200 is the same GH100 die (132 SMs) with 141 GB.
MIG = {
    "H100 80GB": {"1g.10gb": (16, 10, 7), "1g.20gb": (26, 20, 4), "2g.20gb": (32, 20, 3), "3g.40gb": (60, 40, 2),
                  "4g.40gb": (64, 40, 1), "7g.80gb": (132, 80, 1)},
    "H200": {"1g.18gb": (16, 18, 7), "1g.35gb": (26, 35, 4), "2g.35gb": (32, 35, 3), "3g.71gb": (60, 71, 2),
             "4g.71gb": (64, 71, 1), "7g.141gb": (132, 141, 1)},
}


def dockerfile_targets() -> set[str]:
    return set(re.findall(r"^FROM\s+\S+\s+AS\s+(\S+)", (DEPLOY / "Dockerfile").read_text(), re.M))


@pytest.fixture(scope="module")
def values() -> dict:
    return yaml.safe_load(VALUES.read_text())


def _image_tag(image: str) -> str:
    assert image.startswith("registry.example.org/tklab-classroom:"), image
    return image.rsplit(":", 1)[1]


def test_profiles_name_the_images_of_the_dockerfile_and_their_resources(values):
    targets = dockerfile_targets()
    assert targets == {"cpu", "gpu"}
    single = values["singleuser"]
    assert single["image"]["tag"] in targets
    profiles = {p["slug"]: p for p in single["profileList"]}
    assert set(profiles) == {"cpu", "gpu", "mig"} and profiles["cpu"].get("default") is True
    tags = {slug: _image_tag(p["kubespawner_override"]["image"]) for slug, p in profiles.items()}
    assert tags == {"cpu": "cpu", "gpu": "gpu", "mig": "gpu"}
    assert "extra_resource_limits" not in profiles["cpu"]["kubespawner_override"]
    assert profiles["gpu"]["kubespawner_override"]["extra_resource_limits"] == {"nvidia.com/gpu": "1"}
    for p in profiles.values():  # a GPU pod must tolerate the GPU nodes' taint; the CPU one needs nothing
        has_gpu = p["slug"] != "cpu"
        assert bool(p["kubespawner_override"].get("tolerations")) == has_gpu


def test_mig_choices_ask_for_one_real_slice_and_say_what_it_is(values):
    mig = next(p for p in values["singleuser"]["profileList"] if p["slug"] == "mig")
    assert "extra_resource_limits" not in mig["kubespawner_override"]  # the slice comes from the choice
    choices = mig["profile_options"]["slice"]["choices"]
    assert sum(bool(c.get("default")) for c in choices.values()) == 1
    cards = set()
    for key, choice in choices.items():
        limits = choice["kubespawner_override"]["extra_resource_limits"]
        assert len(limits) == 1 and list(limits.values()) == ["1"], key
        name = next(iter(limits)).removeprefix("nvidia.com/mig-")
        card = next(c for c, profiles in MIG.items() if name in profiles)
        cards.add(card)
        sms, gb, per_card = MIG[card][name]
        text = choice["display_name"]
        assert text.startswith(card.split()[0]) and name in text, text
        assert f"{sms} SMs" in text and f"{gb} GB" in text and f"{per_card} " in text, text
        assert key == f"{card.split()[0].lower()}-{name.replace('.', '-')}", key
    assert cards == set(MIG)  # both cards offered


def test_the_workbook_is_pulled_where_the_server_looks_for_it(values):
    single = values["singleuser"]
    command = " ".join(single["lifecycleHooks"]["postStart"]["exec"]["command"])
    m = re.search(r"gitpuller (\S+) (\S+) (\S+)", command)
    assert m, command
    target = m.group(3)
    assert single["extraEnv"]["PYTHONPATH"] == target  # the chapters import the student's own tklab
    assert single["defaultUrl"] == "/lab/tree/" + Path(target).name + "/notebooks"
    assert "||" in command  # a failed pull does not keep the server from starting


def test_the_docs_table_of_slices_matches(values):
    text = DOC.read_text()
    for card, profiles in MIG.items():
        for name, (sms, gb, per_card) in profiles.items():
            row = next((ln for ln in text.splitlines() if ln.startswith(f"| {card} | {name} |")), None)
            assert row is not None, f"docs/CLASSROOM.md has no row for {card} {name}"
            cells = [c.strip() for c in row.strip("|").split("|")]
            assert cells[2:5] == [str(sms), str(gb), str(per_card)], row


def test_the_images_install_what_the_workbook_needs():
    text = (DEPLOY / "Dockerfile").read_text()
    extras = re.search(r'pip install --no-cache-dir -e "/opt/tklab\[([a-z,]+)\]"', text)
    assert extras, "the CPU image installs tklab from /opt/tklab with extras"
    pyproject = (ROOT / "pyproject.toml").read_text()
    for extra in extras.group(1).split(","):
        assert re.search(rf"^{extra} = \[", pyproject, re.M), extra
    gpu_pkgs = re.search(r'ARG GPU_PKGS="([^"]+)"', text).group(1)
    make_pkgs = re.search(r"^LINUX_GPU_PKGS := (.+)$", (ROOT / "Makefile").read_text(), re.M).group(1)
    names = lambda s: sorted(re.split(r"[>=\[]", p)[0] for p in s.split())  # noqa: E731
    assert names(gpu_pkgs) == names(make_pkgs)  # the GPU image has what `make` installs for a GPU
    for tool in ("g++", "bubblewrap", "git"):
        assert tool in text


# ---- the grading jobs, run here ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small_class(tmp_path_factory) -> tuple[Path, bytes]:
    """Three students and a single run's sheet (static checks of ch01: instant, and the same on every run)."""
    root = tmp_path_factory.mktemp("jobs")
    cls = root / "class"
    exercise = (ROOT / "exercises").joinpath
    for name, source in (("ann", solution), ("ben", exercise), ("cat", solution)):
        (cls / name).mkdir(parents=True)
        shutil.copy(source("ch01_naive_matmul.py"), cls / name)
    single = root / "single.csv"
    subprocess.run([sys.executable, "-m", "tklab", "grade", "--class", str(cls), "--out", str(single), "--no-run",
                    "--exercises", "ch01"], check=True, capture_output=True, cwd=ROOT)
    return cls, single.read_bytes()


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def test_slurm_array_then_merge_is_the_single_run(small_class, tmp_path):
    cls, single = small_class
    results = tmp_path / "grades"
    common = {"CLASS": str(cls), "RESULTS": str(results), "SHARDS": "2", "PYTHON": sys.executable,
              "GRADE_ARGS": "--no-run --exercises ch01"}
    for script in ("slurm-grade.sh", "slurm-merge.sh", "slurm-submit.sh"):
        subprocess.run(["bash", "-n", str(DEPLOY / "grading" / script)], check=True)
    missing = subprocess.run(["bash", str(DEPLOY / "grading" / "slurm-grade.sh")], capture_output=True, text=True,
                             env=_env(**{k: v for k, v in common.items() if k != "SHARDS"}, SLURM_ARRAY_TASK_ID="0"))
    assert missing.returncode != 0 and "SHARDS" in missing.stderr
    for task in ("1", "0"):  # array tasks finish in any order
        subprocess.run(["bash", str(DEPLOY / "grading" / "slurm-grade.sh")], check=True, capture_output=True,
                       env=_env(**common, SLURM_ARRAY_TASK_ID=task, SLURM_ARRAY_JOB_ID="4242"))
    merged = subprocess.run(["bash", str(DEPLOY / "grading" / "slurm-merge.sh")], capture_output=True, text=True,
                            env=_env(**common))
    assert merged.returncode == 0, merged.stderr
    assert (results / "grades.csv").read_bytes() == single


def _job(name: str) -> dict:
    return yaml.safe_load((DEPLOY / "grading" / name).read_text())


def _container_env(job: dict) -> dict[str, str]:
    c = job["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in c["env"]}


def test_the_indexed_job_is_consistent():
    job = _job("k8s-grade-job.yaml")
    spec = job["spec"]
    n = int(_container_env(job)["SHARDS"])
    assert spec["completionMode"] == "Indexed" and spec["completions"] == n == spec["parallelism"]
    c = spec["template"]["spec"]["containers"][0]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1" and _image_tag(c["image"]) == "gpu"
    assert int(_container_env(_job("k8s-merge-job.yaml"))["SHARDS"]) == n
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    env = _container_env(job)
    assert mounts[env["CLASS_DIR"]].get("readOnly") is True and env["RESULTS_DIR"] in mounts


def test_the_indexed_jobs_commands_grade_and_merge(small_class, tmp_path):
    cls, single = small_class
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)  # the image's `python`
    results = tmp_path / "results"
    results.mkdir()
    grade_job, merge_job = _job("k8s-grade-job.yaml"), _job("k8s-merge-job.yaml")
    n = 2
    for job, index in [(grade_job, i) for i in range(n)] + [(merge_job, None)]:
        c = job["spec"]["template"]["spec"]["containers"][0]
        env = _env(**{**_container_env(job), "SHARDS": str(n), "CLASS_DIR": str(cls), "RESULTS_DIR": str(results),
                      "GRADE_ARGS": "--no-run --exercises ch01",
                      "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
        if index is not None:
            env["JOB_COMPLETION_INDEX"] = str(index)  # what Kubernetes sets in each pod of an indexed Job
        proc = subprocess.run([*c["command"], *c["args"]], capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr
    assert (results / "grades.csv").read_bytes() == single
