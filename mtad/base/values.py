"""Typed values from configuration text: the one set of parsers that every
declaration of a setting (mtad.base.settings) and every table of named settings
([pools.NAME], [account_pools.NAME], [tenants."NAME"]) uses, so that a duration, a
size or an address is written the same way everywhere. Pure (layer 0). Each takes
the raw TOML (or environment) value, returns the typed value or raises ValueError
with a message for the operator; the caller names the key. And the "did you mean"
of a name the operator misspelt.
"""

from __future__ import annotations

import difflib
import ipaddress
import os
import re
import socket
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from mtad.base.endpoints import HostPort

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_SIZE = re.compile(r"^(\d+)\s*(B|KB|KiB|MB|MiB|GB|GiB)?$")
_SIZE_UNITS = {None: 1, "B": 1, "KB": 10**3, "KiB": 2**10, "MB": 10**6, "MiB": 2**20, "GB": 10**9, "GiB": 2**30}
HOSTNAME = re.compile(
    r"(?=.{1,253}\Z)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def string(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


def optional_string(value: Any) -> str | None:
    return string(value) or None


def boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def integer(low: int, high: int) -> Callable[[Any], int]:
    """A parser of whole numbers from low to high."""

    def parse(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected a whole number, got {value!r}")
        if not low <= value <= high:
            raise ValueError(f"must be between {low} and {high}, got {value}")
        return value

    return parse


def count_or_auto(high: int, auto: Callable[[int], int]) -> Callable[[Any], int]:
    """A parser of 0 to `high`, or "auto": auto(the CPU cores), read when parsed."""
    exact = integer(0, high)

    def parse(value: Any) -> int:
        if value == "auto":
            return auto(os.cpu_count() or 1)
        if isinstance(value, str):
            raise ValueError(f'expected a whole number or "auto", got {value!r}')
        return exact(value)

    return parse


def number(low: float, high: float, *, what: str) -> Callable[[Any], float]:
    """A parser of numbers in (low, high]."""

    def parse(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"expected {what}, got {value!r}")
        if not low < value <= high:
            raise ValueError(f"must be more than {low} and at most {high}, got {value}")
        return float(value)

    return parse


def fraction(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise ValueError(f"expected a fraction above 0 and at most 1, got {value!r}")
    return float(value)


def duration(value: Any) -> float:
    """Seconds from a number of seconds or a string such as "250ms", "5m", "1h30m"."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and value.strip():
        text = value.strip().replace(" ", "")
        parts = _DURATION_PART.findall(text)
        if "".join(n + u for n, u in parts) != text:
            raise ValueError(f'expected a duration such as "250ms", "30s", "5m", "2h" or "7d", got {value!r}')
        seconds = sum(float(n) * _DURATION_UNITS[u] for n, u in parts)
    else:
        raise ValueError(f'expected a duration such as "30s", got {value!r}')
    if seconds < 0:
        raise ValueError("a duration must not be negative")
    return seconds


def positive_duration(value: Any) -> float:
    seconds = duration(value)
    if seconds <= 0:
        raise ValueError("must be longer than zero")
    return seconds


def optional_duration(value: Any) -> float | None:
    """A positive duration, or "" for none."""
    return None if value == "" else positive_duration(value)


def schedule(value: Any) -> tuple[float, ...]:
    """ "5m, 10m, 30m, 1h, 2h, 4h"; "2h*3" is 2h three times."""
    delays: list[float] = []
    for part in (p.strip() for p in string(value).split(",")):
        item, star, times = part.partition("*")
        if star and not (times.strip().isdigit() and int(times) >= 1):
            raise ValueError(f"expected a repeat count after '*' in {part!r}")
        seconds = positive_duration(item.strip())
        delays.extend([seconds] * (int(times) if star else 1))
    if not delays:
        raise ValueError("expected at least one delay")
    return tuple(delays)


def size(value: Any) -> int:
    """Octets from a number or a string such as "25MiB", "10MB", "512KiB"."""
    if isinstance(value, int) and not isinstance(value, bool):
        octets = value
    elif isinstance(value, str) and (match := _SIZE.match(value.strip())):
        octets = int(match.group(1)) * _SIZE_UNITS[match.group(2)]
    else:
        raise ValueError(f'expected a size such as 26214400, "25MiB" or "10MB", got {value!r}')
    if octets <= 0:
        raise ValueError("a size must be larger than zero")
    return octets


def choice(*options: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        text = string(value).lower()
        if text not in options:
            raise ValueError(f"expected one of {', '.join(options)}, got {value!r}")
        return text

    return parse


def list_of(item: Callable[[Any], Any], *, allow_empty: bool = False) -> Callable[[Any], tuple[Any, ...]]:
    """A list of `item`s; from the environment, "a, b" too."""

    def parse(value: Any) -> tuple[Any, ...]:
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list):
            raise ValueError(f"expected a list, got {value!r}")
        if not value and not allow_empty:
            raise ValueError("must not be empty")
        return tuple(item(v) for v in value)

    return parse


def hostname(value: Any) -> str:
    if not isinstance(value, str) or not HOSTNAME.fullmatch(value):
        raise ValueError(f"{value!r} is not a valid host name")
    return value


def hostname_or_fqdn(value: Any) -> str:
    """A host name; "": this machine's fully qualified domain name."""
    return hostname(string(value) or socket.getfqdn())


def optional_hostname(value: Any) -> str | None:
    return None if value == "" else hostname(value)


def optional_domain(value: Any) -> str | None:
    text = string(value).strip().lower().rstrip(".")
    if text and (not HOSTNAME.fullmatch(text) or "." not in text):
        raise ValueError(f"{value!r} is not a domain name")
    return text or None


def optional_address(value: Any) -> str | None:
    """An email address such as fbl@bounces.example.org, lower-cased; "": none."""
    text = string(value).strip().lower()
    if not text:
        return None
    local, at, domain = text.rpartition("@")
    if not local or not at or not HOSTNAME.fullmatch(domain) or any(c.isspace() or c in "<>" for c in text):
        raise ValueError(f"expected an email address such as fbl@bounces.example.org, got {value!r}")
    return text


def https_url(value: Any) -> str | None:
    """A public base URL, https://host[/path], without its last "/"; "": none."""
    text = string(value).strip().rstrip("/")
    if not text:
        return None
    if not re.fullmatch(r"https://[A-Za-z0-9.-]+(:\d+)?(/[A-Za-z0-9._~%!$&'()*+,;=:@/-]*)?", text):
        raise ValueError(f"expected the endpoint's public base URL, https://host[/path], got {value!r}")
    return text


def ip_address(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected an IP address as a string, got {value!r}")
    try:
        return str(ipaddress.ip_address(value.strip()))
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address") from None


def optional_ip(value: Any) -> str | None:
    return ip_address(value) if string(value) else None


def ip_addresses(*, allow_empty: bool) -> Callable[[Any], tuple[str, ...]]:
    """A list of IP addresses, none twice."""

    def parse(value: Any) -> tuple[str, ...]:
        if not isinstance(value, list):
            raise ValueError(f'expected a list of IP addresses such as ["192.0.2.10"], got {value!r}')
        if not value and not allow_empty:
            raise ValueError("must list at least one address (the first is the pool's primary)")
        addresses = tuple(ip_address(v) for v in value)
        for i, address in enumerate(addresses):
            if address in addresses[:i]:
                raise ValueError(f"{address} is listed twice")
        return addresses

    return parse


def network(value: Any) -> Network:
    try:
        return ipaddress.ip_network(string(value), strict=True)
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a network: {exc}") from None


def host_port(value: Any) -> HostPort:
    """ "127.0.0.1:2525", "[::1]:2525" or "localhost:2525"; port 0 picks a free port."""
    text = string(value).strip()
    match = re.match(r"^\[([0-9A-Fa-f:.]+)\]:(\d+)$", text) or re.match(r"^([^:\[\]]+):(\d+)$", text)
    if not match:
        raise ValueError(f'expected "host:port" or "[ipv6]:port", got {text!r}')
    host, port = match.group(1), int(match.group(2))
    if port > 65535:
        raise ValueError(f"port {port} is out of range")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if not HOSTNAME.fullmatch(host):
            raise ValueError(f"{host!r} is neither an IP address nor a host name") from None
    return HostPort(host, port)


def optional_host_port(value: Any) -> HostPort | None:
    return host_port(value) if string(value) else None


def range_pair(value: Any) -> tuple[int, int]:
    """[low, high]: two whole numbers, 1 <= low <= high."""
    if (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        and 1 <= value[0] <= value[1]
    ):
        return (value[0], value[1])
    raise ValueError(f"expected two integers [low, high] with 1 <= low <= high, got {value!r}")


def duration_pair(value: Any) -> tuple[float, float]:
    """[low, high]: two durations, 0 <= low <= high."""
    low, high = (duration(v) for v in value) if isinstance(value, list) and len(value) == 2 else (-1, -1)
    if not 0 <= low <= high:
        raise ValueError(f'expected [low, high] such as ["25s", "45s"], got {value!r}')
    return (low, high)


def path(value: Any) -> Path:
    text = string(value)
    if not text:
        raise ValueError("must not be empty")
    return Path(text).expanduser()


def optional_path(value: Any) -> Path | None:
    return path(value) if string(value) else None


def ca_file(value: Any) -> Path | None:
    """A PEM file of CA certificates ("": none), loaded now so that a bad one stops the load."""
    found = optional_path(value)
    if found is not None:
        import ssl  # only then: parsing a configuration without a CA file needs none of it

        try:
            ssl.create_default_context(cafile=found)
        except OSError as exc:  # ssl.SSLError included: no PEM certificate in it
            raise ValueError(f"cannot load {found}: {exc.strerror or exc}") from None
    return found


# The parsers whose values are paths: a relative one in the file is relative to the file.
PATHS: frozenset[Callable[[Any], Any]] = frozenset({path, optional_path, ca_file})


def table_of(key: Callable[[Any], str], item: Callable[[Any], Any], example: str) -> Callable[[Any], dict[str, Any]]:
    """An inline table such as `example`, its keys and values parsed."""

    def parse(value: Any) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise ValueError(f"expected a table such as {example}, got {value!r}")
        return {key(k): item(v) for k, v in value.items()}

    return parse


def closest(word: str, options: Iterable[str]) -> str | None:
    """The option most like `word` (difflib's ratio of at least 0.6), if one is."""
    found = difflib.get_close_matches(word, list(options), n=1)
    return found[0] if found else None


def did_you_mean(word: str, options: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the option most like `word`, else ''."""
    close = closest(word, options)
    return f" (did you mean {close!r}?)" if close is not None else ""
