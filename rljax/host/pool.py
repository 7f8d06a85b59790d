"""A pool of env servers that may change while a run trains: ``server:HOST:PORT,HOST:PORT,...`` or
``server:@FILE``.

Each server in the pool gets an actor of its own (its batch is that actor's envs). With ``@FILE``, the
file lists one ``HOST:PORT`` a line (blank lines and ``#`` comments skipped) and is read again whenever
it changes while the run trains (:meth:`ServerPool.addresses`): a server added to it gets an actor, a
server taken out of it has its actor retired after the rollout it is collecting. A server that dies is
left by its actor once its restarts are spent (the rollout it was collecting goes to another actor,
the episodes in flight are counted lost), and is tried again only after ``retry_s`` if the file still
lists it. The run goes on while one actor is left.
"""

from __future__ import annotations

import os
import pathlib
import time
from typing import Any

from rljax.host.base import parse_server

__all__ = ["ServerPool", "is_server_pool"]


def is_server_pool(name: str) -> bool:
    """Whether ``name`` names a pool of env servers (several addresses, or ``server:@FILE``)."""
    return isinstance(name, str) and name.startswith("server:") and ("," in name or name.startswith("server:@"))


class ServerPool:
    """The env servers ``name`` lists (module docstring).

    Args:
        name: ``server:HOST:PORT,HOST:PORT,...`` or ``server:@FILE``.
        retry_s: how long an address whose actor left (its server died) waits before it may get a
            new actor.

    Raises:
        ValueError: an address that is not ``HOST:PORT`` (naming it and the line of the file), an
            address listed twice, or a pool with no server.
    """

    def __init__(self, name: str, retry_s: float = 30.0):
        self.name, self.retry_s = name, float(retry_s)
        rest = name[len("server:"):]
        self.path = pathlib.Path(rest[1:]) if rest.startswith("@") else None
        self._static = None if self.path is not None else self._parse(rest.split(","), "--env")
        self._mtime: float | None = None
        self._cached: list[str] = []
        self._failed_at: dict[str, float] = {}
        self.bound: dict[int, str] = {}  # actor -> the server address its envs are on
        if not self.addresses():
            raise ValueError(f"env server pool {name!r} lists no server: give HOST:PORT lines"
                             + (f" in {self.path}" if self.path is not None else ""))

    @staticmethod
    def _parse(items: list[str], where: str) -> list[str]:
        out: list[str] = []
        for n, raw in enumerate(items, 1):
            item = raw.split("#", 1)[0].strip()
            if not item:
                continue
            try:
                parse_server(f"server:{item}")
            except ValueError:
                raise ValueError(f"{where}, item {n}: {raw.strip()!r} is not HOST:PORT (e.g. 127.0.0.1:5555)") from None
            if item in out:
                raise ValueError(f"{where}: the env server {item} is listed twice")
            out.append(item)
        return out

    def addresses(self) -> list[str]:
        """The servers the pool lists now (a file is read again when its modification time changes;
        a file that cannot be read or parsed keeps the last good list)."""
        if self._static is not None:
            return list(self._static)
        try:
            mtime = os.stat(self.path).st_mtime_ns
            if mtime != self._mtime:
                self._cached = self._parse(self.path.read_text().splitlines(), str(self.path))
                self._mtime = mtime
        except (OSError, ValueError) as err:
            if self._mtime is None:  # the first read: the user's error, said now
                raise ValueError(f"env server pool {self.name!r}: {err}") from None
        return list(self._cached)

    def bind(self, actor: int, address: str) -> None:
        """Actor ``actor``'s envs are the batch of the server at ``address``."""
        self.bound[actor] = address

    def env_name(self, actor: int) -> str:
        """``server:HOST:PORT`` of actor ``actor``'s server."""
        return f"server:{self.bound[actor]}"

    def failed(self, address: str) -> None:
        """The actor on ``address`` left (its server died): no new actor there for ``retry_s``."""
        self._failed_at[address] = time.monotonic()

    def joinable(self, address: str) -> bool:
        """Whether ``address`` may get a new actor (not within ``retry_s`` of its last failure)."""
        at = self._failed_at.get(address)
        return at is None or time.monotonic() - at >= self.retry_s

    def describe(self) -> dict[str, Any]:
        """The pool for a run's manifest: its name and the servers it lists now."""
        return {"pool": self.name, "servers": self.addresses()}
