"""The app's forms: one dataclass per event's inputs, made once from Gradio's values, by name.

    go.click(form_event(SynthForm, handlers.stream), inputs_kwargs=inputs, outputs=[...], api_name=...)
    form = SynthForm.from_inputs(text="hi", seed="", temperature=0.7)   # what form_event does per event
    build_request(form.request_fields(), limits=APP_LIMITS)          # rumik_app.request

Gradio passes the components of `inputs_kwargs` to the event's function as keyword arguments,
and those names are the API's parameter names (`client.predict(text=..., seed=7,
api_name="/synthesize")`): a form's fields are that list, written once. `SynthForm`'s are
derived: one per request setting the form shows (`rumik_app.request.request_settings`, their
`form`) and the tab's own inputs, in the API's order (SYNTH_INPUTS; a setting declared since
comes last). `form_event` makes the function Gradio calls: it builds the form from the
keywords and hands it to the handler, so a handler takes one named form instead of a long
positional list. A form holds what Gradio sent
(a dropdown's "" for no choice, a Number's float seed, a checkbox's string from an API
caller); `request_fields()` reads it as `build_request`'s fields, and the request's own checks
give every message.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields, make_dataclass

from rumik_app.engine.script import DEFAULT_GAP_SECONDS
from rumik_app.request import RANDOM_SEED, request_settings
from rumik_app.settings import Checkbox, NumberBox, setting_type

DEFAULT_PAIR_SECONDS = 10.0  # Compare & rate: the length cap per clip
MODE_STRUCTURED = "Tone, accent and pace"
MODE_FREE = "Free-form description"
# The Synthesise events' inputs in the order the app's API has taken them: gradio_client also
# passes arguments by position, so a place once given is kept. Request settings go by their
# declared names; a setting the form shows that was declared since comes after all of these, in
# declaration order (`synth_input_names`), so no caller's positions move.
SYNTH_INPUTS = ("text", "voice", "tone", "accent", "pace", "description", "seed", "temperature", "top_k", "top_p",
                "max_seconds", "system", "description_mode", "language", "normalize", "repetition_penalty",
                "lexicon", "dialogue", "dialogue_gap", "lexicon_entries")
# The tab's own inputs (not request settings) and their defaults. lexicon is the uploaded file
# (the request's lexicons are read from it and the editor's table).
TAB_INPUTS = {"system": "rumik-oss-1", "description_mode": None, "lexicon": None, "dialogue": False,
              "dialogue_gap": DEFAULT_GAP_SECONDS, "lexicon_entries": None}


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


def seed_value(value: object, blank: object = RANDOM_SEED) -> object:
    """A whole-number box (the seed): "" or None is `blank` (a random seed); a typed number is
    read as one; anything else goes on unchanged to the setting's check (`check_seed`, its one message)."""
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return blank
        try:
            return float(text)
        except ValueError:
            return value
    return blank if value is None else value


def form_settings() -> dict[str, Field]:
    """The request settings a form shows (those declared with a `form`), by name, in declaration order."""
    return {spec.name: spec for spec in request_settings() if spec.metadata["form"] is not None}


def form_default(spec: Field) -> object:
    """What a setting's widget holds at first: its declared default ("" for the text), or a number box's blank."""
    shown = spec.metadata["form"]
    if isinstance(shown, NumberBox):
        return shown.blank
    return "" if spec.default is MISSING else spec.default


def read_setting(spec: Field, value: object) -> object:
    """A form's value of a setting as `build_request` reads it: a checkbox as true or false (an
    API caller's "false" too), a number box through `seed_value`, a text setting stripped and
    empty as not given where it may be left out (tone, language), as "" where a choice is needed
    (the voice: its check names them), the text as typed; a slider's as it is."""
    shown = spec.metadata["form"]
    if isinstance(shown, Checkbox):
        return flag(value, default=spec.default)
    if isinstance(shown, NumberBox):
        return seed_value(value, shown.blank)
    if setting_type(spec) is not str or spec.default is MISSING:
        return value
    return choice(value) if spec.default is None else choice(value) or ""


def synth_input_names() -> tuple[str, ...]:
    """The Synthesise events' inputs: SYNTH_INPUTS that still exist, then settings declared since."""
    settings = form_settings()
    pinned = tuple(name for name in SYNTH_INPUTS if name in settings or name in TAB_INPUTS)
    return (*pinned, *(name for name in settings if name not in pinned))


class SynthFormBase:
    """What `SynthForm` does with its fields (one per input: `synth_input_names`)."""

    @classmethod
    def from_inputs(cls, **values) -> "SynthForm":
        """The form from Gradio's keyword values, by name."""
        return cls(**values)

    @classmethod
    def input_defaults(cls) -> dict:
        """The API's parameters and their defaults, in the API's order."""
        return _defaults(cls)

    @property
    def is_dialogue(self) -> bool:
        return flag(self.dialogue, default=False)

    def request_fields(self) -> dict:
        """The form as `build_request`'s fields (`read_setting`), the description mode applied."""
        values = {name: read_setting(spec, getattr(self, name)) for name, spec in form_settings().items()}
        if self.description_mode == MODE_FREE:
            values.update(tone=None, accent=None, pace=None)
        elif self.description_mode is not None:  # the radio's other choice (any other value reads as it)
            values["description"] = None
        return values


def _synth_form_fields() -> list[tuple[str, type, Field]]:
    settings = form_settings()
    return [(name, object, field(default=form_default(settings[name]) if name in settings else TAB_INPUTS[name]))
            for name in synth_input_names()]


# The Synthesise tab's inputs (the names of the /synthesize and /synthesize_stream APIs): every
# request setting the form shows (what Gradio sent: a dropdown's "" for no choice, a Number's
# float seed, a checkbox's string from an API caller), then the tab's own. description_mode:
# the tab's radio; None (the API without it) takes tone, accent, pace and description as given.
# lexicon: the uploaded lexicon file's path; lexicon_entries: the lexicon editor's table (rows of
# grapheme, alias, languages; `webapp.scripts.read_lexicon_editor`), both this visitor's only.
SynthForm = make_dataclass("SynthForm", _synth_form_fields(), bases=(SynthFormBase,), frozen=True,
                           namespace={"__module__": __name__})


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

    def synth_form(self, text: str, max_seconds: float) -> "SynthForm":
        sampling = {} if self.temperature is None else {"temperature": self.temperature}
        return SynthForm(text=text, voice=self.voice, tone=self.tone, accent=self.accent, pace=self.pace,
                         seed=self.seed, max_seconds=max_seconds, system=self.system, **sampling)


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
