"""Real DNS servers on loopback for the integration tests.

`Dnsmasq` serves a small zone (MX, A, AAAA, a null MX as a raw record) on a free
UDP port; names under its local domain that it does not know are NXDOMAIN.
`ServfailServer` answers every query with SERVFAIL, which dnsmasq cannot be made
to do on purpose; `PickyServer` answers from a few records and fails the queries
it is told to (REFUSED, SERVFAIL, or no answer at all), as broken authoritative
servers still do to AAAA.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Sequence

import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import dns.rrset
import pytest

# For the modules that run dnsmasq: skipped where it is missing.
NEEDS_DNSMASQ = pytest.mark.skipif(
    shutil.which("dnsmasq") is None and shutil.which("dnsmasq", path="/usr/sbin") is None,
    reason="dnsmasq is not installed (make test installs it as root)",
)


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def txt_record(name: str, record: str) -> str:
    """dnsmasq's `txt-record=NAME,...` value (no leading --) for a long record: strings of at most 255 octets."""
    return f"txt-record={name}," + ",".join(record[i : i + 250] for i in range(0, len(record), 250))


class Dnsmasq:
    def __init__(self, local_domain: str, options: Sequence[str]) -> None:
        binary = shutil.which("dnsmasq") or shutil.which("dnsmasq", path="/usr/sbin:/sbin")
        assert binary is not None
        for tries_left in range(4, -1, -1):  # the free UDP port's TCP twin may be taken: another port
            self.port = free_udp_port()
            argv = [
                binary, "--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts",
                f"--port={self.port}", "--listen-address=127.0.0.1", "--bind-interfaces",
                f"--local=/{local_domain}/", "--local-ttl=300", "--log-facility=-", *options,
            ]  # fmt: skip
            if os.geteuid() == 0:
                argv.append("--user=root")
            self._process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                self._wait_ready(local_domain)
                return
            except RuntimeError:
                self.close()
                if not tries_left:
                    raise

    def _wait_ready(self, domain: str) -> None:
        query = dns.message.make_query(f"ready-check.{domain}", "A")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # bounded: dnsmasq answers within milliseconds
            if self._process.poll() is not None:
                raise RuntimeError(f"dnsmasq exited with {self._process.returncode}")
            try:
                dns.query.udp(query, "127.0.0.1", port=self.port, timeout=0.2)
                return
            except dns.exception.Timeout:
                continue
            except OSError:  # not listening yet: connection refused
                time.sleep(0.02)
        raise RuntimeError("dnsmasq did not answer")

    def close(self) -> None:
        self._process.terminate()
        self._process.wait(10)


class ServfailServer:
    """A UDP DNS server on loopback that answers SERVFAIL to everything."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.settimeout(0.2)
        self.port = int(self._sock.getsockname()[1])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                data, peer = self._sock.recvfrom(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            response = self._answer(dns.message.from_wire(data))
            if response is not None:
                self._sock.sendto(response.to_wire(), peer)

    def _answer(self, query: dns.message.Message) -> dns.message.Message | None:
        """The response to a query (None: none at all)."""
        response = dns.message.make_response(query)
        response.set_rcode(dns.rcode.SERVFAIL)
        return response

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()


class PickyServer(ServfailServer):
    """A UDP DNS server on loopback answering from `records` ({(name, type): [rdata]},
    TTL 300; an unknown name is NXDOMAIN) except for the queries in `failing`
    ({(name, type): "REFUSED" | "SERVFAIL" | "silent"}, silent: no answer at all).
    With `validating`, it answers as a validating resolver does for a signed zone: the
    AD bit set when the query asks for it (RFC 6840 5.7)."""

    def __init__(
        self,
        records: dict[tuple[str, str], list[str]],
        failing: dict[tuple[str, str], str] | None = None,
        *,
        validating: bool = False,
    ) -> None:
        self.records = records
        self.failing = failing or {}
        self.validating = validating
        self.asked_ad: list[bool] = []  # per query: whether it set the AD bit
        super().__init__()

    def _answer(self, query: dns.message.Message) -> dns.message.Message | None:
        question = query.question[0]
        name = question.name.to_text().rstrip(".").lower()
        rdtype = dns.rdatatype.to_text(question.rdtype)
        response = dns.message.make_response(query)
        asked = bool(query.flags & dns.flags.AD)
        self.asked_ad.append(asked)
        if self.validating and asked:
            response.flags |= dns.flags.AD
        failure = self.failing.get((name, rdtype))
        if failure == "silent":
            return None
        if failure is not None:
            response.set_rcode(dns.rcode.from_text(failure))
        elif (name, rdtype) in self.records:
            response.answer.append(
                dns.rrset.from_text_list(question.name, 300, "IN", rdtype, self.records[(name, rdtype)])
            )
        elif not any(known == name for known, _ in self.records):
            response.set_rcode(dns.rcode.NXDOMAIN)
        return response
