"""The sampling fields every protocol's request takes, derived from their declarations.

    class SpeechRequest(SamplingFields): ...          # temperature, top_k, top_p, repetition_penalty
    sampling_values(body)                             # {"temperature": 0.7, "top_k": None, ...}

One pydantic model holds one optional field per sampling setting a client sets by name
(`rumik_app.request.wire_settings`), typed as declared; OpenAI's speech request, Rumik's
fields and the text-in session config all extend it, so a setting declared in
`rumik_app.request` is a field of every protocol. The bounds and messages are not pydantic's:
the value goes on to `build_request` unchecked, so each protocol answers a bad value with the
message the CLI and the app give.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, create_model

from rumik_app.request import setting_type, wire_names, wire_settings

SamplingFields: type[BaseModel] = create_model(
    "SamplingFields", __config__=ConfigDict(extra="forbid"),
    **{spec.name: (setting_type(spec) | None, Field(None, description=spec.metadata["help"]))
       for spec in wire_settings()})


def sampling_values(body: BaseModel) -> dict:
    """The body's sampling fields by name (None: not given)."""
    return {name: getattr(body, name) for name in wire_names()}
