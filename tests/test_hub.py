"""A class on a real JupyterHub: students log in, get the workbook in their homes, run a chapter, check at once.

JupyterHub from PyPI with its proxy (configurable-http-proxy, from the npm registry, installed here into
``.cache/hub-test/``), the DummyAuthenticator (one shared password) and the local-process spawner that
runs every server as this user: what ``deploy/`` sets up on Kubernetes, minus Kubernetes. Before a
server starts, nbgitpuller pulls the workbook into the student's home (``~/tklab``), as the Helm values'
postStart hook does in a pod, from a git repository made of this working tree; the server puts
``~/tklab`` first on ``PYTHONPATH`` so the chapters use the student's own copy of tklab.

Both students log in through the hub's login form; their servers are started through the hub's REST
API; each runs chapter 00 cell by cell through its server's REST and kernel websocket APIs (concurrently:
two servers on one machine), and saves the executed notebook in their home. Every cell must run without
an error, the cells nbval checks must print what the stored notebook shows, and the plots must come
back as PNG. Then alice edits her exercise, the instructor changes the workbook upstream (the same lines
of the same exercise, and a new file), alice's server restarts and pulls again: her edit is kept, the
new file arrives.

Then a class checks at once (issue 24): alice and bob (their servers still up) and carol and dan (started
now) put four kinds of chapter 01 file in their own homes through their servers (the solution, a typical
slip, the untouched stub, a hostile file reading a classmate's answer) and run ``python -m tklab check``
in their kernels at the same moment, while the instructor grades the collected class. Every verdict must
be the one its file deserves, every file unchanged, nothing of one student in another's output, hint state
or server, and the grade sheet must have every row. Last, the servers stop side by side and the hub shuts
down with nothing left running.

Needs node/npm and network access to the npm registry the first time (CI has both). Without them the
test is skipped, unless ``TKLAB_HUB_TEST=required`` (set by ``make test`` and ``make hub-test``).
"""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from answers import answer

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("TKLAB_HUB_TEST_CACHE", ROOT / ".cache" / "hub-test"))
CHAPTER = "tklab/notebooks/00_the_machine.ipynb"
EXERCISE = "tklab/exercises/ch02_smem_tiling.cu"
STUDENTS = ("alice", "bob")
#: The class that checks its exercise at the same time (test_a_class_checks_at_once): each in their own home.
CLASS = (*STUDENTS, "carol", "dan")
PASSWORD = "classroom-test"
SERVICE_TOKEN = "classroom-test-service-token-0123456789"

pytestmark = pytest.mark.hub


def _require(what: str) -> None:
    message = f"the JupyterHub test needs {what}"
    if os.environ.get("TKLAB_HUB_TEST") == "required":
        pytest.fail(message)
    pytest.skip(message)


def _proxy() -> str:
    """configurable-http-proxy from the npm registry, installed once into the cache folder."""
    exe = CACHE / "node_modules" / ".bin" / "configurable-http-proxy"
    if exe.exists():
        return str(exe)
    if not (shutil.which("node") and shutil.which("npm")):
        _require("node and npm (for configurable-http-proxy, JupyterHub's proxy): apt-get install nodejs npm")
    CACHE.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(CACHE),
                           "configurable-http-proxy@4"], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0 or not exe.exists():
        _require(f"configurable-http-proxy from npm, and `npm install` failed: {proc.stderr.strip()[-400:]}")
    return str(exe)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=instructor", "-c", "user.email=instructor@example.org", *args],
                          cwd=cwd, check=True, capture_output=True, text=True).stdout


def _workbook_upstream(where: Path) -> Path:
    """A git repository of the workbook as this working tree has it (committed or not): the instructor's repo."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True)
    if files.returncode == 0 and files.stdout:
        names = [n for n in files.stdout.split("\0") if n and (ROOT / n).is_file()]
    else:  # not a git checkout: the folders a workbook has
        names = [str(p.relative_to(ROOT)) for d in ("tklab", "cuda", "notebooks", "exercises", "solutions", "bench")
                 for p in (ROOT / d).rglob("*") if p.is_file() and "__pycache__" not in p.parts]
        names += ["pyproject.toml", "README.md"]
    for n in names:
        (where / n).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / n, where / n)
    _git(where, "init", "-q", "-b", "main")
    _git(where, "add", "-A")
    _git(where, "commit", "-q", "-m", "the workbook")
    return where


HUB_CONFIG = '''
import subprocess, sys
from pathlib import Path

c = get_config()  # noqa: F821
c.JupyterHub.bind_url = "http://127.0.0.1:{port}"
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{hub_port}"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{api_port}"
c.ConfigurableHTTPProxy.command = [{proxy!r}]
c.ConfigurableHTTPProxy.pid_file = "{tmp}/proxy.pid"
c.JupyterHub.db_url = "sqlite:///{tmp}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "{tmp}/cookie_secret"
c.JupyterHub.pid_file = "{tmp}/hub.pid"
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = {password!r}
c.Authenticator.allowed_users = {students!r}
c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = "{tmp}/home/{{username}}"
c.Spawner.cmd = [{python!r}, "-m", "jupyterhub.singleuser"]
c.Spawner.args = {args!r}
c.Spawner.default_url = "/lab/tree/tklab/notebooks"
c.Spawner.start_timeout = 300
c.Spawner.http_timeout = 300
c.Spawner.environment = {{
    "PATH": {path!r},
    # the test session's compile cache, shared by both servers (in a pod each home has its own): saves time
    "TKLAB_CACHE_DIR": {cache!r},
    # the student's copy of the workbook first: its chapters, its exercises and its tklab
    "PYTHONPATH": lambda spawner: str(Path(spawner.home_dir) / "tklab"),
}}


def pull_workbook(spawner):
    """What the Helm values' postStart hook does in a pod: nbgitpuller merges the workbook into ~/tklab,
    keeping the student's changes."""
    home = Path(spawner.home_dir)
    home.mkdir(parents=True, exist_ok=True)
    subprocess.run([{python!r}, "-m", "nbgitpuller.pull", {upstream!r}, "main", str(home / "tklab")], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={{"PATH": {path!r}, "HOME": str(home)}})


c.Spawner.pre_spawn_hook = pull_workbook
c.JupyterHub.services = [{{"name": "classroom-test", "api_token": {token!r}}}]
c.JupyterHub.load_roles = [{{"name": "classroom-test", "services": ["classroom-test"],
                            "scopes": ["admin:users", "admin:servers", "tokens", "list:users", "read:users"]}}]
'''


class Hub:
    """A running JupyterHub (and its proxy), started in its own process group and stopped as one."""

    def __init__(self, tmp: Path, proxy: str, upstream: Path):
        import requests

        self.requests = requests
        self.tmp = tmp
        self.port, hub_port, api_port = _free_port(), _free_port(), _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "/usr/bin:/bin")])
        config = HUB_CONFIG.format(port=self.port, hub_port=hub_port, api_port=api_port, proxy=proxy, tmp=tmp,
                                   password=PASSWORD, students=set(CLASS), python=sys.executable, path=path,
                                   args=["--ServerApp.allow_root=True"] if os.geteuid() == 0 else [],
                                   upstream=str(upstream), token=SERVICE_TOKEN,
                                   cache=os.environ.get("TKLAB_CACHE_DIR", str(tmp / "tklab-cache")))
        (tmp / "jupyterhub_config.py").write_text(config)
        self.log = open(tmp / "hub.log", "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(tmp / "jupyterhub_config.py")],
                                     cwd=tmp, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
                                     env={**os.environ, "PATH": path})
        self._wait(lambda: self.api("GET", "").status_code == 200, 120, "the hub's API to answer")

    def _wait(self, ready: Any, seconds: float, what: str) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise AssertionError(f"the hub exited ({self.proc.returncode}) waiting for {what}:\n{self.tail()}")
            try:
                if ready():
                    return
            except self.requests.RequestException:
                pass
            time.sleep(0.5)
        raise AssertionError(f"timed out after {seconds:g} s waiting for {what}:\n{self.tail()}")

    def tail(self) -> str:
        self.log.flush()
        return "\n".join((self.tmp / "hub.log").read_text(errors="replace").splitlines()[-40:])

    def api(self, method: str, path: str, **kw: Any) -> Any:
        return self.requests.request(method, f"{self.url}/hub/api/{path}", timeout=60,
                                     headers={"Authorization": f"token {SERVICE_TOKEN}"}, **kw)

    def login(self, name: str, password: str) -> Any:
        """The login form, as a browser submits it; returns the session (its cookies)."""
        s = self.requests.Session()
        s.get(f"{self.url}/hub/login", timeout=60)
        s.post(f"{self.url}/hub/login?next=/hub/home", timeout=60,
               data={"username": name, "password": password, "_xsrf": s.cookies.get("_xsrf", "")})
        return s

    def whoami(self, session: Any) -> str | None:
        r = session.get(f"{self.url}/hub/api/user", timeout=60,
                        headers={"X-XSRFToken": session.cookies.get("_xsrf", "")})
        return r.json().get("name") if r.status_code == 200 else None

    def token_for(self, name: str) -> str:
        r = self.api("POST", f"users/{name}/tokens", json={"note": "classroom test", "expires_in": 3600})
        assert r.status_code in (200, 201), r.text
        return str(r.json()["token"])

    def server(self, name: str) -> dict[str, Any] | None:
        return self.api("GET", f"users/{name}").json().get("servers", {}).get("")

    def start(self, *names: str) -> None:
        """Ask for the servers (the hub spawns them side by side), then wait until every one is ready."""
        for name in names:
            r = self.api("POST", f"users/{name}/server")
            assert r.status_code in (201, 202), r.text
        for name in names:
            self._wait(lambda n=name: (self.server(n) or {}).get("ready"), 300, f"{name}'s server to be ready")

    def stop_server(self, name: str) -> None:
        r = self.api("DELETE", f"users/{name}/server")
        assert r.status_code in (202, 204), r.text
        self._wait(lambda: self.server(name) is None, 120, f"{name}'s server to stop")

    def stop_servers(self, *names: str) -> None:
        """Stop the servers side by side (the hub stops them in parallel), then wait until each is gone."""
        for name in names:
            r = self.api("DELETE", f"users/{name}/server")
            assert r.status_code in (202, 204), r.text
        for name in names:
            self._wait(lambda n=name: self.server(n) is None, 120, f"{name}'s server to stop")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # the hub stops its servers and its proxy
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # anything of this hub's process group still there
        except ProcessLookupError:
            pass
        self.log.close()


@pytest.fixture(scope="module")
def hub(tmp_path_factory) -> Iterator[Hub]:
    proxy = _proxy()
    if shutil.which("git") is None:
        _require("git (nbgitpuller pulls the workbook with it)")
    try:
        import jupyterhub  # noqa: F401
        import nbgitpuller  # noqa: F401
    except ImportError as e:
        _require(f"{e.name} (in the dev extra: pip install -e '.[dev]')")
    tmp = tmp_path_factory.mktemp("hub")
    upstream = _workbook_upstream(tmp / "upstream")
    h = Hub(tmp, proxy, upstream)
    try:
        yield h
    finally:
        h.stop()


def _outputs_text(outputs: list[dict[str, Any]]) -> str:
    parts = []
    for o in outputs:
        if o["output_type"] == "stream":
            parts.append(o["text"])
        elif o["output_type"] in ("execute_result", "display_data") and "text/plain" in o.get("data", {}):
            text = o["data"]["text/plain"]
            parts.append(text if isinstance(text, str) else "".join(text))
    return "".join(parts)


def _run_chapter(hub: Hub, name: str) -> dict[str, Any]:
    """Run the chapter in the student's server, cell by cell, and save it; what came out of each cell."""
    import nbformat
    from jupyter_rest import ServerClient

    client = ServerClient(f"{hub.url}/user/{name}/", hub.token_for(name))
    model = client.contents(CHAPTER)
    nb = nbformat.from_dict(model["content"])
    session, kernel_id = client.start_session(CHAPTER)
    kernel = client.kernel(kernel_id)
    cells = []
    try:
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            outputs, status = kernel.run(cell.source)
            cell.outputs = [nbformat.from_dict(o) for o in outputs]
            cells.append({"source": cell.source, "outputs": outputs, "status": status})
        where, _ = kernel.run("import tklab, os; print(os.path.realpath(tklab.__file__))")
    finally:
        kernel.close()
        client.end_session(session)
    client.save(CHAPTER, {"type": "notebook", "format": "json", "content": nb})
    return {"cells": cells, "tklab": _outputs_text(where).strip(), "client": client}


def test_two_students_on_one_hub(hub):
    # login through the form: a wrong password is refused, the right one gives each student a session
    assert hub.whoami(hub.login("alice", "wrong")) is None
    sessions = {s: hub.login(s, PASSWORD) for s in STUDENTS}
    assert {s: hub.whoami(sessions[s]) for s in STUDENTS} == {s: s for s in STUDENTS}
    assert hub.whoami(hub.login("mallory", PASSWORD)) is None  # not on the class list
    hub.start(*STUDENTS)
    with concurrent.futures.ThreadPoolExecutor(len(STUDENTS)) as pool:
        runs = dict(zip(STUDENTS, pool.map(lambda s: _run_chapter(hub, s), STUDENTS), strict=True))

    import nbformat

    stored = nbformat.read(ROOT / "notebooks" / "00_the_machine.ipynb", as_version=4)
    expected = {c.source: _outputs_text(c.outputs) for c in stored.cells
                if c.cell_type == "code" and "nbval-check-output" in c.metadata.get("tags", [])}
    pictures = {c.source for c in stored.cells if c.cell_type == "code"
                and any("image/png" in o.get("data", {}) for o in c.outputs)}
    assert expected and pictures
    for s, run in runs.items():
        errors = [(c["source"][:60], o.get("ename"), o.get("evalue")) for c in run["cells"] for o in c["outputs"]
                  if o["output_type"] == "error"]
        assert not errors and all(c["status"] == "ok" for c in run["cells"]), (s, errors)
        checked = {c["source"]: _outputs_text(c["outputs"]) for c in run["cells"] if c["source"] in expected}
        assert checked == expected, s  # the cells nbval checks print what the stored chapter shows
        drawn = {c["source"] for c in run["cells"] if any("image/png" in o.get("data", {}) for o in c["outputs"])}
        assert drawn == pictures, s  # the figures come back as PNG, from the cells that stored them
        home = hub.tmp / "home" / s / "tklab"
        assert run["tklab"] == str((home / "tklab" / "__init__.py").resolve()), run["tklab"]  # the student's copy
        saved = nbformat.read(home / "notebooks" / "00_the_machine.ipynb", as_version=4)  # saved in their home
        assert sum(len(c.get("outputs", [])) for c in saved.cells if c.cell_type == "code") >= len(expected)

    # a student's token reaches their own server only
    alice = runs["alice"]["client"]
    assert alice.get("api/status").status_code == 200
    import requests

    assert requests.get(f"{hub.url}/user/bob/api/status", headers=alice.headers, timeout=60).status_code in (403, 404)

    # alice edits her exercise; the instructor changes the same lines upstream and adds a file; alice's server
    # restarts and pulls the workbook again: her edit stays, the new file arrives
    model = alice.contents(EXERCISE)
    mine = model["content"].rstrip("\n") + "\n// alice: my tiles are 32 x 32\n"
    alice.save(EXERCISE, {"type": "file", "format": "text", "content": mine})
    upstream = hub.tmp / "upstream"
    ex = upstream / "exercises" / "ch02_smem_tiling.cu"
    ex.write_text(ex.read_text().rstrip("\n") + "\n// instructor: a clearer hint\n")
    (upstream / "notebooks" / "ERRATA.md").write_text("# Errata\n\nChapter 02: a clearer hint.\n")
    _git(upstream, "add", "-A")
    _git(upstream, "commit", "-q", "-m", "errata")
    hub.stop_server("alice")
    hub.start("alice")
    alice = runs["alice"]["client"].__class__(f"{hub.url}/user/alice/", hub.token_for("alice"))
    assert alice.contents(EXERCISE)["content"] == mine
    assert "Chapter 02" in alice.contents("tklab/notebooks/ERRATA.md")["content"]
    bob_home = hub.tmp / "home" / "bob" / "tklab"
    assert not (bob_home / "notebooks" / "ERRATA.md").exists()  # bob pulls when his server next starts

    # (both servers stay up: the class test below checks through them, then stops every server)


# ---- a class checking at once (issue 24, item 7) ----------------------------------------------------------

CH01 = "tklab/exercises/ch01_naive_matmul.py"
SOLUTION = (ROOT / "solutions" / "ch01_naive_matmul" / "ch01_naive_matmul.py").read_text()
#: A typical slip: the dot product stops one term short.
SHORT = SOLUTION.replace(answer("ch01_naive_matmul", "for k"),
                         answer("ch01_naive_matmul", "for k").replace("A.shape[1]", "A.shape[1] - 1"))
#: The red-team suite's pipe forgery (test_redteam_isolation.PIPE_FORGERY) with a classmate's file: read alice's
#: answer, write the right outputs into the result pipe at import, then leave.
HOSTILE = '''import os
import numpy as np
STOLEN = open("{classmate}").read()
A = np.load("case-0-A.npy"); B = np.load("case-0-B.npy")
for fd in range(3, 64):
    try:
        np.save(f"/proc/self/fd/{{fd}}", A @ B)
    except Exception:
        pass
os._exit(0)
'''


def _check_in_kernel(hub: Hub, name: str) -> dict[str, Any]:
    """The student's kernel runs ``python -m tklab check`` on their exercise, as a learner types it (the
    workbook's Python first on PATH); the check's JSON verdict and exit status come back."""
    import json

    from jupyter_rest import ServerClient

    client = ServerClient(f"{hub.url}/user/{name}/", hub.token_for(name))
    session, kernel_id = client.start_session("tklab/notebooks/01_naive_matmul.ipynb")
    kernel = client.kernel(kernel_id)
    try:
        outputs, status = kernel.run(
            "import json, subprocess\n"
            "p = subprocess.run(['python', '-m', 'tklab', 'check', '../exercises/ch01_naive_matmul.py', '--json'],\n"
            "                   capture_output=True, text=True)\n"
            "print('@@check', json.dumps({'rc': p.returncode, 'out': p.stdout, 'err': p.stderr[-2000:]}))")
    finally:
        kernel.close()
        client.end_session(session)
    line = next((ln for ln in _outputs_text(outputs).splitlines() if ln.startswith("@@check ")), None)
    assert status == "ok" and line, (name, status, _outputs_text(outputs)[-2000:])
    got = json.loads(line[len("@@check "):])
    try:
        got["result"] = json.loads(got["out"].strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise AssertionError(f"{name}: no JSON verdict: {got}") from None
    return got


def test_a_class_checks_at_once(hub):
    """Four students, four states of the same exercise (right, a typical mistake, the untouched stub, a hostile
    file), check at the same moment through their own servers, while the instructor grades the class; every
    verdict is right, every file is as its student left it, nothing crosses between them, and the grade sheet
    has every row. (alice's and bob's servers are still up from the test above; carol and dan join.)"""
    import csv
    import hashlib
    import json

    import requests
    from jupyter_rest import ServerClient

    from tklab.grading import sandbox

    right, wrong, stub, hostile = CLASS
    homes = {s: hub.tmp / "home" / s / "tklab" for s in CLASS}
    mine = {s: homes[s] / "exercises" / "ch01_naive_matmul.py" for s in CLASS}
    hub.start(*[s for s in CLASS if not (hub.server(s) or {}).get("ready")])
    clients = {s: ServerClient(f"{hub.url}/user/{s}/", hub.token_for(s)) for s in CLASS}
    files = {right: SOLUTION, wrong: SHORT, hostile: HOSTILE.format(classmate=mine[right])}
    assert SHORT != SOLUTION
    for s, text in files.items():  # each edits their exercise through their own server; the stub stays as it came
        clients[s].save(CH01, {"type": "file", "format": "text", "content": text})
    assert mine[stub].read_text() == (ROOT / "exercises" / "ch01_naive_matmul.py").read_text()
    before = {s: hashlib.sha256(mine[s].read_bytes()).hexdigest() for s in CLASS}

    # the instructor collects the class (every exercises/ folder) and grades it while the students check
    klass = hub.tmp / "class"
    for s in CLASS:
        shutil.copytree(homes[s] / "exercises", klass / s)
    sheet = hub.tmp / "grades.csv"
    grading = subprocess.Popen([sys.executable, "-m", "tklab", "grade", "--class", str(klass), "--exercises", "ch01",
                                "--out", str(sheet), "--no-bench",
                                *(["--allow-unsandboxed"] if sandbox.grading_problem() else [])],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        with concurrent.futures.ThreadPoolExecutor(len(CLASS)) as pool:
            checks = dict(zip(CLASS, pool.map(lambda s: _check_in_kernel(hub, s), CLASS), strict=True))
        _, err = grading.communicate(timeout=300)
    finally:
        if grading.poll() is None:
            grading.kill()
    (hub.tmp / "checks.json").write_text(json.dumps(checks, indent=1))  # what each student saw, for a failure

    r = {s: c["result"] for s, c in checks.items()}
    assert (checks[right]["rc"], r[right]["passed"]) == (0, True), r[right]
    assert r[right]["established"] in ("cpu-emulation", "gpu"), r[right]  # numba's PTX interpreted, or the GPU
    assert (checks[wrong]["rc"], r[wrong]["passed"], r[wrong]["run_status"]) == (1, False, "wrong"), r[wrong]
    assert r[wrong]["mismatch"]["index"] == [0, 0], r[wrong]  # wrong from the first element on
    assert (checks[stub]["rc"], r[stub]["passed"], r[stub]["compiled"]) == (1, False, True), r[stub]
    assert "never assigns to C" in " ".join(c["detail"] for c in r[stub]["static"]), r[stub]
    assert (checks[hostile]["rc"], r[hostile]["passed"], r[hostile]["compiled"]) == (1, False, False), r[hostile]
    assert "refused before running" in r[hostile]["compile_error"], r[hostile]
    for s in CLASS:  # each report is about the student's own file, which is as they left it
        assert (homes[s] / "notebooks" / r[s]["path"]).resolve() == mine[s].resolve(), (s, r[s]["path"])
        assert hashlib.sha256(mine[s].read_bytes()).hexdigest() == before[s], f"{s}'s file changed during the checks"
    assert answer("ch01_naive_matmul", "cuda.grid") not in checks[hostile]["out"] + checks[hostile]["err"]  # alice's
    # hint state: a failed check of one's own copy unlocks a hint there, and only there; the untouched stub's
    # check is "not started", no attempt
    assert r[stub]["not_started"].startswith("fill in the TODO at line"), r[stub]
    failed = {s: json.loads(p.read_text()).get("ch01_naive_matmul", {}).get("failed", 0) if p.is_file() else 0
              for s in CLASS for p in [homes[s] / "exercises" / ".hints.json"]}
    assert failed == {right: 0, wrong: 1, stub: 0, hostile: 0}, failed
    # one student's token opens nobody else's server
    assert clients[hostile].get("api/status").status_code == 200
    assert requests.get(f"{hub.url}/user/{right}/api/contents/{CH01}", headers=clients[hostile].headers,
                        timeout=60).status_code in (403, 404)

    # the sheet: one row per student, as their checks said
    assert grading.returncode == 0, err[-2000:]
    rows = {row["student"]: row for row in csv.DictReader(sheet.open())}
    assert sorted(rows) == sorted(CLASS), rows
    assert {s: rows[s]["correct"] for s in CLASS} == {right: "yes", wrong: "no", stub: "no", hostile: "no"}, rows
    assert rows[hostile]["compiled"] == "no" and {rows[s]["exercise"] for s in CLASS} == {"ch01_naive_matmul"}
    assert rows[right]["established"] in ("cpu-emulation", "gpu") and rows[right]["isolation"], rows[right]

    hub.stop_servers(*CLASS)
    assert all(hub.server(s) is None for s in CLASS)


def test_the_hub_leaves_nothing_running(hub):
    hub.stop()
    assert hub.proc.returncode is not None
    alive = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if os.getpgid(int(p.name)) == hub.proc.pid:
                    alive.append(p.name)
            except (ProcessLookupError, PermissionError):
                pass
    assert not alive, alive
