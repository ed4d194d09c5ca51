"""What makes a play on the campaign server: the watch that sees a trial's clip sent to its page.

Library module behind the campaign server (`webapp.campaign.server.app`; no command line)::

    from starlette.middleware import Middleware
    app_kwargs["middleware"].append(Middleware(ClipFetchWatch, queues=queues))   # inside the VisitorGuard

A page's clips are served copies under random 128-bit names (`RaterQueues.next_trial`), fetched
through Gradio's file route (`/gradio_api/file=<path>`; the browser's copy in Gradio's cache keeps
the name). This pure-ASGI watch passes every request on unchanged; for a GET of a name the queues
showed, it tells them (`RaterQueues.clip_fetched`, on a worker thread: one SQLite write) as the
answer's last bytes go out: a 200, or a 206 whose range ends at the file's last byte (a player
that reads in ranges). A play reported for a clip that was never sent is then refused
(`CampaignStore.mark_played`), so `/campaign_played` alone cannot complete a queue
(docs/campaigns.md, "What counts as a play").
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from urllib.parse import unquote

import anyio

from webapp.campaign.queues import RaterQueues

FILE_ROUTE = re.compile(r"/file=(?P<path>.+)$")
CONTENT_RANGE = re.compile(r"bytes \d+-(?P<last>\d+)/(?P<size>\d+)")


def served_name(path: str) -> str | None:
    """The file name a Gradio file route asks for (`.../file=/tmp/x/<name>.wav` -> `<name>.wav`), else None."""
    match = FILE_ROUTE.search(unquote(path))
    return PurePosixPath(match["path"]).name if match else None


def reaches_the_end(status: int, headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether an answer with this status and headers carries its file to the last byte."""
    if status == 200:
        return True
    if status != 206:
        return False
    value = next((v for k, v in headers if k.lower() == b"content-range"), b"").decode("latin-1")
    match = CONTENT_RANGE.fullmatch(value.strip())
    return bool(match) and int(match["last"]) + 1 == int(match["size"])


class ClipFetchWatch:
    """Pure ASGI middleware: records the complete fetch of a shown trial clip (module docstring)."""

    def __init__(self, app, queues: RaterQueues):
        self.app, self.queues = app, queues

    async def __call__(self, scope, receive, send) -> None:
        name = served_name(scope["path"]) if scope["type"] == "http" and scope["method"] == "GET" else None
        if name is None or not self.queues.is_shown_clip(name):
            return await self.app(scope, receive, send)
        complete = False

        async def watched(message) -> None:
            nonlocal complete
            if message["type"] == "http.response.start":
                complete = reaches_the_end(message["status"], message.get("headers", []))
            elif complete and message["type"] == "http.response.body" and not message.get("more_body", False):
                # Recorded as the last bytes go out, before the client can have them: a play it
                # reports after reading the clip always finds the fetch.
                complete = False
                await anyio.to_thread.run_sync(self.queues.clip_fetched, name)
            await send(message)

        await self.app(scope, receive, watched)
