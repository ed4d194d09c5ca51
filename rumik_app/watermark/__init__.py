"""An inaudible watermark on the audio this project makes: Resemble AI's PerthNet (docs/watermark.md).

    from rumik_app.watermark import POLICIES, marks
    engine.watermark = "library"             # the default: library voices' audio carries the mark
    engine.watermark = "all"                 # every voice's; "off": none
    marks("library", library_voice=True)     # True: what the engines ask of the policy

    rumik_app.watermark.perth_net   the network, a torch-only port of resemble-perth 1.0.1's
    rumik_app.watermark.marker      `Watermarker` (load, apply, detect), its weights from the wheel
    rumik_app.watermark.stream      `StreamWatermarker`: a stream marked piece by piece, equal to
                                    `Watermarker.apply` on the whole clip

The engines apply it (`BaseEngine.watermark`, `--watermark` in rumik_app.cli_args); the
detector's command, the attacks and detection rates are evaluation.watermark. This module is
light (no torch): the command lines read the policy names before anything loads.
"""

from __future__ import annotations

from rumik_app.errors import RumikError

POLICIES = ("library", "all", "off")
DEFAULT_POLICY = "library"


class WatermarkError(RumikError, ValueError):
    """Audio that cannot be watermarked or scored (not mono, too short, not finite); the message says why."""


class WatermarkUnavailable(WatermarkError, RuntimeError):
    """The watermark's weights cannot be loaded (resemble-perth missing or damaged); the message names the install."""


def check_policy(policy: str) -> str:
    """`policy` if it is one of POLICIES; ValueError naming them otherwise."""
    if policy not in POLICIES:
        raise ValueError(f"Unknown watermark policy {policy!r}; use one of: {', '.join(POLICIES)}.")
    return policy


def marks(policy: str, library_voice: bool) -> bool:
    """Whether audio of a library voice (or of a built-in one) carries the mark under `policy`."""
    return check_policy(policy) == "all" or (policy == "library" and library_voice)
