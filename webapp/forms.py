"""The app's forms: one dataclass per event's inputs, made once from Gradio's values, by name.

    go.click(form_event(SynthForm, handlers.stream), inputs_kwargs=inputs, outputs=[...], api_name=...)
    form = SynthForm.from_inputs(text="hi", seed="", temperature=0.7)   # what form_event does per event
    build_request(form.request_fields(), limits=APP_LIMITS)          # rumik_app.request

Gradio passes the components of `inputs_kwargs` to the event's function as keyword arguments,
and those names are the API's parameter names (`client.predict(text=..., seed=7,
api_name="/synthesize")`): a form's fields are that list, written once. `form_event` makes the
function Gradio calls: it builds the form from the keywords and hands it to the handler, so a
handler takes one named form instead of a long positional list. A form holds what Gradio sent
(a dropdown's "" for no choice, a Number's float seed, a checkbox's string from an API
caller); `request_fields()` reads it as `build_request`'s fields, and the request's own checks
give every message.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields

from rumik_app.engine.script import DEFAULT_GAP_SECONDS
from rumik_app.request import DEFAULT_MAX_SECONDS, RANDOM_SEED, wire_names, wire_settings

DEFAULT_PAIR_SECONDS = 10.0  # Compare & rate: the length cap per clip
MODE_STRUCTURED = "Tone, accent and pace"
MODE_FREE = "Free-form description"
# SynthForm's inputs since Say it right, last in the API and in this order (gradio_client also passes
# arguments by position): the lexicon file, dialogue and its gap, then the lexicon editor's table.
SAY_IT_RIGHT_FIELDS = ("lexicon", "dialogue", "dialogue_gap", "lexicon_entries")


def form_event(form_type: type, handler: Callable) -> Callable:
    """The function for a Gradio event whose inputs are `form_type`'s fields (`inputs_kwargs`):
    it calls `handler(form_type.from_inputs(**values))`, with `request=` (Gradio's request:
    the client's address, the signed-in user) when the handler takes one. A generator handler
    stays a generator (Gradio streams from generator functions only)."""
    import gradio as gr

    def call(values: dict, request):
        form = form_type.from_inputs(**values)
        return handler(form, request=request) if takes_request else handler(form)

    takes_request = "request" in inspect.signature(handler).parameters
    if inspect.isgeneratorfunction(handler):
        def event(request=None, **values):
            yield from call(values, request)
    else:
        def event(request=None, **values):
            return call(values, request)
    # What Gradio reads of the function: a parameter of type gr.Request it fills in itself, and
    # the API's parameters with their defaults (None makes one optional where its component has
    # no initial value, as a plain function's `heard_1=None` did).
    event.__annotations__ = {"request": gr.Request}
    event.__signature__ = inspect.Signature([
        inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None, annotation=gr.Request),
        *(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)
          for name, default in form_type.input_defaults().items())])
    event.__name__ = handler.__name__
    event.__doc__ = handler.__doc__
    return event


def _defaults(form_type: type) -> dict:
    return {spec.name: spec.default_factory() if spec.default_factory is not MISSING else spec.default
            for spec in fields(form_type)}


def choice(value: object) -> str | None:
    """A dropdown or text value: stripped, None when empty."""
    text = "" if value is None else str(value).strip()
    return text or None


def flag(value: object, default: bool = True) -> bool:
    """A checkbox value from the UI or the API (None/missing = `default`)."""
    if isinstance(value, str):
        return value.strip().lower() not in ("false", "0", "no", "off", "")
    return default if value is None else bool(value)


def seed_value(value: object) -> object:
    """A seed field: "" or None is a random seed; a typed number is read as one; anything else
    goes on unchanged to the request's check (`rumik_app.request.check_seed`, its one message)."""
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return RANDOM_SEED
        try:
            return float(text)
        except ValueError:
            return value
    return RANDOM_SEED if value is None else value


@dataclass(frozen=True)
class SynthForm:
    """The Synthesise tab's inputs (the names of the /synthesize and /synthesize_stream APIs).

    sampling: one value per sampling setting a client sets (`wire_settings()`: one slider each).
    description_mode: the tab's radio; None (the API without it) takes tone, accent, pace and
    description as given. language: for number words (None: per clause, from the script).
    lexicon: the uploaded lexicon file's path; lexicon_entries: the lexicon editor's table (rows of
    grapheme, alias, languages; `webapp.scripts.read_lexicon_editor`), both this visitor's only."""

    text: str = ""
    voice: str = "Ira"
    tone: str | None = None
    accent: str | None = None
    pace: str | None = None
    description: str | None = None
    seed: object = RANDOM_SEED
    max_seconds: float = DEFAULT_MAX_SECONDS
    system: str = "rumik-oss-1"
    description_mode: str | None = None
    language: str | None = None
    normalize: object = True
    sampling: Mapping[str, object] = field(default_factory=dict)
    lexicon: str | None = None
    dialogue: object = False
    dialogue_gap: object = DEFAULT_GAP_SECONDS
    lexicon_entries: object = None

    @classmethod
    def from_inputs(cls, **values) -> "SynthForm":
        """The form from Gradio's keyword values: the sampling settings gathered, the rest by name."""
        sampling = {name: values.pop(name) for name in wire_names() if name in values}
        return cls(**values, sampling=sampling)

    @classmethod
    def input_defaults(cls) -> dict:
        """The API's parameters and their defaults: the fields, a sampling setting each."""
        defaults = _defaults(cls)
        del defaults["sampling"]
        since = {name: defaults.pop(name) for name in SAY_IT_RIGHT_FIELDS}  # declared after the sampling settings
        return {**defaults, **{spec.name: spec.default for spec in wire_settings()}, **since}

    @property
    def is_dialogue(self) -> bool:
        return flag(self.dialogue, default=False)

    def request_fields(self) -> dict:
        """The form as `build_request`'s fields, the description mode applied."""
        condition = {"tone": self.tone, "accent": self.accent, "pace": self.pace, "description": self.description}
        if self.description_mode == MODE_FREE:
            condition.update(tone=None, accent=None, pace=None)
        elif self.description_mode is not None:  # the radio's other choice (any other value reads as it)
            condition["description"] = None
        return {"text": self.text, "voice": choice(self.voice) or "", **{k: choice(v) for k, v in condition.items()},
                "seed": seed_value(self.seed), "max_seconds": self.max_seconds, "language": choice(self.language),
                "normalize": flag(self.normalize), **self.sampling}


@dataclass(frozen=True)
class RatingForm:
    """One rating of a Compare & rate pair (the /submit_rating API): the rater, the trial, each
    clip's score, the sound heard and where (clips 1 and 2), the preference and a comment."""

    rater: str = ""
    trial_id: str = ""
    score_1: object = None
    score_2: object = None
    preference: str | None = None
    heard_1: str | None = None
    where_1: object = None
    heard_2: str | None = None
    where_2: object = None
    comment: str = ""

    @classmethod
    def from_inputs(cls, **values) -> "RatingForm":
        return cls(**values)

    @classmethod
    def input_defaults(cls) -> dict:
        return _defaults(cls)

    def clips(self) -> list[tuple[object, str | None, object]]:
        """(score, heard, where) of clip 1, then clip 2."""
        return [(self.score_1, self.heard_1, self.where_1), (self.score_2, self.heard_2, self.where_2)]


@dataclass(frozen=True)
class SideForm:
    """One side (A or B) of a Compare & rate pair: a system and how it speaks, and an export label."""

    system: str = "rumik-oss-1"
    voice: str = "Ira"
    tone: str | None = None
    accent: str | None = None
    pace: str | None = None
    seed: object = RANDOM_SEED
    temperature: float | None = None
    label: str = ""

    def synth_form(self, text: str, max_seconds: float) -> SynthForm:
        return SynthForm(text=text, voice=self.voice, tone=self.tone, accent=self.accent, pace=self.pace,
                         seed=self.seed, max_seconds=max_seconds, system=self.system,
                         sampling={} if self.temperature is None else {"temperature": self.temperature})


SIDE_FIELDS = tuple(spec.name for spec in fields(SideForm))


@dataclass(frozen=True)
class PairForm:
    """The Compare & rate tab's inputs for one pair (the /generate_pair API: each side's fields
    end in _a or _b, e.g. seed_a, system_b)."""

    text: str = ""
    prompt_id: str = ""
    target_delivery: str | None = None
    a: SideForm = field(default_factory=SideForm)
    b: SideForm = field(default_factory=SideForm)
    max_seconds: float = DEFAULT_PAIR_SECONDS

    @classmethod
    def from_inputs(cls, **values) -> "PairForm":
        sides = {side: SideForm(**{name: values.pop(f"{name}_{side}") for name in SIDE_FIELDS
                                   if f"{name}_{side}" in values}) for side in ("a", "b")}
        return cls(**values, **sides)

    @classmethod
    def input_defaults(cls) -> dict:
        """The API's parameters and their defaults: the pair's fields, then each side's with _a or _b."""
        own = {name: default for name, default in _defaults(cls).items() if name not in ("a", "b")}
        sides = {f"{name}_{side}": default for side in ("a", "b") for name, default in _defaults(SideForm).items()}
        return {"text": own.pop("text"), "prompt_id": own.pop("prompt_id"),
                "target_delivery": own.pop("target_delivery"), **sides, **own}

    @staticmethod
    def input_names(side_components: Mapping[str, Mapping[str, object]]) -> dict:
        """{"seed_a": component, ...} for the two sides' components ({"a": {"seed": ...}, "b": ...})."""
        return {f"{name}_{side}": component for side, parts in side_components.items()
                for name, component in parts.items()}
