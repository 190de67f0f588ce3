"""A second, independent DKIM verifier: Debian's `opendkim-testmsg`.

It looks keys up in DNS on port 53 through /etc/resolv.conf, so it runs in a
private network and mount namespace (`unshare`, as root): loopback brought up,
a resolv.conf naming 127.0.0.1 bound over /etc/resolv.conf, and dnsmasq on
127.0.0.1:53 publishing the test's TXT records. Nothing leaves the namespace.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from mtad.signing import dkim
from tests.dnsserver import txt_record

SCRIPT = """set -u
ip link set lo up
mount --bind "$DIR/resolv.conf" /etc/resolv.conf
dnsmasq --conf-file="$DIR/dnsmasq.conf" --no-resolv --no-hosts --port=53 --listen-address=127.0.0.1 \\
  --bind-interfaces --user=root --pid-file="$DIR/dnsmasq.pid"
for message in "$DIR"/*.eml; do
  opendkim-testmsg -C < "$message" 2> "$message.err"
  echo "$(basename "$message" .eml) $?"
done
kill "$(cat "$DIR/dnsmasq.pid")"
"""


def missing() -> str | None:
    """Why opendkim-testmsg cannot run here (None: it can)."""
    if os.geteuid() != 0:
        return "opendkim-testmsg runs in a network namespace: root only"
    for tool in ("opendkim-testmsg", "dnsmasq", "unshare", "ip"):
        if shutil.which(tool) is None and shutil.which(tool, path="/usr/sbin:/sbin") is None:
            return f"{tool} is not installed (make test installs opendkim-tools and dnsmasq as root)"
    return None


def verify(directory: Path, messages: Mapping[str, bytes], keys: Sequence[dkim.Key]) -> dict[str, str]:
    """opendkim-testmsg's verdict on each message: "ok", or its error line."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "resolv.conf").write_text("nameserver 127.0.0.1\n")
    records = []
    for key in keys:
        records.append(txt_record(key.name, key.record()) + "\n")
    (directory / "dnsmasq.conf").write_text("".join(records))
    for name, message in messages.items():
        (directory / f"{name}.eml").write_bytes(message)
    done = subprocess.run(
        ["unshare", "--net", "--mount", "sh", "-c", SCRIPT],
        env={**os.environ, "DIR": str(directory), "PATH": os.environ.get("PATH", "") + ":/usr/sbin:/sbin"},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    verdicts = {}
    for line in done.stdout.splitlines():
        name, _, code = line.rpartition(" ")
        error = (directory / f"{name}.eml.err").read_text().strip()
        verdicts[name] = "ok" if code == "0" else error or f"exit {code}"
    if set(verdicts) != set(messages):
        raise AssertionError(f"opendkim-testmsg did not run: {done.stderr.strip()}")
    return verdicts
