"""What signing runs on a node: the signer delivery signs with, the active keys
loaded into it (on a node that delivers, before its first send) and read again,
and the rotation of the keys (on every node that can unseal them). The daemon runs
`loops` in its TaskGroup and closes the signer last."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from mtad import db
from mtad.base import vault
from mtad.base.tasks import Loop
from mtad.outbound import routing
from mtad.signing import active, dkim, rotation


@dataclass(slots=True)
class Signing:
    signer: dkim.Signer
    loops: list[Loop] = field(default_factory=list)


async def on_node(
    database: db.Database, resolver: routing.Resolver, sealer: vault.Vault | None, settings: rotation.Settings,
    *, processes: int, delivers: bool,
) -> Signing:  # fmt: skip
    """Signing on a node; `processes`: the RSA workers' ([delivery] dkim_processes)."""
    signing = Signing(dkim.Signer(processes=processes))
    if sealer is None:  # no key can be unsealed: nothing signs, nothing rotates
        return signing
    keys = None
    if delivers:
        keys = active.ActiveKeys(database, signing.signer, sealer)
        await keys.load()
        signing.loops.append(("dkim", keys.run))
    rotating = rotation.Rotation(database, resolver, sealer, settings, now=lambda: datetime.now(UTC))
    reload = keys.load if keys is not None else None  # pending keys become active as DNS publishes them
    signing.loops.append(("dkim-rotation", lambda: rotating.run(reload)))
    return signing
