"""Every protocol's request fields for the request's settings, derived from their declarations.

    SpeechRequest = protocol_model("SpeechRequest", OpenAIFields, renames={"description": "instructions"})
    setting_values(body, {"description": "instructions"})   # {"description": body.instructions, "seed": ...}

A protocol's model declares only what the protocol itself knows (OpenAI's `input`, `voice`
and `speed`, Silk's `speaker` and tone tags, formats and rates); `protocol_model` adds one
optional field per request setting that travels on the wire (`rumik_app.request.request_settings`)
under the protocol's name for it, typed as declared (a setting sent by reference takes ids,
one or a list), unless the protocol declares that name itself or leaves the setting out. So a
setting declared in `rumik_app.request` is a field of every protocol with no edit here. The
bounds and messages are not pydantic's: the value goes on to `build_request` unchecked, so each
protocol answers a bad value with the message the CLI and the app give.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import Field as Setting

from pydantic import BaseModel, Field, create_model

from rumik_app.request import request_settings
from rumik_app.settings import setting_type, wire_name


def protocol_model(name: str, own: type[BaseModel], renames: Mapping[str, str] | None = None,
                   leave_out: Collection[str] = ()) -> type[BaseModel]:
    """`own` (the protocol's own fields, first) plus a field per request setting on the wire:
    named `renames.get(setting, its wire name)`, optional (None: not given), skipped when `own`
    declares that name or the setting is in `leave_out`."""
    added = {}
    for spec in request_settings():
        wire = _wire(spec, renames)
        if wire is None or spec.name in leave_out or wire in own.model_fields:
            continue
        kind = str | list[str] if spec.metadata["by_reference"] else setting_type(spec)
        added[wire] = (kind | None, Field(None, description=spec.metadata["help"]))
    return create_model(name, __base__=own, **added)


def settings_taken(model: type[BaseModel], renames: Mapping[str, str] | None = None) -> list[Setting]:
    """The request settings `model` carries (its own fields included), in declaration order."""
    return [spec for spec in request_settings() if _wire(spec, renames) in model.model_fields]


def setting_values(body: BaseModel, renames: Mapping[str, str] | None = None) -> dict:
    """The body's request settings under `build_request`'s names (None: not given). Settings sent
    by reference (lexicon ids) are left to the protocol, which resolves them."""
    return {spec.name: getattr(body, _wire(spec, renames)) for spec in settings_taken(type(body), renames)
            if not spec.metadata["by_reference"]}


def _wire(spec: Setting, renames: Mapping[str, str] | None) -> str | None:
    wire = wire_name(spec)
    return None if wire is None else (renames or {}).get(spec.name, wire)
