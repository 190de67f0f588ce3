"""The ceiling: stock aiosmtpd on uvloop whose handler answers 250 and stores nothing.

Measured in the same run as mtad and Postfix, it shows how fast an aiosmtpd server
on this machine can go before any durability is paid for: mtad answers 250 only
after COMMIT, so this is not a peer but a reference. Run as a module
(`python -m bench.bare PORT`), it prints `ready PORT` once it listens.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys

from bench.server import Managed


class BareError(Exception):
    """The reference server could not start."""


class BareServer(Managed):
    name = "bare aiosmtpd"
    host = "127.0.0.1"

    def __init__(self) -> None:
        self.port = 0
        self.version = ""
        self._process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        import aiosmtpd

        self.version = aiosmtpd.__version__
        self._process = subprocess.Popen([sys.executable, "-m", "bench.bare", "0"], stdout=subprocess.PIPE, text=True)
        assert self._process.stdout is not None
        line = self._process.stdout.readline()  # bounded: the child prints it or exits
        if not line.startswith("ready "):
            raise BareError(f"bare aiosmtpd did not start: {line!r}")
        self.port = int(line.split()[1])

    def reset(self) -> None:
        """Nothing is stored, so nothing is emptied."""

    def stored(self) -> int | None:
        """None: it acknowledges without storing (smtp-source checked every 250)."""
        return None

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            self._process.wait(30)
        if self._process is not None and self._process.stdout is not None:
            self._process.stdout.close()


class _Accept:
    async def handle_DATA(self, server: object, session: object, envelope: object) -> str:
        return "250 OK"


async def _serve(port: int) -> None:
    from aiosmtpd.smtp import SMTP

    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: SMTP(_Accept(), hostname="bare.example", enable_SMTPUTF8=True, loop=loop), "127.0.0.1", port
    )
    print(f"ready {server.sockets[0].getsockname()[1]}", flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    import uvloop

    logging.getLogger("mail.log").setLevel(logging.WARNING)
    uvloop.run(_serve(int(sys.argv[1])))
