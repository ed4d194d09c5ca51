"""Deadlines and fair shares for the speech server's HTTP connections, below the app.

    policy = ConnectionPolicy(header_timeout_s=10, max_per_client=64, max_connections=304)
    uvicorn.Config(app, http=guarded_protocol(policy), timeout_keep_alive=5, ...)   # what build_server does

uvicorn counts every open connection against `limit_concurrency` (beyond it, every request
gets 503, /health too) and never closes a connection that has not finished its headers, so a
few hundred sockets that send nothing, or trickle a request line a byte at a time, take a
server offline without a key. `guarded_protocol` is uvicorn's own h11 protocol with three rules:

- **A header deadline.** From a connection's start, and from the end of each response on a
  kept-alive one, the next request's headers must be complete within `header_timeout_s`, or
  the connection is closed (trickling does not reset it; uvicorn's keep-alive timer does not
  survive the first byte). Bodies have their own deadline in `RequestGate`.
- **A share per client address.** One address holds at most `max_per_client` connections, and
  never more than half of `max_connections`; a new one past that closes the address's oldest
  waiting connection, or is itself closed when all of them are busy. Peers in `trusted` (the
  operator's proxies, whose connections carry many clients) are exempt.
- **Waiting connections make room.** A connection is *waiting* when the server waits on its
  client: no request in flight, or a request whose body has not all arrived (a stalled body is
  its client's cost, not everyone's). A new connection that would bring the server to
  `max_connections` closes the oldest waiting one anywhere, so the table stays *below* uvicorn's
  limit and waiting sockets never push a real request into 503.

The server always runs h11 (`build_server` names this class), also where httptools is
installed (vLLM's environment): a speech server's request rate is low, and one protocol keeps
one set of deadlines. WebSocket upgrades leave this table; `SessionRegistry` bounds sessions
(per address too), and uvicorn's pings close dead ones.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
from dataclasses import dataclass, field

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from rumik_app.serve.protocol import DEFAULT_HEADER_TIMEOUT_S, DEFAULT_MAX_CONNECTIONS_PER_CLIENT

log = logging.getLogger(__name__)

MAX_CLIENT_FRACTION = 0.5  # of the server's connections, the most one client address may hold


@dataclass(frozen=True)
class ConnectionPolicy:
    """The rules of the module docstring. max_per_client 0: no share per address;
    trusted: peer addresses or networks ("10.0.0.0/8") exempt from the share."""

    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    max_per_client: int = DEFAULT_MAX_CONNECTIONS_PER_CLIENT
    max_connections: int | None = None
    trusted: tuple[str, ...] = field(default=())

    @property
    def share(self) -> int:
        """Connections one (untrusted) address may hold: `max_per_client`, at most a fraction of
        the whole table (0: no share)."""
        if not self.max_per_client or self.max_connections is None:
            return self.max_per_client
        return min(self.max_per_client, max(1, int(self.max_connections * MAX_CLIENT_FRACTION)))

    @functools.cached_property
    def _networks(self) -> tuple:
        return tuple(network for entry in self.trusted if (network := _network(entry)) is not None)

    def is_trusted(self, address: str | None) -> bool:
        if address is None or "*" in self.trusted:
            return True  # None: a Unix socket, one local peer (the operator's)
        try:
            peer = ipaddress.ip_address(address)
        except ValueError:
            return address in self.trusted
        return any(peer in network for network in self._networks)


def _network(entry: str):
    try:
        return ipaddress.ip_network(entry.strip(), strict=False)
    except ValueError:
        return None


class ConnectionTable:
    """Open HTTP connections, oldest first, overall and per client address."""

    def __init__(self, policy: ConnectionPolicy):
        self.policy = policy
        self.everyone: dict[GuardedH11Protocol, None] = {}
        self.by_address: dict[str, dict[GuardedH11Protocol, None]] = {}
        self.closed_slow = 0  # connections closed at their header deadline
        self.closed_for_room = 0  # idle connections closed to make room, and newcomers refused

    def admit(self, conn: GuardedH11Protocol) -> bool:
        """Add `conn`, closing idle ones to make room; False: it was refused (and closed)."""
        address = conn.client[0] if conn.client else None
        share = self.policy.share
        if share and not self.policy.is_trusted(address):
            mine = self.by_address.get(address, {})
            if len(mine) >= share and not self._close_oldest_waiting(mine):
                self.closed_for_room += 1
                conn.drop()
                return False
        limit = self.policy.max_connections
        # uvicorn answers 503 once a request finds `limit` connections open, its own included:
        # with this one added the table must stay below that.
        while limit is not None and len(self.everyone) + 1 >= limit and self._close_oldest_waiting(self.everyone):
            pass  # none waiting: every connection is being served, and uvicorn's limit answers 503
        self.everyone[conn] = None
        self.by_address.setdefault(address, {})[conn] = None
        return True

    def remove(self, conn: GuardedH11Protocol) -> None:
        self.everyone.pop(conn, None)
        address = conn.client[0] if conn.client else None
        mine = self.by_address.get(address)
        if mine is not None:
            mine.pop(conn, None)
            if not mine:
                del self.by_address[address]

    def _close_oldest_waiting(self, conns: dict[GuardedH11Protocol, None]) -> bool:
        """Close the oldest idle connection in `conns`, else the oldest whose body is stalled."""
        victim = next((conn for conn in conns if conn.idle), None) or next(
            (conn for conn in conns if conn.receiving_body), None)
        if victim is None:
            return False
        self.closed_for_room += 1
        victim.drop()
        return True


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol under a `ConnectionTable` (see the module docstring)."""

    table: ConnectionTable  # set by guarded_protocol

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.header_timer = None
        if self.table.admit(self):
            self._arm_header_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_deadline()
        self.table.remove(self)
        super().connection_lost(exc)

    @property
    def idle(self) -> bool:
        """No request in flight: waiting for (the rest of) a request's headers."""
        return self.cycle is None or self.cycle.response_complete

    @property
    def receiving_body(self) -> bool:
        """A request is in flight and its client still owes part of its body."""
        return self.cycle is not None and self.conn.their_state is h11.SEND_BODY

    def handle_events(self) -> None:
        before = self.cycle
        super().handle_events()
        if self.cycle is not before:  # a request's headers are in
            self._disarm_header_deadline()

    def handle_websocket_upgrade(self, event) -> None:
        self._disarm_header_deadline()
        self.table.remove(self)
        super().handle_websocket_upgrade(event)

    def on_response_complete(self) -> None:
        if not self.transport.is_closing():
            self._arm_header_deadline()  # before super(): a pipelined request disarms it again
        super().on_response_complete()

    def drop(self) -> None:
        """Close now, and stop counting this connection here and against uvicorn's limit (under
        uvloop a closed transport reports its loss a loop turn or more later, and until then a
        new request would find the server full)."""
        self._disarm_header_deadline()
        self.table.remove(self)
        self.connections.discard(self)
        if not self.transport.is_closing():
            self.transport.close()

    def _arm_header_deadline(self) -> None:
        self._disarm_header_deadline()
        self.header_timer = self.loop.call_later(self.table.policy.header_timeout_s, self._header_deadline)

    def _disarm_header_deadline(self) -> None:
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None

    def _header_deadline(self) -> None:
        self.header_timer = None
        if self.idle and not self.transport.is_closing():
            self.table.closed_slow += 1
            self.drop()


def guarded_protocol(policy: ConnectionPolicy) -> type[GuardedH11Protocol]:
    """A protocol class for `uvicorn.Config(http=...)`, with its own table (one per server)."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"table": ConnectionTable(policy)})
