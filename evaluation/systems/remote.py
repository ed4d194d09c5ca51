"""`RemoteSpeechSystem`: another server behind the OpenAI speech API as a system (`openai:URL`).

    system = load_system("openai:http://10.0.0.5:8000/v1;model=rumik-oss-1;voice=Meera;key_env=OTHER_KEY")
    system = load_system("openai:https://api.example.com/v1;model=tts-1;voice=alloy;key_env=EXAMPLE_KEY;speed=1.1")
    audio = system.synthesize(SynthesisRequest("Hello there."))   # POST URL/audio/speech, response_format wav

The spec is the base URL (up to /v1), then `;`-separated options: `model` and `voice` (sent as
given), `timeout` (seconds for the whole answer, default ANSWER_DEADLINE_S), `key_env` (the name
of an environment variable holding the API key: a key is never written in a spec, where it would
land in shell histories, manifests and logs), `label`, and any other `name=value`, sent as an
extra field of the body (JSON numbers and booleans parsed). Kokoro-FastAPI, vLLM-Omni, hosted
APIs and a second rumik server all answer this route.

Bounded like everything a stranger's server sends: connect and read deadlines and a deadline on
the whole answer (a server that trickles a byte a second is cut off), at most MAX_RESPONSE_BYTES
read (a 2 GB answer stops there), and the body decoded by the project's bounded decoder
(evaluation.audio_io.load_native: a header declaring 1 Hz or hours is refused before decoding).
A failure is a SynthesisError naming the server and the reason; callers record it per clip.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import httpx

from evaluation.audio_io import AudioLoadError, load_native
from evaluation.systems.base import SynthesisError, Synthesizer
from rumik_app.audio import Audio
from rumik_app.request import SynthesisRequest

SCHEME = "openai:"
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 60.0  # between two reads
ANSWER_DEADLINE_S = 180.0  # the whole answer
MAX_RESPONSE_BYTES = 64 * 2**20  # 64 MB: 11 min of 24 kHz 16-bit mono WAV
MAX_SECONDS = 300.0
MAX_TIMEOUT_S = 600.0
ERROR_PREVIEW_CHARS = 200
RESERVED = ("input", "response_format", "stream_format")
SECRET_NAMES = ("key", "api_key", "token", "authorization", "password")


def parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    """(base URL, options) of `openai:URL;name=value;...`; SynthesisError naming the problem."""
    url, *parts = spec[len(SCHEME):].split(";")
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise SynthesisError(f"{spec!r}: an openai: system is openai:http(s)://HOST[:PORT]/v1;model=...;voice=...")
    options = {}
    for part in filter(None, (p.strip() for p in parts)):
        name, sep, value = part.partition("=")
        if not sep or not name.strip():
            raise SynthesisError(f"{spec!r}: option {part!r} is not name=value.")
        options[name.strip()] = value.strip()
    secret = [name for name in options if name.lower() in SECRET_NAMES]
    if secret:
        raise SynthesisError(f"{secret[0]}= in a system spec would write the API key where logs and manifests keep "
                             "it: put the key in an environment variable and name it with key_env=VARIABLE.")
    reserved = [name for name in options if name in RESERVED]
    if reserved:
        raise SynthesisError(f"{reserved[0]} is set by the system itself (the text, and WAV back); leave it out.")
    return url, options


def _timeout(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 1.0 <= seconds <= MAX_TIMEOUT_S:
        raise SynthesisError(f"timeout={value!r}: give the seconds a whole answer may take, 1 to {MAX_TIMEOUT_S:g}.")
    return seconds


def _field(value: str):
    """An extra field's JSON value: numbers, booleans and null parsed, anything else kept as text."""
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        return value
    return parsed if isinstance(parsed, (int, float, bool)) or parsed is None else value


class RemoteSpeechSystem(Synthesizer):
    """POST {url}/audio/speech per request (module docstring)."""

    def __init__(self, spec: str, transport: httpx.BaseTransport | None = None) -> None:
        self.url, options = parse_spec(spec)
        self.key_env = options.pop("key_env", None)
        self.model, self.voice = options.pop("model", None), options.pop("voice", None)
        self.deadline_s = _timeout(options.pop("timeout", str(ANSWER_DEADLINE_S)))
        host = httpx.URL(self.url).host
        self.name = ":".join(["openai", host, *(part for part in (self.model, self.voice) if part)])
        default_label = f"{self.model or 'speech'} ({self.voice or 'default voice'}) at {host}"
        self.label = options.pop("label", None) or default_label
        self.extra = {name: _field(value) for name, value in options.items()}
        self._transport = transport

    def _headers(self) -> dict[str, str]:
        if not self.key_env:
            return {}
        key = os.environ.get(self.key_env)
        if not key:
            raise SynthesisError(f"{self.name}: the environment variable {self.key_env} (key_env) is not set; export "
                                 "the server's API key in it.")
        return {"Authorization": f"Bearer {key}"}

    def body(self, request: SynthesisRequest) -> dict:
        """The JSON body for one request: the text, model, voice, WAV, and the spec's extra fields."""
        body = {"input": request.text, "response_format": "wav", **self.extra}
        body.update({name: value for name, value in (("model", self.model), ("voice", self.voice)) if value})
        return body

    def _synthesize(self, request: SynthesisRequest, *, clip_id: str | None, run: int | None) -> Audio:
        timeout = httpx.Timeout(min(READ_TIMEOUT_S, self.deadline_s), connect=CONNECT_TIMEOUT_S)
        with tempfile.TemporaryDirectory(prefix="rumik-remote-") as folder:
            path = Path(folder) / "answer.wav"
            try:
                with httpx.Client(timeout=timeout, transport=self._transport, follow_redirects=False) as client:
                    self._download(client, request, path)
                clip = load_native(path, max_seconds=MAX_SECONDS)
            except httpx.HTTPError as exc:
                raise SynthesisError(f"{self.name}: {type(exc).__name__} talking to {self.url} ({exc}).") from None
            except AudioLoadError as exc:
                raise SynthesisError(f"{self.name}: its answer is not usable audio: "
                                     f"{str(exc).replace(str(path), 'the answer')}") from None
        return Audio(samples=clip.samples, sample_rate=clip.sample_rate, seed=request.seed, info={"server": self.url})

    def _download(self, client: httpx.Client, request: SynthesisRequest, path: Path) -> None:
        """The answer's body into `path`, within the deadline and MAX_RESPONSE_BYTES; SynthesisError otherwise."""
        deadline = time.monotonic() + self.deadline_s
        with client.stream("POST", f"{self.url}/audio/speech", json=self.body(request),
                           headers=self._headers()) as response:
            if response.status_code != 200:
                preview = response.read()[:ERROR_PREVIEW_CHARS].decode("utf-8", "replace")
                raise SynthesisError(f"{self.name}: the server answered {response.status_code} ({preview!r}).")
            declared = int(response.headers.get("content-length") or 0)
            if declared > MAX_RESPONSE_BYTES:
                raise SynthesisError(f"{self.name}: the answer declares {declared:,} bytes; at most "
                                     f"{MAX_RESPONSE_BYTES // 2**20} MB are read.")
            size = 0
            with path.open("wb") as handle:
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > MAX_RESPONSE_BYTES:
                        raise SynthesisError(f"{self.name}: the answer passed {MAX_RESPONSE_BYTES // 2**20} MB; "
                                             "it was cut off there.")
                    if time.monotonic() > deadline:
                        raise SynthesisError(f"{self.name}: the answer took over {self.deadline_s:g} s; "
                                             "it was cut off.")
                    handle.write(chunk)
