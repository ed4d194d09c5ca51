"""Validates every prompt set shipped in evaluation/prompts/: fields, ids, languages, scripts,
domains, coverage of the 22 scheduled languages + English, NoVA field consistency
(requested_index = words before the tag, n_words, agreement with the NoVA scorer), and the
IndicEmo-style set (100 code-switched prompts, 20 per delivery, 2-5 languages each).

Run: .venv/bin/python -m pytest tests/evaluation/test_prompts.py -q
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from pathlib import Path

import pytest
import regex

from evaluation import nova
from evaluation.prompt_file import SAFE_ID, load_prompts, prompt_request
from rumik_app.prompt import ALLOWED_TAGS, validate_text
from rumik_app.text.languages import LANGUAGE_BY_CODE, LANGUAGES, dominant_script, script_counts

PROMPT_DIR = Path(__file__).resolve().parents[2] / "evaluation" / "prompts"
FILES = sorted(PROMPT_DIR.glob("*.jsonl"))
DOMAINS = {"conversation", "digits_money", "dates", "names", "tongue_twister", "code_switched"}
BENCHMARK_LANGUAGES = ("en", "hi", "te", "ta", "kn", "bn", "pa")
MIN_PER_LANGUAGE, MIN_PER_BENCHMARK_LANGUAGE = 2, 6
NOVA_KEYS = {"id", "text", "text_with_mark", "nvv", "requested_index", "n_words"}
INTELLIGIBILITY_KEYS = {"id", "text", "language", "domain"}
OPTIONAL_KEYS = {"voice", "tone", "accent", "pace", "description"}
TAG = re.compile(r"<[a-z]+>")
NOT_WORD_CHAR = regex.compile(r"[^\p{L}\p{N}\p{M}]+")


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def words(text: str) -> list[str]:
    """NoVA step 1 for words (docs/ARCHITECTURE.md §8): lower-case, drop non-alphanumerics, drop empty tokens."""
    return [w for w in (NOT_WORD_CHAR.sub("", t.lower()) for t in text.split()) if w]


def is_nova_file(rows: list[dict]) -> bool:
    return all("text_with_mark" in r for r in rows)


def is_indicemo_file(rows: list[dict]) -> bool:
    return all("target_delivery" in r for r in rows)


def test_the_expected_sets_exist():
    names = {p.name for p in FILES}
    assert {"intelligibility.jsonl", "intelligibility_en.jsonl", "nova_tags_en.jsonl", "indicemo_style.jsonl"} <= names


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_file_is_well_formed_and_loads_in_the_runner(path):
    rows = read(path)
    assert rows, f"{path.name} is empty"
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), [i for i, n in Counter(ids).items() if n > 1]
    for r in rows:
        assert SAFE_ID.match(r["id"]), r["id"]
        for field in ("text", "text_with_mark"):
            if field in r:
                assert r[field] == unicodedata.normalize("NFC", r[field]).strip(), (r["id"], "not NFC / stripped")
                validate_text(r[field])  # no stray brackets or unknown tags
    assert len(load_prompts(path)) == len(rows)


@pytest.mark.parametrize("path", [p for p in FILES if not is_nova_file(read(p)) and not is_indicemo_file(read(p))],
                         ids=lambda p: p.name)
def test_intelligibility_fields_languages_and_scripts(path):
    for r in read(path):
        assert INTELLIGIBILITY_KEYS <= set(r) <= INTELLIGIBILITY_KEYS | OPTIONAL_KEYS, r["id"]
        assert r["language"] in LANGUAGE_BY_CODE, (r["id"], r["language"])
        assert r["domain"] in DOMAINS, (r["id"], r["domain"])
        assert not TAG.search(r["text"]), (r["id"], "intelligibility prompts carry no tags")
        script = dominant_script(r["text"])
        expected = LANGUAGE_BY_CODE[r["language"]].script
        allowed = {expected, "Latin"} if r["domain"] == "code_switched" else {expected}
        assert script in allowed, (r["id"], f"text is in {script} script, {r['language']} is written in {expected}")
        assert r["id"].startswith(f"{r['language']}_"), r["id"]


def test_intelligibility_set_covers_every_language_and_domain():
    rows = read(PROMPT_DIR / "intelligibility.jsonl")
    per_language = Counter(r["language"] for r in rows)
    for lang in LANGUAGES:
        assert per_language[lang.code] >= MIN_PER_LANGUAGE, f"{lang.name} has {per_language[lang.code]} prompts"
    for code in BENCHMARK_LANGUAGES:
        assert per_language[code] >= MIN_PER_BENCHMARK_LANGUAGE, code
        domains = {r["domain"] for r in rows if r["language"] == code}
        assert domains == DOMAINS, (code, DOMAINS - domains)
    # code-switching appears both in native script and romanised
    switched = [r for r in rows if r["domain"] == "code_switched"]
    assert any(dominant_script(r["text"]) == "Latin" for r in switched if r["language"] != "en")
    assert any(dominant_script(r["text"]) != "Latin" for r in switched)


def test_hard_scripts_are_right():
    rows = {r["language"]: r for r in read(PROMPT_DIR / "intelligibility.jsonl")}
    assert dominant_script(rows["sat"]["text"]) == "OlChiki"
    assert dominant_script(rows["mni"]["text"]) == "MeeteiMayek"
    for code in ("ks", "sd", "ur"):
        assert dominant_script(rows[code]["text"]) == "Arabic"


def test_quick_english_set():
    rows = read(PROMPT_DIR / "intelligibility_en.jsonl")
    assert 8 <= len(rows) <= 12
    assert {r["language"] for r in rows} == {"en"}
    assert all(len(r["text"].split()) <= 15 for r in rows)


NOVA_FILES = [p for p in FILES if is_nova_file(read(p))]


@pytest.mark.parametrize("path", NOVA_FILES, ids=lambda p: p.name)
def test_nova_fields_are_consistent(path):
    spellings = nova.load_spellings()
    for r in read(path):
        assert set(r) == NOVA_KEYS, r["id"]
        tags = TAG.findall(r["text_with_mark"])
        assert tags == [f"<{r['nvv']}>"] and tags[0] in ALLOWED_TAGS, r["id"]
        before, _, after = r["text_with_mark"].partition(tags[0])
        assert r["requested_index"] == len(words(before)), r["id"]
        assert r["n_words"] == len(words(r["text"])) == len(words(before)) + len(words(after)), r["id"]
        assert not TAG.search(r["text"])
        assert re.sub(r"\s+([.,!?])", r"\1", " ".join((before + " " + after).split())) == r["text"], r["id"]
        # the scorer reads the same position, and a perfect transcript is rendered
        tokens = nova.tokenize(r["text_with_mark"], spellings)
        assert tokens.index(("t", r["nvv"])) == r["requested_index"]
        perfect = nova.score_prompt(r, {"id": r["id"], "hyp": r["text_with_mark"].lower()})
        assert perfect["verdict_3class"] == "rendered" and perfect["spurious_3class"] == 0
        missing = nova.score_prompt(r, {"id": r["id"], "hyp": r["text"]})
        assert missing["verdict_3class"] == "not_rendered"


def test_nova_set_is_balanced_and_varied():
    rows = read(PROMPT_DIR / "nova_tags_en.jsonl")
    counts = Counter(r["nvv"] for r in rows)
    assert set(counts) == {"laugh", "chuckle", "sigh"}
    assert max(counts.values()) - min(counts.values()) <= 1 and min(counts.values()) >= 5
    positions = {("start" if r["requested_index"] == 0 else "end" if r["requested_index"] == r["n_words"] else "mid")
                 for r in rows}
    assert positions == {"start", "mid", "end"}


# ---------------------------------------------------------------- IndicEmo-style set
INDICEMO_KEYS = {"id", "text", "language", "domain", "tone", "target_delivery", "intent"}
INDICEMO_SCRIPTS = {"Latin": "en", "Devanagari": "hi", "Telugu": "te", "Tamil": "ta", "Kannada": "kn",
                    "Bengali": "bn", "Gurmukhi": "pa"}
DELIVERIES = ("happy", "sad", "angry", "excited", "professional")
PER_DELIVERY = 20
MIN_LETTERS_PER_SCRIPT = 2  # a language counts as mixed in when at least a word's worth of its script is there
MIN_PROMPTS_PER_LANGUAGE = 15


def indicemo_languages(text: str) -> list[str]:
    """The languages a prompt mixes, read from its scripts (each of the seven has its own)."""
    return [INDICEMO_SCRIPTS.get(s, s) for s, n in script_counts(text).items() if n >= MIN_LETTERS_PER_SCRIPT]


def test_indicemo_set_fields_and_deliveries():
    rows = read(PROMPT_DIR / "indicemo_style.jsonl")
    assert len(rows) == len(DELIVERIES) * PER_DELIVERY
    assert Counter(r["tone"] for r in rows) == dict.fromkeys(DELIVERIES, PER_DELIVERY)
    for r in rows:
        assert set(r) == INDICEMO_KEYS, r["id"]
        assert r["target_delivery"] == r["tone"].capitalize() and r["id"].startswith(f"{r['tone']}_"), r["id"]
        assert r["domain"] == "code_switched" and len(r["intent"].split()) >= 5, r["id"]
        assert not TAG.search(r["text"]) and len(r["text"]) <= 200, r["id"]
    # The model gets the tone; a description would replace it (rumik_app.prompt accepts one or the other).
    assert all(prompt_request(p, seed=0).prompt() for p in load_prompts(PROMPT_DIR / "indicemo_style.jsonl"))


def test_indicemo_set_mixes_two_to_five_of_seven_languages_in_their_scripts():
    rows = read(PROMPT_DIR / "indicemo_style.jsonl")
    per_language = Counter()
    for r in rows:
        assert set(script_counts(r["text"])) <= set(INDICEMO_SCRIPTS), (r["id"], script_counts(r["text"]))
        langs = indicemo_languages(r["text"])
        assert 2 <= len(langs) <= 5, (r["id"], langs)
        assert r["language"] == INDICEMO_SCRIPTS[dominant_script(r["text"])], r["id"]  # the dominant one
        per_language.update(langs)
    assert set(per_language) == set(INDICEMO_SCRIPTS.values())
    assert min(per_language.values()) >= MIN_PROMPTS_PER_LANGUAGE, per_language
    sizes = Counter(len(indicemo_languages(r["text"])) for r in rows)
    assert set(sizes) == {2, 3, 4, 5}, sizes  # every mix size occurs
    for tone in DELIVERIES:  # and each delivery has Indic-only mixes (no English) and 4+ language mixes
        mine = [indicemo_languages(r["text"]) for r in rows if r["tone"] == tone]
        assert any("en" not in langs for langs in mine) and any(len(langs) >= 4 for langs in mine), tone


def test_indicemo_set_is_usable_by_the_rate_tab_and_campaigns():
    from webapp.campaign.data.definition import prompt_delivery
    from webapp.rate_tab import load_prompt_set

    items = load_prompt_set("indicemo_style")
    assert len(items) == 100 and Counter(i.target_delivery for i in items)["Professional"] == PER_DELIVERY
    assert all(prompt_delivery(r) == r["target_delivery"] for r in read(PROMPT_DIR / "indicemo_style.jsonl"))
