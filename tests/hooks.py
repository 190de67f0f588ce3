"""A webhook endpoint on loopback that keeps what it is sent."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver(ThreadingHTTPServer):
    """An HTTP endpoint on loopback that keeps what it is sent."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.got: list[tuple[dict[str, str], str]] = []
        self.arrived = threading.Condition()

    def wait_for(self, kinds: list[str], within: float = 30) -> list[tuple[dict[str, str], str]]:
        """Until the types of what came are `kinds`, in order, or fail."""
        with self.arrived:
            if not self.arrived.wait_for(lambda: [json.loads(b)["type"] for _, b in self.got] == kinds, within):
                raise AssertionError(f"got {[json.loads(b)['type'] for _, b in self.got]}, expected {kinds}")
            return list(self.got)


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"])).decode()
        with self.server.arrived:
            self.server.got.append((dict(self.headers), body))
            self.server.arrived.notify_all()
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass
