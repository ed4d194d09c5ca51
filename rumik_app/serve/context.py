"""`ServeContext`: what every route of the speech server shares, and its one request builder.

    ctx = request.app.state.ctx                                          # in a route (create_app sets it)
    req = ctx.build({"text": "Hello.", "voice": "ira", "temperature": 0.7})   # PromptError names the field

Each protocol maps its own field names onto `rumik_app.request.build_request`'s and calls
`ctx.build`, which adds what this server knows: the adapter's voices, limits and token layout,
and the length cap when a request gives none (--max-seconds).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from rumik_app.align import AlignerSet
from rumik_app.engine.script import DEFAULT_GAP_SECONDS, Part, build_script, plan_script
from rumik_app.request import DEFAULT_MAX_SECONDS, SynthesisRequest, build_request
from rumik_app.serve.lexicons import LexiconStore
from rumik_app.serve.metrics import ServerMetrics
from rumik_app.serve.protocol import DEFAULT_BODY_TIMEOUT_S, SpeechAdapter
from rumik_app.serve.sockets import SessionRegistry


@dataclass
class ServeContext:
    """What every route of the server shares (`app.state.ctx`): the adapter, its metrics and
    sessions, the model names it answers to (the served name first), other voice names, the
    length cap when a request gives none, the API keys' lexicons, the seconds a request
    body may take (routes that read their own body: a voice archive), and the word aligners."""

    adapter: SpeechAdapter
    metrics: ServerMetrics
    sessions: SessionRegistry
    accepted: tuple[str, ...]
    voice_map: dict[str, str] | None = None
    default_max_seconds: float = DEFAULT_MAX_SECONDS
    lexicons: LexiconStore = field(default_factory=LexiconStore)
    body_timeout: float = DEFAULT_BODY_TIMEOUT_S
    aligners: AlignerSet | None = None  # word timestamps (None: refused)

    @property
    def model_name(self) -> str:
        return self.accepted[0]

    def build_script(self, fields: Mapping[str, object], dialogue: bool = False,
                     gap_s: float = DEFAULT_GAP_SECONDS) -> list[Part] | None:
        """The checked script of a dialogue (the text is its script) or an SSML document (the
        text starts with `<speak>`), planned against this server's limits before any part takes
        a row; None for plain text (`build`). PromptError names the problem."""
        adapter = self.adapter
        parts = build_script(fields, dialogue=dialogue, gap_s=gap_s, voices=adapter.voices, limits=adapter.limits,
                             speakers=self.voice_map, default_max_seconds=self.default_max_seconds,
                             tokens_for=adapter.max_new_tokens_for)
        return None if parts is None else plan_script(adapter.layout, parts, adapter.limits)[0]

    def build(self, fields: Mapping[str, object]) -> SynthesisRequest:
        """The checked request for a protocol's fields (as `build_request` names them), against
        this server's voices, limits, token layout and default length; PromptError names the field."""
        adapter = self.adapter
        return build_request(fields, voices=adapter.voices, limits=adapter.limits,
                             default_max_seconds=self.default_max_seconds, tokens_for=adapter.max_new_tokens_for)
