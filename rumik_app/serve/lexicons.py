"""Pronunciation lexicons on the speech server: stored per API key, used by id in requests.

    POST   /v1/lexicons                 {"name": "brands", "entries": [...]} (JSON), or
                                        {"name": ..., "format": "pls"|"tsv", "data": "..."}  -> {"id": "lex_...", ...}
    GET    /v1/lexicons                 this key's lexicons: id, name, entries
    GET    /v1/lexicons/{id}?format=json|pls|tsv
    PUT    /v1/lexicons/{id}            replace its entries (same bodies as POST)
    DELETE /v1/lexicons/{id}
    POST   /v1/audio/speech {"input": "SBI का UPI", "lexicon": ["lex_..."], ...}   # applied before normalisation

Each API key (`--api-key`, `--api-keys-file`) owns its lexicons: another key gets 404 for
them, in lists and in requests alike (`RequestGate` puts the key's owner id, a hash, in the
request's state; a server without keys has one owner). Bounded: `MAX_LEXICONS_PER_OWNER`,
and each lexicon by `rumik_app.text.lexicon`'s limits; bodies up to `protocol.MAX_LEXICON_BODY_BYTES`.
With `--data-dir` they are kept as JSON under `<data-dir>/lexicons/<owner>/<id>.json`, each
written atomically, and read back at start; without it they live as long as the process.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
import threading
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from rumik_app.errors import PromptError
from rumik_app.files import atomic_write
from rumik_app.serve.errors import ApiError
from rumik_app.serve.protocol import OPEN_OWNER
from rumik_app.text.lexicon import Lexicon, lexicon_from_dict
from rumik_app.text.lexicon_io import read_lexicon, to_json, to_pls, to_tsv

log = logging.getLogger(__name__)

MAX_LEXICONS_PER_OWNER = 32
MAX_LEXICONS_PER_REQUEST = 8
LEXICON_ID = re.compile(r"^lex_[0-9a-f]{16}$")
EXPORTS = {"json": (to_json, "application/json"), "pls": (to_pls, "application/pls+xml"),
           "tsv": (to_tsv, "text/tab-separated-values")}


class LexiconStore:
    """Lexicons by owner and id, optionally persisted under `root` (see the module docstring)."""

    def __init__(self, root: str | Path | None = None, max_per_owner: int = MAX_LEXICONS_PER_OWNER):
        self.root = Path(root) if root is not None else None
        self.max_per_owner = max_per_owner
        self.lock = threading.Lock()
        self.owners: dict[str, dict[str, Lexicon]] = {}
        if self.root is not None:
            self._load()

    def _load(self) -> None:
        """Read back what was stored; a file that cannot be read is logged and skipped, never
        fatal (the server must start whatever one key stored)."""
        for path in sorted(self.root.glob("*/lex_*.json")):
            if not LEXICON_ID.match(path.stem):
                continue
            try:
                lexicon = lexicon_from_dict(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError, RecursionError, PromptError) as exc:
                log.warning("skipping the stored lexicon %s: %s", path, exc)
                continue
            self.owners.setdefault(path.parent.name, {})[path.stem] = lexicon

    def list(self, owner: str) -> dict[str, Lexicon]:
        with self.lock:
            return dict(self.owners.get(owner, {}))

    def get(self, owner: str, lexicon_id: str) -> Lexicon:
        with self.lock:
            lexicon = self.owners.get(owner, {}).get(lexicon_id)
        if lexicon is None:
            raise ApiError(404, f"No lexicon {lexicon_id!r} for this API key; GET /v1/lexicons lists yours.",
                           param="lexicon", code="lexicon_not_found")
        return lexicon

    def put(self, owner: str, lexicon: Lexicon, lexicon_id: str | None = None) -> str:
        """Store `lexicon` (a new id when `lexicon_id` is None; else replace that one, which must exist)."""
        with self.lock:
            mine = self.owners.setdefault(owner, {})
            if lexicon_id is None:
                if len(mine) >= self.max_per_owner:
                    raise ApiError(400, f"This API key already has {len(mine)} lexicons, the most it may keep; "
                                        "delete one (DELETE /v1/lexicons/{id}) or add entries to one you have.",
                                   code="lexicon_quota")
                lexicon_id = "lex_" + secrets.token_hex(8)
            elif lexicon_id not in mine:
                raise ApiError(404, f"No lexicon {lexicon_id!r} for this API key.", code="lexicon_not_found")
            self._write(owner, lexicon_id, lexicon)
            mine[lexicon_id] = lexicon
        return lexicon_id

    def delete(self, owner: str, lexicon_id: str) -> None:
        with self.lock:
            if self.owners.get(owner, {}).pop(lexicon_id, None) is None:
                raise ApiError(404, f"No lexicon {lexicon_id!r} for this API key.", code="lexicon_not_found")
            if self.root is not None:
                (self.root / owner / f"{lexicon_id}.json").unlink(missing_ok=True)

    def resolve(self, owner: str, ids: object) -> tuple[Lexicon, ...]:
        """A request's `lexicon` field (an id or a list of ids) as lexicons; ApiError names the problem."""
        if ids is None:
            return ()
        ids = [ids] if isinstance(ids, str) else ids
        if not isinstance(ids, list) or not all(isinstance(item, str) for item in ids):
            raise ApiError(400, "lexicon takes a lexicon id or a list of ids (POST /v1/lexicons makes one).",
                           param="lexicon")
        if len(ids) > MAX_LEXICONS_PER_REQUEST:
            raise ApiError(400, f"A request may use at most {MAX_LEXICONS_PER_REQUEST} lexicons; merge some.",
                           param="lexicon")
        return tuple(self.get(owner, lexicon_id) for lexicon_id in ids)

    def _write(self, owner: str, lexicon_id: str, lexicon: Lexicon) -> None:
        if self.root is not None:
            atomic_write(self.root / owner / f"{lexicon_id}.json", to_json(lexicon))


def owner_of(request: Request) -> str:
    """The owner id `RequestGate` gave this request (the API key's hash), or the open owner."""
    return request.scope.get("state", {}).get("owner", OPEN_OWNER)


async def _lexicon_body(request: Request) -> Lexicon:
    try:
        body = json.loads(await request.body())
    except (ValueError, RecursionError):
        raise ApiError(400, "The body is not valid JSON.", code="invalid_json") from None
    if not isinstance(body, dict):
        raise ApiError(400, "Send a JSON object: {\"name\", \"entries\"}, or {\"name\", \"format\", \"data\"}.")
    try:
        if "data" in body:
            if body.get("format") not in ("pls", "tsv", "json") or not isinstance(body["data"], str):
                raise ApiError(400, "format is \"pls\", \"tsv\" or \"json\", and data a string of that format.",
                               param="format")
            return await asyncio.to_thread(read_lexicon, body["data"], body["format"],
                                           name=str(body.get("name") or "lexicon"))
        return await asyncio.to_thread(lexicon_from_dict, body)
    except PromptError as exc:
        raise ApiError(400, str(exc), param="lexicon") from None


def _summary(lexicon_id: str, lexicon: Lexicon) -> dict:
    return {"id": lexicon_id, "object": "lexicon", "name": lexicon.name, "entries": len(lexicon.entries)}


def _store(request: Request) -> LexiconStore:
    return request.app.state.ctx.lexicons


router = APIRouter()


@router.get("/v1/lexicons")
async def list_lexicons(request: Request) -> dict:
    mine = _store(request).list(owner_of(request))
    return {"object": "list", "data": [_summary(key, lexicon) for key, lexicon in mine.items()]}


@router.post("/v1/lexicons")
async def create_lexicon(request: Request) -> JSONResponse:
    lexicon = await _lexicon_body(request)
    lexicon_id = await asyncio.to_thread(_store(request).put, owner_of(request), lexicon)
    return JSONResponse(_summary(lexicon_id, lexicon), status_code=201)


@router.get("/v1/lexicons/{lexicon_id}")
async def get_lexicon(request: Request, lexicon_id: str, format: str = "json") -> Response:  # noqa: A002
    if format not in EXPORTS:
        raise ApiError(400, f"format is one of: {', '.join(EXPORTS)}.", param="format")
    write, media_type = EXPORTS[format]
    return Response(write(_store(request).get(owner_of(request), lexicon_id)), media_type=media_type)


@router.put("/v1/lexicons/{lexicon_id}")
async def replace_lexicon(request: Request, lexicon_id: str) -> dict:
    lexicon = await _lexicon_body(request)
    await asyncio.to_thread(_store(request).put, owner_of(request), lexicon, lexicon_id)
    return _summary(lexicon_id, lexicon)


@router.delete("/v1/lexicons/{lexicon_id}")
async def delete_lexicon(request: Request, lexicon_id: str) -> dict:
    _store(request).delete(owner_of(request), lexicon_id)
    return {"id": lexicon_id, "object": "lexicon", "deleted": True}
