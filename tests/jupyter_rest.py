"""A small client for a Jupyter server's REST and kernel websocket APIs, as JupyterLab uses them.

Used by ``tests/test_hub.py`` to drive each student's server behind JupyterHub: read a notebook through
the contents API, start a kernel session for it, run its code cells one by one over the kernel's
websocket (the Jupyter messaging protocol, JSON frames), collect their outputs as ``nbformat`` outputs,
and save the executed notebook back. Written here (about a hundred lines) rather than taken from a
library because ``nbclient`` talks to local kernels over ZeroMQ, not to a server over its websocket.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import requests
import websocket  # websocket-client, a dependency of jupyter_server


class KernelError(RuntimeError):
    """The kernel did not answer in time, or the server refused a request."""


class ServerClient:
    """One user's server, reached through the hub's proxy at ``base`` (``http://host:port/user/<name>/``)."""

    def __init__(self, base: str, token: str, *, timeout: float = 300.0):
        self.base = base.rstrip("/") + "/"
        self.headers = {"Authorization": f"token {token}"}
        self.timeout = timeout

    def _url(self, path: str) -> str:
        return self.base + path.lstrip("/")

    def get(self, path: str, **kw: Any) -> requests.Response:
        return requests.get(self._url(path), headers=self.headers, timeout=60, **kw)

    def contents(self, path: str) -> dict[str, Any]:
        r = self.get(f"api/contents/{path}", params={"content": 1})
        if r.status_code != 200:
            raise KernelError(f"GET contents {path}: {r.status_code} {r.text[:200]}")
        return r.json()

    def save(self, path: str, model: dict[str, Any]) -> None:
        r = requests.put(self._url(f"api/contents/{path}"), headers=self.headers, json=model, timeout=60)
        if r.status_code not in (200, 201):
            raise KernelError(f"PUT contents {path}: {r.status_code} {r.text[:200]}")

    def start_session(self, notebook_path: str, kernel: str = "python3") -> tuple[str, str]:
        """(session id, kernel id) of a new kernel session for a notebook (its kernel runs in the notebook's folder)."""
        r = requests.post(self._url("api/sessions"), headers=self.headers, timeout=120,
                          json={"path": notebook_path, "type": "notebook", "name": "", "kernel": {"name": kernel}})
        if r.status_code != 201:
            raise KernelError(f"POST sessions: {r.status_code} {r.text[:200]}")
        d = r.json()
        return d["id"], d["kernel"]["id"]

    def end_session(self, session_id: str) -> None:
        requests.delete(self._url(f"api/sessions/{session_id}"), headers=self.headers, timeout=60)

    def kernel(self, kernel_id: str) -> Kernel:
        url = self._url(f"api/kernels/{kernel_id}/channels").replace("http://", "ws://", 1)
        return Kernel(url, self.headers, self.timeout)


class Kernel:
    """A kernel's websocket: ``run(code)`` returns the cell's outputs (nbformat dicts) and its reply status."""

    def __init__(self, url: str, headers: dict[str, str], timeout: float):
        self.session = uuid.uuid4().hex
        self.timeout = timeout
        self.ws = websocket.create_connection(f"{url}?session_id={self.session}", header=headers, timeout=timeout)

    def close(self) -> None:
        self.ws.close()

    def run(self, code: str) -> tuple[list[dict[str, Any]], str]:
        msg_id = uuid.uuid4().hex
        header = {"msg_id": msg_id, "username": "student", "session": self.session, "msg_type": "execute_request",
                  "version": "5.3", "date": dt.datetime.now(dt.timezone.utc).isoformat()}
        self.ws.send(json.dumps({"header": header, "parent_header": {}, "metadata": {}, "channel": "shell",
                                 "buffers": [], "content": {"code": code, "silent": False, "store_history": True,
                                                            "user_expressions": {}, "allow_stdin": False,
                                                            "stop_on_error": True}}))
        outputs: list[dict[str, Any]] = []
        status, idle = None, False
        while status is None or not idle:
            try:
                raw = self.ws.recv()
            except websocket.WebSocketTimeoutException:
                raise KernelError(f"no answer within {self.timeout:g} s to: {code[:80]!r}") from None
            if not isinstance(raw, str):  # binary frames (buffers) carry nothing a notebook's cells need here
                continue
            m = json.loads(raw)
            if m.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, c = m["msg_type"], m["content"]
            if m["channel"] == "shell" and kind == "execute_reply":
                status = c["status"]
            elif kind == "stream":
                outputs.append({"output_type": "stream", "name": c["name"], "text": c["text"]})
            elif kind in ("display_data", "execute_result"):
                out = {"output_type": kind, "data": c["data"], "metadata": c.get("metadata", {})}
                if kind == "execute_result":
                    out["execution_count"] = c.get("execution_count")
                outputs.append(out)
            elif kind == "error":
                outputs.append({"output_type": "error", "ename": c["ename"], "evalue": c["evalue"],
                                "traceback": c["traceback"]})
            elif kind == "status" and c["execution_state"] == "idle":
                idle = True
        return outputs, status
