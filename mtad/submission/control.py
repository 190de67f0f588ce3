"""The control socket between the daemon and a submission process: typed messages,
each pickled after its length (4 octets), and what a child is handed on its stdin.

  child -> daemon   Ready() once it serves the port
                    Accepted(deliveries) after each commit that leased deliveries
                    to the node (the fast path)
                    Counts(counts) in answer to AskCounts(), and once more as it
                    exits cleanly
                    Heeded(ok) in answer to Heed(), once its gate has read the
                    tenants' states again and what passed it before is
                    committed (ok False: it could not)
  daemon -> child   AskCounts() send your counts now
                    Room(room) whether to lease new deliveries to the node (sent
                    when that changes)
                    Reconfigure(settings) the port's settings after a reload
                    Heed() read the tenants' states now (an operator paused or
                    resumed one: the command waits for every process)

Both ends are this program: unpickling what the other end sent is no more trust
than running it.
"""

from __future__ import annotations

import asyncio
import pickle
from dataclasses import dataclass

from mtad.base import metrics
from mtad.spool import commit
from mtad.submission.port import PortSettings

_LENGTH = 4


@dataclass(frozen=True, slots=True)
class Start:
    """What a child is handed on its stdin."""

    settings: PortSettings
    index: int
    listening: tuple[int, ...]  # file descriptors of the listening sockets, open in the child
    control: int  # file descriptor of the child's end of the control socket
    fast_path: bool  # lease new deliveries to the node and hand them over


@dataclass(frozen=True, slots=True)
class Ready:
    pass


@dataclass(frozen=True, slots=True)
class Accepted:
    deliveries: list[commit.NewDelivery]


@dataclass(frozen=True, slots=True)
class Counts:
    counts: list[metrics.Counted]


@dataclass(frozen=True, slots=True)
class AskCounts:
    pass


@dataclass(frozen=True, slots=True)
class Room:
    room: bool


@dataclass(frozen=True, slots=True)
class Reconfigure:
    settings: PortSettings


@dataclass(frozen=True, slots=True)
class Heed:
    pass


@dataclass(frozen=True, slots=True)
class Heeded:
    ok: bool


Message = Ready | Accepted | Counts | AskCounts | Room | Reconfigure | Heed | Heeded


def say(writer: asyncio.StreamWriter, message: Message) -> None:
    if not writer.is_closing():
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        writer.write(len(data).to_bytes(_LENGTH, "big") + data)


async def heard(reader: asyncio.StreamReader) -> Message | None:
    """The next message, or None once the other end has closed."""
    try:
        length = int.from_bytes(await reader.readexactly(_LENGTH), "big")
        message: Message = pickle.loads(await reader.readexactly(length))
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    return message
