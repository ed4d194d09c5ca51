"""Pronunciation lexicons (`rumik_app.text.lexicon`): formats, matching, bounds, hostile XML.

The table of sentences at the end is what a user hears: `apply_lexicons` then `normalize_text`
in the request's language, compared exactly. Expected strings were written by hand (the alias
in place of the word, numbers in words as the normaliser reads them) and then confirmed.

Run: .venv/bin/python -m pytest tests/rumik_app/test_lexicon.py -q
"""

from __future__ import annotations

import dataclasses
import gc
import json
import random
import tracemalloc
import unicodedata

import pytest

from rumik_app.errors import PromptError
from rumik_app.text import lexicon as lexicon_module
from rumik_app.text.lexicon import (
    MAX_ALIAS_CHARS,
    MAX_ENTRIES,
    MAX_GRAPHEME_CHARS,
    MAX_LEXICON_BYTES,
    MAX_LEXICONS,
    Lexicon,
    LexiconEntry,
    apply_lexicons,
    check_lexicons,
    lexicon_from_dict,
    lexicon_to_dict,
)
from rumik_app.text.lexicon_io import load_lexicon, read_lexicon, sniff_format, to_json, to_pls, to_tsv
from rumik_app.text.normalize import normalize_text

E = LexiconEntry
PLS_HEAD = '<lexicon version="1.0" xmlns="http://www.w3.org/2005/01/pronunciation-lexicon" alphabet="ipa"'


def lex(*entries: LexiconEntry, name: str = "test") -> Lexicon:
    return Lexicon(name, entries)


def say(text: str, *entries: LexiconEntry, language: str | None = None) -> str:
    return apply_lexicons(text, [lex(*entries)], language)


# ---------------------------------------------------------------------------------------
# Formats

TRICKY = lex(
    E("grapheme", "the first entry is not a TSV header"),
    E("SBI", "एस बी आई", languages=("hi",)),
    E("AT&T", 'ए टी "एंड" टी\'s', languages=("hi", "mr")),
    E("#IPL", "हैशटैग आई पी एल", case_sensitive=True),
    E("bank", "बैंक", whole_word=False),
    E("क्षत्रिय", "क्षत्रिय", languages=("mr",), case_sensitive=True, whole_word=False),
    E("Thiruvananthapuram", "திருவனந்தபுரம்", languages=("ta", "ml")),
    E("a, b", "x; y = z & w"),
    name="tricky & \"quoted\"",
)
ONE_LANGUAGE = lex(E("SBI", "एस बी आई", languages=("hi",)), E("UPI", "यू पी आई", languages=("hi",)), name="hi only")


@pytest.mark.parametrize("lexicon", [TRICKY, ONE_LANGUAGE], ids=["mixed", "one-language"])
@pytest.mark.parametrize("write, fmt", [(to_pls, "pls"), (to_tsv, "tsv"), (to_json, "json")])
def test_each_format_round_trips_to_the_same_entries(lexicon, write, fmt):
    text = write(lexicon)
    for data in (text, text.encode("utf-8"), "\ufeff" + text):
        assert sniff_format(data) == fmt
        back = read_lexicon(data)
        assert back.entries == lexicon.entries
        assert back.name == ("lexicon" if fmt == "tsv" else lexicon.name)  # TSV carries no name
    assert read_lexicon(text, fmt, name="mine").name == "mine"
    assert write(read_lexicon(text)) == text


def test_pls_of_one_language_uses_xml_lang():
    assert 'xml:lang="hi"' in to_pls(ONE_LANGUAGE) and "rumik:languages" not in to_pls(ONE_LANGUAGE)


def test_files_by_suffix(tmp_path):
    for suffix, write in ((".pls", to_pls), (".xml", to_pls), (".tsv", to_tsv), (".json", to_json), (".txt", to_tsv)):
        path = tmp_path / f"brands{suffix}"
        path.write_text(write(TRICKY), encoding="utf-8")
        loaded = load_lexicon(path)
        assert loaded.entries == TRICKY.entries
        assert loaded.name == ("brands" if write is to_tsv else TRICKY.name)
    with pytest.raises(PromptError, match="Cannot read lexicon file") as exc:
        load_lexicon(tmp_path / "missing.pls")
    assert exc.value.field == "lexicon"


def test_a_w3c_pls_lexicon():
    pls = f"""<?xml version="1.0" encoding="UTF-8"?>
    {PLS_HEAD.replace('"ipa"', '"x-sampa"')} xml:lang="hi-IN">
      <meta name="author" content="bank"/>
      <lexeme><grapheme>SBI</grapheme><grapheme orthography="standard">S.B.I.</grapheme>
        <alias>एस बी आई</alias></lexeme>
      <lexeme><grapheme>tomato</grapheme><phoneme>t@meItoU</phoneme><alias>टमाटर</alias>
        <alias prefer="true">टोमैटो</alias><example>tomato soup</example></lexeme>
    </lexicon>"""
    lexicon = read_lexicon(pls, name="bank")
    assert lexicon.entries == (E("SBI", "एस बी आई", ("hi",)), E("S.B.I.", "एस बी आई", ("hi",)),
                               E("tomato", "टोमैटो", ("hi",)))
    assert read_lexicon(pls.replace('xml:lang="hi-IN"', 'xml:lang="mul"')).entries[0].languages == ()


def test_tsv_layout():
    tsv = "SBI\tएस बी आई\n\n  \nHDFC\tएच डी एफ सी\thi, Marathi\tcase-sensitive, inside-words\r\nUPI\tयू पी आई\t\t\n"
    assert read_lexicon(tsv, "tsv").entries == (
        E("SBI", "एस बी आई"), E("HDFC", "एच डी एफ सी", ("hi", "mr"), case_sensitive=True, whole_word=False),
        E("UPI", "यू पी आई"))


def test_phoneme_only_pls_is_refused_by_name():
    pls = (f'{PLS_HEAD} xml:lang="en-US"><lexeme><grapheme>tomato</grapheme><phoneme>təˈmɑːtoʊ</phoneme>'
           "</lexeme></lexicon>")
    with pytest.raises(PromptError, match=r"lexeme 1 \('tomato'\) gives a <phoneme> but no <alias>: this model "
                                          r"reads text, not phonemes") as exc:
        read_lexicon(pls)
    assert exc.value.field == "lexicon"


# ---------------------------------------------------------------------------------------
# Matching

def test_longest_match_first_then_first_lexicon():
    entries = (E("New", "न्यू"), E("New Delhi", "नई दिल्ली"), E("Delhi", "देहली"))
    assert say("New Delhi and New York, Delhi", *entries) == "नई दिल्ली and न्यू York, देहली"
    first, second = lex(E("SBI", "first")), lex(E("sbi", "second"), E("SBI Card", "card"))
    assert apply_lexicons("SBI and SBI Card", [first, second]) == "first and card"
    assert apply_lexicons("SBI", [second, first]) == "second"
    assert say("SBI", E("SBI", "one"), E("SBI", "two")) == "one"  # in a lexicon, the first entry


def test_aliases_are_not_matched_again():
    assert say("A B", E("A", "B"), E("B", "C")) == "B C"


@pytest.mark.parametrize("grapheme, text", [
    ("क", "क्षमा"),      # a consonant that is half of a conjunct (क्ष)
    ("क्", "क्षमा"),     # the consonant with its virama, still inside the conjunct
    ("क", "कि"),         # a consonant without its vowel sign
    ("कि", "कीमत"),      # a different vowel sign
    ("ক", "ক্ষমা"),      # Bengali conjunct
    ("க", "கி"),         # Tamil vowel sign
    ("స", "స్త్రీ"),        # Telugu conjunct
    ("Jose", "Jose\u0301"),  # Latin letter with a combining accent (typed decomposed: read as NFC é)
    ("x", "x\u0301y"),       # a letter with a mark that has no precomposed form
])
def test_an_entry_never_matches_part_of_a_grapheme_cluster(grapheme, text):
    assert say(text, E(grapheme, "X", whole_word=False)) == unicodedata.normalize("NFC", text)


def test_whole_clusters_match_inside_words_when_asked():
    assert say("कमल क्षमा", E("क", "का", whole_word=False)) == "कामल क्षमा"
    assert say("कमल क", E("क", "का")) == "कमल का"  # whole word: only the lone letter


def test_case_rules():
    iphone = E("iPhone", "आईफ़ोन")
    assert say("iPhone IPHONE iphone", iphone) == "आईफ़ोन आईफ़ोन आईफ़ोन"
    us = E("US", "यू एस", case_sensitive=True)
    assert say("US visa for us", us) == "यू एस visa for us"
    assert say("ΟΔΟΣ", E("οδος", "road")) == "road"  # case-folded, final sigma included
    assert say("शर्मा", E("शर्मा", "Sharma")) == "Sharma"  # scripts without case compare as typed


def test_whole_word():
    sbi = E("SBI", "एस बी आई")
    assert say("SBI, (SBI) SBI.", sbi) == "एस बी आई, (एस बी आई) एस बी आई."
    for text in ("SBIcard", "mySBI", "SBI2", "SBI_x", "SBIका", "बैंकSBI"):
        assert say(text, sbi) == text, text
    assert say("netbanking", E("bank", "बैंक", whole_word=False)) == "netबैंकing"
    assert say("बैंकों में", E("बैंक", "bank")) == "बैंकों में"  # a word with a suffix is another word


def test_language_scope():
    hi, mr = E("SBI", "एस बी आई", ("hi",)), E("SBI", "एस बी आय", ("mr",))
    both, anywhere = [lex(hi, mr)], [lex(E("UPI", "यू पी आई"))]
    assert apply_lexicons("माझे SBI खाते", both, "mr") == "माझे एस बी आय खाते"
    assert apply_lexicons("मेरा SBI खाता", both, "Hindi") == "मेरा एस बी आई खाता"
    assert apply_lexicons("my SBI account", both, "en") == "my SBI account"
    # No language: the text's main script decides; both apply to Devanagari, the first listed wins.
    assert apply_lexicons("मेरा SBI खाता", both, None) == "मेरा एस बी आई खाता"
    assert apply_lexicons("my SBI account", both, None) == "my SBI account"
    assert apply_lexicons("UPI", anywhere, "ta") == apply_lexicons("UPI", anywhere, None) == "यू पी आई"


def test_inline_tags_are_never_altered():
    entries = (E("laugh", "हँसी"), E("sigh", "आह", whole_word=False), E("h", "H", whole_word=False))
    assert say("laugh <laugh> sighs <sigh> <chuckle>", *entries) == "हँसी <laugh> आहs <sigh> <chuckle>"
    assert say("SBI<laugh>SBI", E("SBI", "S B I")) == "S B I<laugh>S B I"  # a tag is not a word character


def test_a_lexicon_beats_the_normalisers_abbreviations():
    doctor = E("Dr.", "डॉक्टर", ("hi",))
    assert normalize_text("Dr. शर्मा आज आएंगे", "hi") == "Doctor शर्मा आज आएंगे"  # the built-in
    assert normalize_text(say("Dr. शर्मा आज आएंगे", doctor, language="hi"), "hi") == "डॉक्टर शर्मा आज आएंगे"
    versus = E("vs.", "बनाम")
    assert normalize_text(say("भारत vs. पाकिस्तान", versus), None) == "भारत बनाम पाकिस्तान"


def test_an_alias_with_numbers_is_read_as_words():
    assert normalize_text(say("कल T20 मैच है", E("T20", "टी 20"), language="hi"), "hi") == "कल टी बीस मैच है"
    assert normalize_text(say("Open 24x7", E("24x7", "24 by 7")), "en") == "Open twenty four by seven"


def test_thousands_of_entries_build_one_table_once_and_scan_the_text_once(monkeypatch):
    """A lexicon's table is built once (kept with the lexicon), and the scan looks up at most one
    table walk per grapheme cluster, so the work is linear in the text whatever the entry count.
    The time it takes is benchmarks/text_bounds.py's to measure, not a test's."""
    rng = random.Random(38)
    words = list(dict.fromkeys("".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 9)))
                                for _ in range(8_000)))[:MAX_ENTRIES]
    big = lex(*(E(w, w.upper() + " 1") for w in words))
    text = " ".join(rng.choice(words) for _ in range(1_000))[:4_000]
    walks, builds = [], []
    longest, build = lexicon_module._Matcher._longest, lexicon_module._Table.__init__
    monkeypatch.setattr(lexicon_module._Matcher, "_longest", lambda self, *a: walks.append(1) or longest(self, *a))
    monkeypatch.setattr(lexicon_module._Table, "__init__", lambda self, *a: builds.append(1) or build(self, *a))
    first = apply_lexicons(text, [big], "en")
    again = apply_lexicons(text, [big], "en")
    assert first == again and first != text and len(words) == MAX_ENTRIES
    assert len(builds) == 1  # built once, reused
    assert 0 < len(walks) <= 2 * len(text)  # one walk per matched-start cluster, both calls


def _long_words(count: int, seed: int) -> Lexicon:
    """`count` distinct 100-letter words (the longest graphemes), each said as "x"."""
    rng = random.Random(seed)
    words = {"".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(MAX_GRAPHEME_CHARS))
             for _ in range(count)}
    return lex(*(E(word, "x") for word in words), name=f"long-{seed}")


def test_a_lexicons_table_is_about_its_size_built_once_in_any_order_and_goes_with_it():
    """Lexicons of long words cost memory in proportion to their text, once per lexicon: a request
    naming them in another order (or another key's request) builds nothing, and a deleted lexicon
    takes its table with it. A trie of one dict per letter took ~110 MB per 5,000 such words and
    was built again, and kept, for every order (16 sets shared by every key: gigabytes)."""
    first, second = _long_words(2_000, 1), _long_words(2_000, 2)
    text = f"say {first.entries[7].grapheme} and {second.entries[3].grapheme} now"
    chars = sum(len(e.grapheme) + len(e.alias) for lexicon in (first, second) for e in lexicon.entries)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        assert apply_lexicons(text, [first, second], "en") == "say x and x now"
        grown = tracemalloc.get_traced_memory()[0] - before
        assert apply_lexicons(text, [second, first], "en") == "say x and x now"
        assert apply_lexicons(text, [second], "en") == f"say {first.entries[7].grapheme} and x now"
        regrown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 8 * chars, f"{grown:,} bytes of tables for {chars:,} characters of lexicons"
    assert regrown - grown < chars // 10  # one table per lexicon, whatever the order
    held = len(lexicon_module._TABLES)
    del first, second
    gc.collect()
    assert len(lexicon_module._TABLES) == held - 2  # deleted lexicons leave nothing behind


def test_lexicons_are_hashable_and_survive_a_dict_round_trip():
    assert hash(TRICKY) == hash(Lexicon(TRICKY.name, list(TRICKY.entries))) and {TRICKY, TRICKY} == {TRICKY}
    assert check_lexicons([dataclasses.asdict(TRICKY)]) == (TRICKY,)  # SynthesisRequest(**req.to_dict())
    assert lexicon_from_dict(lexicon_to_dict(TRICKY)) == TRICKY
    assert check_lexicons(None) == () and check_lexicons(TRICKY) == (TRICKY,)
    assert E(" SBI ", "e\u0301k", "hi,mr") == E("SBI", "ék", ("hi", "mr"))  # stripped, NFC, codes


# ---------------------------------------------------------------------------------------
# Bounds and bad input: one PromptError naming the limit or the place

def _entries(n: int) -> list[dict]:
    return [{"grapheme": f"w{i}", "alias": "x"} for i in range(n)]


@pytest.mark.parametrize("make, message", [
    (lambda: lex(*(E(f"w{i}", "x") for i in range(MAX_ENTRIES + 1))), "more than 5,000 entries"),
    (lambda: read_lexicon(json.dumps({"entries": _entries(MAX_ENTRIES + 1)})), "more than 5,000 entries"),
    (lambda: E("x" * (MAX_GRAPHEME_CHARS + 1), "x"), "grapheme is 101 characters; the limit is 100"),
    (lambda: E("x", "y" * (MAX_ALIAS_CHARS + 1)), "alias is 301 characters; the limit is 300"),
    (lambda: read_lexicon("a\tb\n" * (MAX_LEXICON_BYTES // 4 + 1)), "over 1,000,000 bytes"),
    (lambda: check_lexicons([TRICKY] * (MAX_LEXICONS + 1)), "at most 8 lexicons; this one has 9"),
    (lambda: apply_lexicons("a a a", [lex(E("a", "y" * 300))], max_chars=500), "grows past 500 characters"),
    (lambda: E("", "x"), "grapheme is empty; give the word to replace"),
    (lambda: E("SBI", "  "), "alias is empty; give the text to say instead"),
    (lambda: E("SBI", "एस\nबी"), r"U\+000A at position 3"),
    (lambda: E("SBI", "हा <laugh>"), "inline tags"),
    (lambda: E("a<b", "x"), "the grapheme has '<' or '>'"),
    (lambda: E("\u093f", "x"), "starts with a combining mark"),
    (lambda: E("SBI", "x", ("xx",)), "Unknown language 'xx'"),
    (lambda: E("SBI", "x", case_sensitive="yes"), "case_sensitive must be true or false"),
    (lambda: read_lexicon("SBI एस बी आई\n", "tsv"), "TSV line 1 has 1 column"),
    (lambda: read_lexicon("a\tb\nSBI\tx\t\tbold\n", "tsv"), "TSV line 2: unknown flag 'bold'"),
    (lambda: read_lexicon("a\tb\nc\t\n", "tsv"), r"line 2: Lexicon entry 'c': the alias is empty"),
    (lambda: read_lexicon(b"SBI\t\xff\n", "tsv"), "not UTF-8"),
    (lambda: read_lexicon("grapheme\talias\n"), "has no entries"),
    (lambda: read_lexicon('{"entries": [}'), "not valid JSON"),
    (lambda: read_lexicon('{"entries": [{"grapheme": "a", "alais": "b"}]}'), "entry 1 has an unknown key 'alais'"),
    (lambda: read_lexicon('{"entries": [{"grapheme": "a"}]}'), "entry 1 has no 'alias'"),
    (lambda: read_lexicon('{"lexicon": []}'), "no key 'lexicon'"),
    (lambda: read_lexicon("[" * 100_000 + "]" * 100_000), "JSON lexicon nests too deeply"),
    (lambda: check_lexicons("banks.pls"), "must be a list of lexicons; read_lexicon makes one"),
    (lambda: read_lexicon("<lexicon><lexeme><grapheme>a</grapheme>"), "not well-formed XML"),
    (lambda: read_lexicon("<speak>hi</speak>"), "not a PLS lexicon"),
    (lambda: read_lexicon(f'{PLS_HEAD} xml:lang="fr-FR"><lexeme><grapheme>a</grapheme><alias>b</alias></lexeme>'
                          "</lexicon>"), "xml:lang 'fr-FR' is not a language this model speaks"),
    (lambda: read_lexicon(f'{PLS_HEAD} xml:lang="hi"><lexeme><alias>b</alias></lexeme></lexicon>'), "no <grapheme>"),
    (lambda: read_lexicon(b"tsv", "csv"), "Unknown lexicon format 'csv'"),
])
def test_bounds_and_bad_input_give_one_clear_error(make, message):
    with pytest.raises(PromptError, match=message) as exc:
        make()
    assert exc.value.field == "lexicon" and "\n" not in str(exc.value)


def test_a_file_over_the_limit_is_not_read_whole(tmp_path):
    path = tmp_path / "huge.tsv"
    path.write_bytes(b"a\tb\n" * (5 * MAX_LEXICON_BYTES // 4))
    tracemalloc.start()
    try:
        with pytest.raises(PromptError, match="over 1,000,000 bytes"):
            load_lexicon(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * MAX_LEXICON_BYTES, peak  # 1 MB read of a 5 MB file


# ---------------------------------------------------------------------------------------
# Hostile XML: refused quickly, with bounded memory

BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE lexicon [<!ENTITY lol "lol">""" + "".join(
    f'<!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">' for i in range(1, 10)) + """]>
<lexicon version="1.0" xmlns="http://www.w3.org/2005/01/pronunciation-lexicon" alphabet="ipa" xml:lang="en">
<lexeme><grapheme>a</grapheme><alias>&lol9;</alias></lexeme></lexicon>"""
EXTERNAL_ENTITY = """<?xml version="1.0"?>
<!DOCTYPE lexicon [<!ENTITY secret SYSTEM "file:///etc/passwd">]>
<lexicon version="1.0" xmlns="http://www.w3.org/2005/01/pronunciation-lexicon" alphabet="ipa" xml:lang="en">
<lexeme><grapheme>a</grapheme><alias>&secret;</alias></lexeme></lexicon>"""
EXTERNAL_DTD = '<?xml version="1.0"?><!DOCTYPE lexicon SYSTEM "http://example.com/evil.dtd"><lexicon/>'
QUADRATIC = ('<!DOCTYPE lexicon [<!ENTITY a "' + "x" * 50_000 + '">]><lexicon>' + "&a;" * 10_000 + "</lexicon>")
DEEP = f'{PLS_HEAD} xml:lang="en"><lexeme>' + "<x>" * 10_000 + "</x>" * 10_000 + "</lexeme></lexicon>"
DEEPEST = "<a>" * 140_000 + "</a>" * 140_000  # as deep as 1 MB allows
FIVE_MB = (f'{PLS_HEAD} xml:lang="en">' + "<lexeme><grapheme>a</grapheme><alias>b</alias></lexeme>" * 95_000
           + "</lexicon>")
ATTACKS = {"billion-laughs": (BILLION_LAUGHS, "DTD or entities"),
           "external-entity": (EXTERNAL_ENTITY, "DTD or entities"), "external-dtd": (EXTERNAL_DTD, "DTD or entities"),
           "quadratic": (QUADRATIC, "DTD or entities"), "10k-deep": (DEEP, "more than 32 deep"),
           "140k-deep": (DEEPEST, "more than 32 deep"), "5mb": (FIVE_MB, "over 1,000,000 bytes")}


@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "bytes"])
@pytest.mark.parametrize("attack", ATTACKS)
def test_xml_attacks_are_refused_in_bounded_memory(attack, as_bytes):
    document, message = ATTACKS[attack]
    document = document.encode() if as_bytes else document
    read_lexicon(to_pls(ONE_LANGUAGE))  # defusedxml imported before measuring
    tracemalloc.start()
    try:
        with pytest.raises(PromptError, match=message):
            read_lexicon(document, "pls")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20, f"peak {peak / 2**20:.1f} MiB"  # ~1.8 MiB for the deepest, the rest far less


# ---------------------------------------------------------------------------------------
# What a user hears: apply_lexicons, then normalize_text in the request's language

BRANDS = Lexicon("brands", (
    E("SBI", "एस बी आई", ("hi",)), E("SBI", "एस बी आय", ("mr",)), E("SBI", "எஸ் பி ஐ", ("ta",)),
    E("UPI", "यू पी आई", ("hi", "mr")), E("UPI", "యూ పీ ఐ", ("te",)),
    E("HDFC", "ஹெச் டி எஃப் சி", ("ta",)), E("HDFC", "एच डी एफ सी", ("hi",)),
    E("iPhone", "আইফোন", ("bn",)), E("iPhone", "आईफ़ोन", ("hi",)),
    E("Zomato", "zoh-MAA-toh", ("en",)), E("Zomato", "ज़ोमैटो", ("hi",)),
    E("Thiruvananthapuram", "तिरुवनंतपुरम", ("hi",)), E("Thiruvananthapuram", "തിരുവനന്തപുരം", ("ml",)),
    E("Bengaluru", "ಬೆಂಗಳೂರು", ("kn",)), E("4G", "फ़ोर जी", ("hi",)), E("Dr.", "ডাক্তার", ("bn",)),
))
HEARD = [
    ("hi", "मेरे SBI खाते से UPI द्वारा ₹500 भेजे", "मेरे एस बी आई खाते से यू पी आई द्वारा पाँच सौ रुपए भेजे"),
    ("hi", "Thiruvananthapuram से मेरी flight 10:30 बजे है", "तिरुवनंतपुरम से मेरी flight दस बजकर तीस मिनट है"),
    ("hi", "Zomato से 2 pizza मँगाए, iPhone पर", "ज़ोमैटो से दो pizza मँगाए, आईफ़ोन पर"),
    ("hi", "HDFC का 4G नेटवर्क नहीं", "एच डी एफ सी का फ़ोर जी नेटवर्क नहीं"),
    ("mr", "माझे SBI खाते 3 वर्षांचे आहे", "माझे एस बी आय खाते तीन वर्षांचे आहे"),
    ("mr", "UPI ने ₹20 पाठवले", "यू पी आई ने वीस रुपये पाठवले"),
    ("ta", "நான் HDFC வங்கியில் 2 கணக்குகள் வைத்திருக்கிறேன்",
     "நான் ஹெச் டி எஃப் சி வங்கியில் இரண்டு கணக்குகள் வைத்திருக்கிறேன்"),
    ("ta", "SBI ATM 24 மணி நேரம் திறந்திருக்கும்", "எஸ் பி ஐ ATM இருபத்து நான்கு மணி நேரம் திறந்திருக்கும்"),
    ("bn", "আমার iPhone 15 হারিয়ে গেছে", "আমার আইফোন পনেরো হারিয়ে গেছে"),
    ("bn", "Dr. সেন আজ আসবেন", "ডাক্তার সেন আজ আসবেন"),
    ("te", "నా UPI ద్వారా ₹250 పంపాను", "నా యూ పీ ఐ ద్వారా రెండు వందల యాభై రూపాయలు పంపాను"),
    ("en", "Order on Zomato by 7 pm <laugh>", "Order on zoh-MAA-toh by seven PM <laugh>"),
    ("en", "Dr. Rao moved to Thiruvananthapuram", "Doctor Rao moved to Thiruvananthapuram"),
    ("ml", "Thiruvananthapuram 5 km അകലെ", "തിരുവനന്തപുരം അഞ്ച് കിലോമീറ്റർ അകലെ"),
    ("kn", "Bengaluru ನಲ್ಲಿ 3 ದಿನ", "ಬೆಂಗಳೂರು ನಲ್ಲಿ ಮೂರು ದಿನ"),
    (None, "मेरा SBI खाता और UPI", "मेरा एस बी आई खाता और यू पी आई"),
]


@pytest.mark.parametrize("language, typed, expected", HEARD)
def test_what_a_user_hears(language, typed, expected):
    assert normalize_text(apply_lexicons(typed, [BRANDS], language), language) == expected
