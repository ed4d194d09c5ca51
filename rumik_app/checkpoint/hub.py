"""Is the Hugging Face Hub reachable? One short probe, shared by every hub download.

    from rumik_app.checkpoint.hub import HubUnavailable, hub_snapshot
    try:
        folder = hub_snapshot("rumik-ai/rumik-oss-1", allow_patterns=["config.json", "*.safetensors"])
    except HubUnavailable as exc:      # exc.repo_id, exc.reason: the caller words the fix
        ...

Without a network, `huggingface_hub` and transformers retry every file with back-off, so a
missing model used to fail only after a minute of retry warnings. Here one HEAD request to
the hub endpoint (`HF_ENDPOINT`, default https://huggingface.co) decides, within
`PROBE_TIMEOUT_S` (DNS included: the probe runs in a thread that is not waited for longer),
whether to download at all. A hub that does not answer in time is reported the same way
whichever deadline fired first, the request's own timeout or the wait for the thread:
"<endpoint> cannot be reached (no answer within 3 s)"; other failures name the error, e.g.
"(ConnectError: ...)". When the hub cannot be reached, or downloads are switched off
(`HF_HUB_OFFLINE` / `TRANSFORMERS_OFFLINE`), a model already in the local Hugging Face cache
is used as it is, and anything else raises `HubUnavailable` at once. With a working network
nothing changes: `snapshot_download` runs as before. The probe's answer is kept for
`PROBE_TTL_S`, so a long-running app notices when the network comes back.

Used by `rumik_app.checkpoint.load` (the model loader) and `evaluation.asr` (Hugging Face ASR
judges); each turns `HubUnavailable` into a message that names the fix in its caller's terms
(command-line flags, or the app's form fields).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from rumik_app.errors import RumikError

PROBE_TIMEOUT_S = 3.0  # one HEAD request; a working hub answers in well under a second
PROBE_TTL_S = 60.0  # how long a probe's answer is reused
DEFAULT_ENDPOINT = "https://huggingface.co"
OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
TRUE_VALUES = {"1", "true", "yes", "on"}

_probe_cache: dict[str, tuple[float, str | None]] = {}
_probe_lock = threading.Lock()


class HubUnavailable(RumikError, OSError):
    """A hub model is needed, it is not in the local cache, and the hub cannot be used.

    repo_id: the model asked for; reason: why the hub cannot be used, e.g. "downloads are off
    (offline mode: HF_HUB_OFFLINE is set)", "https://huggingface.co cannot be reached (no answer
    within 3 s)" or "https://huggingface.co cannot be reached (ConnectError: ...)".
    """

    def __init__(self, repo_id: str, reason: str):
        super().__init__(f"{repo_id!r} is not in the local Hugging Face cache and {reason}.")
        self.repo_id, self.reason = repo_id, reason


def endpoint() -> str:
    """The hub endpoint in use: $HF_ENDPOINT, else https://huggingface.co (no trailing slash)."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def offline_reason() -> str | None:
    """Why downloads are switched off by the environment, or None when they are allowed."""
    for var in OFFLINE_VARS:
        if os.environ.get(var, "").strip().lower() in TRUE_VALUES:
            return f"downloads are off (offline mode: {var} is set)"
    from huggingface_hub import constants

    if constants.is_offline_mode():  # set at import time, e.g. by HF_HUB_OFFLINE=1 then unset
        return "downloads are off (huggingface_hub is in offline mode)"
    return None


def _gave_up(timeout: float) -> str:
    """The reason when the hub did not answer in time: the same words whichever deadline fired
    (the request's own timeout, or the wait for the probe thread)."""
    return f"no answer within {timeout:g} s"


def _head(url: str, timeout: float, answer: list) -> None:
    import httpx  # huggingface_hub's own session refuses every request once its offline mode is on

    try:
        httpx.head(url, timeout=timeout, follow_redirects=False)  # proxies from the environment
        answer.append(None)
    except httpx.TimeoutException:  # connect, read, write or pool timeout: the hub did not answer in time
        answer.append(_gave_up(timeout))
    except Exception as exc:  # noqa: BLE001 - any failure to talk to the hub means "unreachable"
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else "no detail"
        answer.append(f"{type(exc).__name__}: {detail}")


def probe(url: str | None = None, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """None when the hub answers (any HTTP status counts), else why not: "... cannot be reached
    (no answer within 3 s)" when it did not answer in time (whichever deadline fired first: the
    request's timeout or the wait for its thread), else "... cannot be reached (ConnectError:
    ...)" and the like. Takes at most about `timeout` seconds; the answer per endpoint is reused
    for PROBE_TTL_S."""
    url = url or endpoint()
    with _probe_lock:
        hit = _probe_cache.get(url)
        if hit is not None and time.monotonic() - hit[0] < PROBE_TTL_S:
            return hit[1]
    answer: list = []
    worker = threading.Thread(target=_head, args=(url, timeout, answer), daemon=True, name="hub-probe")
    worker.start()
    worker.join(timeout + 0.5)  # the request's own timeout does not cover a hanging DNS lookup
    error = answer[0] if answer else _gave_up(timeout)
    reason = None if error is None else f"{url} cannot be reached ({error})"
    with _probe_lock:
        _probe_cache[url] = (time.monotonic(), reason)
    return reason


def forget_probe() -> None:
    """Drop remembered probe answers (tests; or after the network came back)."""
    with _probe_lock:
        _probe_cache.clear()


def offline_snapshot(repo_id: str) -> Path | None:
    """None when the hub can be used (download as usual); else the cached snapshot of
    `repo_id`, or HubUnavailable at once when it is not cached."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    reason = offline_reason() or probe()
    if reason is None:
        return None
    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except (LocalEntryNotFoundError, FileNotFoundError) as exc:
        raise HubUnavailable(repo_id, reason) from exc


def hub_snapshot(repo_id: str, allow_patterns: list[str] | None = None) -> Path:
    """A local folder with `repo_id`: downloaded (or updated) when the hub can be used, else
    the cached snapshot. Raises HubUnavailable at once when it is in neither place; other
    hub errors (unknown repo, gated, HTTP errors) propagate as huggingface_hub raises them."""
    from huggingface_hub import snapshot_download

    cached = offline_snapshot(repo_id)
    return cached if cached is not None else Path(snapshot_download(repo_id, allow_patterns=allow_patterns))


__all__ = ["HubUnavailable", "hub_snapshot", "offline_snapshot", "probe", "offline_reason", "endpoint", "forget_probe",
           "PROBE_TIMEOUT_S"]
