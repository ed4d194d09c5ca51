"""Small pieces every tab of `app.py` shares: app limits, error mapping, file hashes.

Library module (no command line). `user_errors()` turns the project's own exceptions into
one readable `gr.Error` and any other exception into a short message (the traceback goes to
the server log, never to the visitor).
"""

from __future__ import annotations

import contextlib
import hashlib
import html
import logging
import re
import secrets
from collections.abc import Iterator

from rumik_app.errors import CheckpointError, RumikError
from rumik_app.prompt import PromptError
from rumik_app.request import APP_LIMITS
from webapp.systems import SystemUnavailable

log = logging.getLogger(__name__)

# Longest text the app accepts in one request (as typed; rumik_app.request.APP_LIMITS also
# bounds it as spoken and the audio it may make): a shared demo should not be tied up for
# minutes by one visitor. The engine itself takes up to 50,000 characters (chunked).
APP_MAX_TEXT_CHARS = APP_LIMITS.max_chars
MIN_SECONDS = 0.5  # slider floor (the engine rounds up to whole 80 ms frames)
# Generations running at once (one engine per system, each locked; a GPU does one at a time).
SYNTH_CONCURRENCY = 1
# Prompt previews computed at once (normalising 2,000 characters of amounts is CPU work): in
# Gradio's queue, so they also count against a visitor's share of it (webapp.guard.QueueFairness).
PREVIEW_CONCURRENCY = 2


class UserError(RumikError, ValueError):
    """Bad input from a visitor; the message says how to fix it."""


USER_ERRORS = (UserError, PromptError, SystemUnavailable, CheckpointError)

# Form fields a visitor types that end up in stored ratings, exports and the admin's results
# view: each has a length and a character set, so none can break an export (a 300-character
# name as a file name), pass as another system (an export id), or carry Markdown (an image
# that calls home from the admin's page). Letters of every script count as letters (\w).
NAME_PATTERN = re.compile(r"^[\w][\w .'-]{0,63}$")        # a rater's name
LABEL_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$")  # an export label: becomes part of a file name
PROMPT_ID_PATTERN = re.compile(r"^[\w][\w.:-]{0,127}$")
MAX_COMMENT_CHARS = 2_000
MAX_PASSWORD_CHARS = 256


def check_field(value: object, what: str, pattern: re.Pattern, rule: str) -> str:
    """`value` stripped, or UserError naming the field and what it may hold."""
    text = ("" if value is None else str(value)).strip()
    if not pattern.match(text):
        raise UserError(f"The {what} may be {rule}.")
    return text


def check_length(value: object, what: str, max_chars: int) -> str:
    text = "" if value is None else str(value)
    if len(text) > max_chars:
        raise UserError(f"The {what} is {len(text):,} characters; at most {max_chars:,} are kept. Shorten it.")
    return text


def safe_file_name(name: str, max_chars: int = 40) -> str:
    """A file-name part for any string: its safe characters, cut short, plus a hash of the
    whole, so different names never share a file (however many characters they differ in)."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")[:max_chars] or "x"
    return f"{slug}-{hashlib.sha256(name.encode('utf-8')).hexdigest()[:8]}"


def _known_errors() -> tuple[type[BaseException], ...]:
    """USER_ERRORS plus the evaluation package's errors that carry a fix in their message."""
    known = list(USER_ERRORS)
    with contextlib.suppress(ImportError):
        from evaluation.systems.base import SynthesisError

        known.append(SynthesisError)
    return tuple(known)


# Who sent an event: Gradio's own page sends "app"; gradio_client and the JS client "api"; MCP "mcp".
CALLER_HEADER, PAGE_CALLER = "x-gradio-user", "app"


def _from_browser() -> bool:
    """True while handling an event from the web page (not from gradio_client or MCP)."""
    try:
        from gradio.context import LocalContext

        request = LocalContext.request.get(None)
    except (ImportError, AttributeError):
        return False
    headers = getattr(request, "headers", None) or {}
    return request is not None and headers.get(CALLER_HEADER) == PAGE_CALLER


def toast_message(message: str) -> str:
    """The error text for `gr.Error`: Gradio renders it as HTML in the page's toast, where an
    error about "<giggle>" would lose the tag it is about, so it is escaped for the page; API
    callers get it as written (the same words as the CLI's)."""
    return html.escape(message, quote=False) if _from_browser() else message


@contextlib.contextmanager
def user_errors(action: str) -> Iterator[None]:
    """Re-raise known errors as `gr.Error(message)`, unknown ones as a one-line `gr.Error`."""
    import gradio as gr

    try:
        yield
    except gr.Error:
        raise
    except Exception as exc:  # noqa: BLE001 - a visitor never sees a traceback
        if isinstance(exc, _known_errors()):
            raise ui_error(str(exc)) from None
        incident = secrets.token_hex(4)
        log.exception("%s failed (incident %s)", action, incident)  # paths and library messages stay in the log
        raise ui_error(f"{action} failed: an internal error (incident {incident}). If this keeps happening, report "
                       "it with that number; the server log has the details.") from None


def ui_error(message: str):
    """`gr.Error` carrying `message` (escaped for the page's toast, see `toast_message`); the
    text as written stays on it as `.plain` for `error_line`."""
    import gradio as gr

    error = gr.Error(toast_message(message), print_exception=False)
    error.plain = message
    return error


def error_line(prefix: str, error) -> str:
    """`⚠ {prefix}: {message}` for a Markdown output, the message's `<`, `>`, `&` escaped (an
    error about "<giggle>" would otherwise lose the tag it is about to HTML)."""
    text = getattr(error, "plain", None) or getattr(error, "message", None) or str(error)
    return f"⚠ {prefix}: {html.escape(text, quote=False)}"


def checked_slider(*args, **kwargs):
    """A gr.Slider for a request setting (temperature, top-k, top-p, max seconds) without
    Gradio's own range check: an API caller's value goes on to the request's checks
    (`rumik_app.request`), so it reads the message the CLI and the speech server give, word for
    word. The page's slider cannot leave its range anyway. (An instance override, not a
    subclass: Gradio writes a .pyi stub next to the source of every component subclass.)"""
    import gradio as gr
    from gradio.components.number import Number

    slider = gr.Slider(*args, **kwargs)
    slider.preprocess = lambda payload: (None if payload is None
                                         else Number.round_to_precision(payload, slider.precision))
    return slider


def checked_choice(component):
    """A gr.Radio (type "value") whose value goes on to the app's own check unchanged, so a
    value not offered gets the app's one message (e.g. `webapp.scoring.UNKNOWN_JUDGE`), the
    same whatever was sent, instead of Gradio's, which echoes it."""
    component.preprocess = lambda payload: payload
    return component

