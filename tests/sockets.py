"""WebSocket helpers for the server's socket tests (Rumik's /v1/tts/ws and text-in).

    ws_url, token = mint(server.url, KEY, model="mulberry")
    async with silk_socket(server.url, KEY) as ws:
        audio, frames = await utterance(ws, {"text": "Namaste!", "speaker": "ira", "seed": 3})
        frames[-1]["type"]   # "done" (or "cancelled" / "error")
    active(server.url)     # rumik_active_requests from /metrics (batch rows in use)
"""

from __future__ import annotations

import json
import re

import httpx
from websockets.asyncio.client import connect

TERMINAL = ("done", "cancelled", "error", "timeout")
RECV_TIMEOUT_S = 60.0


def mint(url: str, key: str | None, model: str = "mulberry", **headers) -> tuple[str, str]:
    """POST /v1/tts/ws-connect: (ws_url, token)."""
    auth = {"Authorization": f"Bearer {key}"} if key else {}
    resp = httpx.post(url + "/v1/tts/ws-connect", json={"text": "init", "model": model},
                      headers={**auth, **headers}, timeout=10)
    resp.raise_for_status()
    data = resp.json()
    return data["ws_url"], data["token"]


def silk_socket(url: str, key: str | None, model: str = "mulberry"):
    """A connected socket to a fresh Silk session (use with `async with`)."""
    ws_url, token = mint(url, key, model)
    return connect(f"{ws_url}?token={token}", max_size=2**20)


async def recv(ws, timeout: float = RECV_TIMEOUT_S):
    """The next message: bytes, or a decoded JSON dict."""
    import asyncio

    message = await asyncio.wait_for(ws.recv(), timeout)
    return message if isinstance(message, bytes) else json.loads(message)


async def until_terminal(ws, audio: bytearray | None = None, width: int = 2) -> tuple[bytes, list[dict]]:
    """Read audio and control frames up to the utterance's terminal frame (`width`: bytes a sample)."""
    audio = audio if audio is not None else bytearray()
    frames: list[dict] = []
    while True:
        message = await recv(ws)
        if isinstance(message, bytes):
            assert len(message) % width == 0  # whole samples (16-bit; G.711: 8-bit) in every frame
            audio += message
            continue
        frames.append(message)
        if message["type"] in TERMINAL:
            return bytes(audio), frames


async def utterance(ws, frame: dict, width: int = 2) -> tuple[bytes, list[dict]]:
    """Send one synthesis frame; the audio and the control frames up to its terminal frame."""
    await ws.send(json.dumps(frame))
    return await until_terminal(ws, width=width)


async def first_audio(ws) -> tuple[bytes, list[dict]]:
    """Read up to the first binary frame: (it, the control frames before it)."""
    frames = []
    while True:
        message = await recv(ws)
        if isinstance(message, bytes):
            return message, frames
        frames.append(message)


def active(url: str) -> int:
    """Batch rows in use now, from /metrics (rumik_active_requests)."""
    text = httpx.get(url + "/metrics", timeout=5).text
    return int(float(re.search(r"^rumik_active_requests (\S+)$", text, re.M).group(1)))


def gauge(url: str, name: str) -> float:
    text = httpx.get(url + "/metrics", timeout=5).text
    return float(re.search(rf"^{name} (\S+)$", text, re.M).group(1))
