"""Every connection to the speech server has a deadline, and one address a share.

Against the real server process (`python -m rumik_app.serve`, uvicorn and its h11 protocol as
deployed): idle sockets, unfinished and trickled headers and slow bodies are closed at their
deadlines while keyed requests are served; one address's idle connections make room for its
next request; X-Forwarded-For from 127.0.0.1 is not believed unless the operator names it.

Run: .venv/bin/python -m pytest tests/rumik_app/test_serve_deadlines.py -q
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import select
import socket
import time

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.servers import start_server_process

KEY = "deadline-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
HEADER_TIMEOUT_S = 5.0
CLOSE_WAIT_S = 30.0  # generous: how long a test waits for the server to close what it should
PER_CLIENT = 24
SESSIONS_PER_CLIENT = 2
SPEECH = {"input": "Hello there.", "voice": "Ira", "response_format": "pcm", "seed": 1,
          "max_seconds": 0.3}
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tiny_checkpoint):
    # max_batch 2 + max_queue 4 + 32: uvicorn answers 503 to every request past 38 open connections
    proc, url = start_server_process(
        tiny_checkpoint, "--api-key", KEY, "--max-batch", "2", "--max-queue", "4",
        "--header-timeout", str(HEADER_TIMEOUT_S), "--body-timeout", str(HEADER_TIMEOUT_S),
        "--keep-alive-timeout", "1", "--max-connections-per-client", str(PER_CLIENT),
        "--max-sessions-per-client", str(SESSIONS_PER_CLIENT))
    yield url
    proc.terminate()
    proc.wait(timeout=60)


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def open_sockets(url: str, count: int, first_bytes: bytes = b"", source: str | None = None) -> list[socket.socket]:
    """`count` connections (from the loopback address `source`, e.g. 127.0.0.2, another client)."""
    sockets = []
    for _ in range(count):
        sock = socket.create_connection(_address(url), timeout=10, source_address=(source, 0) if source else None)
        if first_bytes:
            sock.sendall(first_bytes)
        sockets.append(sock)
    return sockets


def closed_by_server(sock: socket.socket) -> bool:
    """True once the server has closed the socket (EOF or reset), without waiting."""
    poller = select.poll()  # not select(): a busy test process has descriptors past 1024
    poller.register(sock, select.POLLIN)
    if not poller.poll(0):
        return False
    try:
        return sock.recv(4096) == b""
    except OSError:
        return True


def wait_all_closed(sockets: list[socket.socket], within: float = CLOSE_WAIT_S) -> int:
    """How many of `sockets` the server closed within `within` seconds (polling)."""
    deadline, closed = time.monotonic() + within, set()
    while time.monotonic() < deadline and len(closed) < len(sockets):
        closed |= {i for i, sock in enumerate(sockets) if i not in closed and closed_by_server(sock)}
        time.sleep(0.1)
    return len(closed)


def speak(url: str) -> httpx.Response:
    model = httpx.get(url + "/v1/models", headers=AUTH, timeout=30).json()["data"][0]["id"]
    return httpx.post(url + "/v1/audio/speech", json={**SPEECH, "model": model}, headers=AUTH, timeout=60)


@pytest.mark.parametrize("first_bytes", [b"", b"GET /health HTTP/1.1\r\nHost: x"], ids=["silent", "unfinished"])
def test_a_thousand_idle_sockets_do_not_take_the_server_offline(server, first_bytes):
    sockets = open_sockets(server, 1_000, first_bytes)
    try:
        assert speak(server).status_code == 200  # a keyed request, with 1,000 sockets open
        assert httpx.get(server + "/health", timeout=10).status_code == 200
        assert wait_all_closed(sockets) == len(sockets)  # every idle one closed: by its share, room or deadline
    finally:
        for sock in sockets:
            sock.close()


def test_a_header_trickled_one_byte_at_a_time_is_closed_at_the_deadline(server):
    request = f"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n".encode()
    sock = socket.create_connection(_address(server), timeout=10)
    sent, started = 0, time.monotonic()
    try:
        while sent < len(request) and not closed_by_server(sock):
            try:
                sock.sendall(request[sent : sent + 1])
            except OSError:
                break
            sent += 1
            time.sleep(0.1)  # the whole line would take ~7 s: longer than the 5 s deadline
            if time.monotonic() - started > CLOSE_WAIT_S:
                break
        assert sent < len(request), "the server waited for the whole trickled header"
        assert speak(server).status_code == 200
    finally:
        sock.close()


def test_a_body_slower_than_its_deadline_gets_408_and_the_connection_closes(server):
    with socket.create_connection(_address(server), timeout=CLOSE_WAIT_S) as sock:
        sock.sendall(f"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
                     "Content-Type: application/json\r\nContent-Length: 200\r\n\r\n{\"model\":".encode())
        answer = b""
        while chunk := sock.recv(4096):  # ends when the server closes
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408") and json.loads(body)["error"]["code"] == "request_timeout"


def test_one_address_idle_connections_make_room_for_its_next_request(server):
    sockets = open_sockets(server, PER_CLIENT)
    try:
        assert speak(server).status_code == 200  # the address's oldest idle connection made room
        assert closed_by_server_soon(sockets[0])
    finally:
        for sock in sockets:
            sock.close()


OTHER_CLIENTS = ("127.0.0.2", "127.0.0.3")
STALLED_BODY = (f"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
                "Content-Type: application/json\r\nContent-Length: 200\r\n\r\n{\"model\":").encode()
READ_S = 1.0  # for the server to read what the sockets sent (well inside the 5 s deadlines)


@pytest.mark.parametrize("first_bytes", [b"", STALLED_BODY], ids=["idle", "stalled body"])
def test_other_addresses_waiting_sockets_do_not_push_a_request_into_503(server, first_bytes):
    """Two other addresses each open a full per-address share (together more than the server
    holds): the room made for a request from 127.0.0.1 stays below uvicorn's limit."""
    sockets = [sock for source in OTHER_CLIENTS for sock in open_sockets(server, PER_CLIENT, first_bytes, source)]
    try:
        time.sleep(READ_S)
        assert speak(server).status_code == 200
        assert httpx.get(server + "/health", timeout=10).status_code == 200
    finally:
        for sock in sockets:
            sock.close()


def test_a_share_is_at_most_half_the_table():
    from rumik_app.serve.connections import ConnectionPolicy

    assert ConnectionPolicy(max_per_client=64, max_connections=44).share == 22
    assert ConnectionPolicy(max_per_client=8, max_connections=44).share == 8
    assert ConnectionPolicy(max_per_client=64).share == 64 and ConnectionPolicy(max_per_client=0).share == 0


@pytest.mark.parametrize("head, status", [
    ("Authorization: Bearer wrong\r\nContent-Length: 200", 401),
    (f"Authorization: Bearer {KEY}\r\nContent-Length: 10000000", 413),
], ids=["no key", "too large"])
def test_an_answer_before_the_body_closes_the_connection(server, head, status):
    with socket.create_connection(_address(server), timeout=CLOSE_WAIT_S) as sock:
        sock.sendall(f"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\n{head}\r\n\r\n".encode())
        answer = b""
        while chunk := sock.recv(4096):  # ends when the server closes, without waiting for the body
            answer += chunk
    assert answer.startswith(f"HTTP/1.1 {status}".encode()) and b"connection: close" in answer.lower()


def closed_by_server_soon(sock: socket.socket) -> bool:
    return wait_all_closed([sock], within=1.0) == 1  # well before the 5 s header deadline


def test_forwarded_for_from_localhost_is_not_believed_by_default(server):
    """Sessions that each claim another client address still count as 127.0.0.1's."""
    async def go():
        ws_url = server.replace("http", "ws") + "/v1/audio/speech/stream"
        async with contextlib.AsyncExitStack() as stack:
            for i in range(SESSIONS_PER_CLIENT):
                await stack.enter_async_context(connect(ws_url, additional_headers={
                    **AUTH, "X-Forwarded-For": f"203.0.113.{i + 1}"}))
            with pytest.raises(InvalidStatus) as info:
                async with connect(ws_url, additional_headers={**AUTH, "X-Forwarded-For": "198.51.100.9"}):
                    pass
            return info.value.response
    response = asyncio.run(go())
    assert response.status_code == 429 and b"too_many_sessions" in response.body
