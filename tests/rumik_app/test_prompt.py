"""Prompt strings (docs/ARCHITECTURE.md §3), tag validation and empty/huge text errors."""

import pytest

from rumik_app.prompt import PromptError, build_prompt, split_tags, validate_text
from rumik_app.request import SynthesisRequest


def test_prompt_with_structured_description():
    prompt = build_prompt("हाँ, <laugh> बिल्कुल!", voice="aisha", tone="Sad", accent="hindi", pace="SLOW")
    assert prompt == '<text>Aisha: <description="sad, Hindi accent, slow pace"> हाँ, <laugh> बिल्कुल!<audio>'


def test_prompt_without_description_drops_part_and_space():
    assert build_prompt("Hello there.", voice="Zoya") == "<text>Zoya: Hello there.<audio>"


def test_free_form_description_and_indian_english_accent():
    assert build_prompt("Hi", description="a calm storyteller") == (
        '<text>Ira: <description="a calm storyteller"> Hi<audio>')
    assert "Indian English accent" in build_prompt("Hi", accent="indian english")


def test_partial_structured_description():
    assert build_prompt("Hi", tone="happy", pace="fast") == '<text>Ira: <description="happy, fast pace"> Hi<audio>'


@pytest.mark.parametrize("text, needle", [
    ("hello <giggle> there", "<giggle>"),
    ("hello <Laugh> there", "<Laugh>"),
    ("hello </sigh> there", "</sigh>"),
])
def test_unknown_tag_lists_allowed_tags(text, needle):
    with pytest.raises(PromptError) as err:
        build_prompt(text)
    message = str(err.value)
    assert needle in message and "<laugh>" in message and "<chuckle>" in message and "<sigh>" in message


def test_stray_bracket_is_an_error():
    with pytest.raises(PromptError, match="Stray"):
        validate_text("3 < 4 and 5 > 2")


@pytest.mark.parametrize("text", ["", "   ", "\n\t"])
def test_empty_text_error(text):
    with pytest.raises(PromptError, match="empty"):
        build_prompt(text)


def test_huge_text_error_names_limit():
    with pytest.raises(PromptError, match="limit"):
        validate_text("a" * 60_000)


def test_bad_voice_tone_and_conflicting_description():
    with pytest.raises(PromptError, match="Ira"):
        build_prompt("hi", voice="Bob")
    with pytest.raises(PromptError, match="happy"):
        build_prompt("hi", tone="furious")
    with pytest.raises(PromptError, match="not both"):
        build_prompt("hi", tone="happy", description="calm")
    with pytest.raises(PromptError, match="quotes"):
        build_prompt("hi", description='say "x"')


def test_request_prompt_and_custom_voices():
    req = SynthesisRequest("नमस्ते", voice="Meera")
    assert req.prompt(voices=("Meera",)) == "<text>Meera: नमस्ते<audio>"
    with pytest.raises(PromptError):
        req.prompt()


def test_split_tags():
    assert split_tags("a,<laugh>b <sigh> c") == ["a,", "<laugh>", "b", "<sigh>", "c"]
