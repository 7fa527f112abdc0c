"""The frontend's end of a kernel comm (the ``chaz`` comm the sidebar opens), and the kernel's
comm manager that registers its target: what labcomm.py and labchat.py talk to."""

from __future__ import annotations

import json
from collections.abc import Callable


class FakeComm:
    """What the kernel sent on one comm, and a way to send to it as the frontend does."""

    _n = 0

    def __init__(self) -> None:
        FakeComm._n += 1
        self.comm_id = f"comm-{FakeComm._n}"
        self.sent: list[dict] = []
        self.closed = False
        self._on_msg: Callable[[dict], None] | None = None
        self._on_close: Callable[[dict], None] | None = None

    # kernel -> frontend
    def send(self, data: dict) -> None:
        json.dumps(data)  # must be JSON-serialisable, as on the wire
        self.sent.append(data)

    def on_msg(self, cb: Callable[[dict], None]) -> None:
        self._on_msg = cb

    def on_close(self, cb: Callable[[dict], None]) -> None:
        self._on_close = cb

    def close(self) -> None:
        self.closed = True

    # frontend -> kernel
    def receive(self, data: object) -> None:
        assert self._on_msg is not None, "the kernel has not opened this comm"
        self._on_msg({"content": {"comm_id": self.comm_id, "data": data}})

    def frontend_close(self) -> None:
        assert self._on_close is not None
        self._on_close({"content": {"comm_id": self.comm_id, "data": {}}})

    def of(self, kind: str) -> list[dict]:
        """The messages of one ``type`` the kernel sent."""
        return [m for m in self.sent if m.get("type") == kind]


class FakeManager:
    """The kernel's comm manager: the targets registered on it, by name."""

    def __init__(self) -> None:
        self.targets: dict[str, Callable] = {}

    def register_target(self, name: str, fn: Callable) -> None:
        self.targets[name] = fn
