"""SSML input (`rumik_app.text.ssml`): each supported element, every refusal, XML attacks.

Expected words are the normaliser's own (indic-numtowords, CLDR, `rumik_app.text.data`) and
were read by eye; where a say-as has a typed equivalent the test also checks it against
`normalize_text`, and every say-as output must survive a second normalisation unchanged.

Run: .venv/bin/python -m pytest tests/rumik_app/test_ssml.py -q
"""

from __future__ import annotations

import tracemalloc

import pytest

from rumik_app.errors import PromptError
from rumik_app.prompt import validate_text
from rumik_app.text.normalize import normalize_text
from rumik_app.text.ssml import (
    MAX_BREAKS,
    MAX_DEPTH,
    MAX_ELEMENTS,
    MAX_SSML_BYTES,
    is_ssml,
    parse_ssml,
)
from rumik_app.text.ssml import (
    SsmlSegment as Seg,
)

# Attack documents must be refused within these bounds (observed: under 5 ms and 200 KiB).
ATTACK_PEAK_BYTES = 1024 * 1024


def speak(body: str, **attrs: str) -> str:
    extra = "".join(f' {k.replace("_", ":")}="{v}"' for k, v in attrs.items())
    return f"<speak{extra}>{body}</speak>"


def refused(doc: str, **kwargs) -> str:
    with pytest.raises(PromptError) as info:
        parse_ssml(doc, **kwargs)
    assert info.value.field == "text"
    return str(info.value)


# ---------------------------------------------------------------- is_ssml: plain text untouched


@pytest.mark.parametrize("text", [
    "<speak>Hello</speak>", "  \n<speak version=\"1.1\">x</speak>", "<speak/>",
    '<?xml version="1.0" encoding="UTF-8"?>\n<speak>x</speak>',
    '<speak xmlns="http://www.w3.org/2001/10/synthesis" xml:lang="hi-IN">x</speak>',
])
def test_is_ssml(text):
    assert is_ssml(text)


@pytest.mark.parametrize("text", [
    "Hello", "नमस्ते <laugh> दोस्त", "<laugh> hi", "Say <speak> now", "<speaker>x</speaker>", "<Speak>x</Speak>",
    "", "   ", "<!DOCTYPE speak><speak>x</speak>",
])
def test_plain_text_is_not_ssml(text):
    assert not is_ssml(text)


# ---------------------------------------------------------------- speak, text, whitespace


def test_speak_text_whitespace_collapsed():
    assert parse_ssml(speak("  Hello \n\t  world  ")) == [Seg("Hello world")]


def test_speak_attributes_and_namespace():
    doc = ('<?xml version="1.0"?><speak version="1.1" xmlns="http://www.w3.org/2001/10/synthesis" '
           'xml:lang="hi-IN">नमस्ते</speak>')
    assert parse_ssml(doc) == [Seg("नमस्ते", language="hi")]


def test_predefined_entities_are_text():
    assert parse_ssml(speak("Tom &amp; Jerry &quot;x&quot; &apos;y&apos;")) == [Seg("Tom & Jerry \"x\" 'y'")]


def test_literal_angle_brackets_refused():
    assert "literal <" in refused(speak("a &lt;laugh&gt; b"))
    assert "literal <" in refused(speak('<sub alias="&lt;b&gt;">b</sub>'))


def test_empty_document_refused():
    assert "no text" in refused(speak(""))
    assert "no text" in refused(speak('<break time="1s"/>'))


def test_root_must_be_speak():
    assert "root element must be <speak>" in refused("<p>hi</p>")


def test_not_well_formed():
    assert "not well-formed" in refused("<speak><s>x</speak>")
    assert "not well-formed" in refused(speak("&nbsp;"))


def test_surrogate_refused():
    with pytest.raises(PromptError, match="surrogate"):
        parse_ssml(speak("a\ud800b"))


# ---------------------------------------------------------------- break


@pytest.mark.parametrize("attrs, seconds", [
    ('time="300ms"', 0.3), ('time="1.5s"', 1.5), ('time="2 s"', 2.0), ('time="10s"', 10.0), ("", 0.75),
    ('strength="x-weak"', 0.25), ('strength="weak"', 0.5), ('strength="medium"', 0.75),
    ('strength="strong"', 1.0), ('strength="x-strong"', 1.25), ('time="200ms" strength="x-strong"', 0.2),
])
def test_break_cuts_with_pause(attrs, seconds):
    assert parse_ssml(speak(f"Hello <break {attrs}/> world")) == [Seg("Hello", pause_after_s=seconds), Seg("world")]


@pytest.mark.parametrize("attrs", ['strength="none"', 'time="0ms"'])
def test_zero_break_does_not_cut(attrs):
    assert parse_ssml(speak(f"Hello <break {attrs}/> world")) == [Seg("Hello world")]


def test_leading_trailing_and_consecutive_breaks():
    doc = speak('<break time="1s"/> Hi <break time="200ms"/><break time="300ms"/> there <break time="2s"/>')
    assert parse_ssml(doc) == [Seg("", pause_after_s=1.0), Seg("Hi", pause_after_s=0.5),
                               Seg("there", pause_after_s=2.0)]


@pytest.mark.parametrize("attrs, message", [
    ('time="10.5s"', "longer than 10 s"), ('time="11000ms"', "longer than 10 s"),
    ('time="3 minutes"', "300ms or 1.5s"), ('time="-1s"', "300ms or 1.5s"),
    ('strength="loud"', "none, x-weak, weak, medium, strong, x-strong"),
])
def test_break_bad_values(attrs, message):
    assert message in refused(speak(f"a <break {attrs}/> b"))


def test_break_count_and_total_bounded():
    assert f"more than {MAX_BREAKS}" in refused(speak('a <break time="10ms"/>' * (MAX_BREAKS + 1)))
    assert "add up to more than 60 s" in refused(speak('a <break time="10s"/>' * 7))


# ---------------------------------------------------------------- say-as


def say(kind: str, content: str, lang: str | None = None, fmt: str | None = None, **kwargs) -> str:
    f = f' format="{fmt}"' if fmt else ""
    doc = speak(f'<say-as interpret-as="{kind}"{f}>{content}</say-as>', **({"xml_lang": lang} if lang else {}))
    [segment] = parse_ssml(doc, **kwargs)
    return segment.text


SAY_AS = [
    ("en", "cardinal", None, "1234", "one thousand two hundred and thirty four"),
    ("en", "cardinal", None, "1,000,000", "one million"),
    ("en", "cardinal", None, "-3.5", "minus three point five"),
    ("en", "ordinal", None, "21", "twenty first"),
    ("en", "ordinal", None, "3rd", "third"),
    ("en", "digits", None, "2026", "two zero two six"),
    ("en", "characters", None, "abc", "A B C"),
    ("en", "spell-out", None, "R2-D2", "R two D two"),
    ("en", "date", None, "15/08/2026", "fifteenth August twenty twenty six"),
    ("en", "date", "mdy", "08/15/2026", "August fifteenth twenty twenty six"),
    ("en", "date", "ymd", "2026-08-15", "fifteenth August twenty twenty six"),
    ("en", "date", "md", "8/15", "August fifteenth"),
    ("en", "date", "dm", "15-08", "fifteenth August"),
    ("en", "time", None, "10:30 pm", "ten thirty PM"),
    ("en", "telephone", None, "+91 98765 43210", "plus nine one, nine eight seven six five, four three two one zero"),
    ("en", "telephone", None, "1800-123", "one eight zero zero, one two three"),
    ("en", "currency", None, "$4.99", "four dollars and ninety nine cents"),
    ("en", "currency", "INR", "2,50,000", "two lakh fifty thousand rupees"),
    ("hi", "cardinal", None, "1947", "एक हज़ार नौ सौ सैंतालीस"),  # a number, not the year उन्नीस सौ सैंतालीस
    ("hi", "cardinal", None, "2,50,000", "दो लाख पचास हज़ार"),
    ("hi", "cardinal", None, "२५", "पच्चीस"),
    ("hi", "ordinal", None, "5", "पाँचवाँ"),
    ("hi", "ordinal", None, "5वीं", "पाँचवीं"),
    ("hi", "digits", None, "2026", "दो शून्य दो छः"),
    ("hi", "characters", None, "क्षमा", "क्ष मा"),
    ("hi", "spell-out", None, "AB12", "A B एक दो"),
    ("hi", "date", None, "15/08/2026", "पंद्रह अगस्त दो हज़ार छब्बीस"),
    ("hi", "time", None, "10:30 am", "सुबह दस बजकर तीस मिनट"),
    ("hi", "telephone", None, "98765 43210", "नौ आठ सात छः पाँच, चार तीन दो एक शून्य"),
    ("hi", "currency", None, "₹12.50", "बारह रुपए पचास पैसे"),
    ("ta", "cardinal", None, "250", "இருநூற்று ஐம்பது"),
    ("ta", "ordinal", None, "10", "பத்தாவது"),
    ("ta", "date", None, "15/08/2026", "பதினைந்து ஆகஸ்ட் இரண்டாயிரத்து இருபத்து ஆறு"),
    ("ta", "time", None, "10:30", "பத்து மணி முப்பது நிமிடம்"),
    ("ta", "digits", None, "0987", "பூஜ்ஜியம் ஒன்பது எட்டு ஏழு"),
    ("ta", "currency", None, "₹500", "ஐநூறு ரூபாய்கள்"),
    ("bn", "cardinal", None, "৩৫", "পঁয়ত্রিশ"),
    ("bn", "ordinal", None, "4", "চতুর্থ"),
    ("bn", "digits", None, "০৯৮", "শূন্য নয় আট"),
]


@pytest.mark.parametrize("lang, kind, fmt, content, words", SAY_AS)
def test_say_as_words(lang, kind, fmt, content, words):
    assert say(kind, content, lang, fmt) == words
    assert normalize_text(words, lang) == words  # stable when the request normalises again


@pytest.mark.parametrize("lang, kind, content", [
    ("hi", "date", "15/08/2026"), ("ta", "time", "10:30"), ("en", "currency", "$4.99"), ("hi", "currency", "₹12.50"),
    ("en", "telephone", "+91 98765 43210"), ("hi", "cardinal", "2,50,000"), ("ta", "ordinal", "10வது"),
])
def test_say_as_reads_as_the_normaliser(lang, kind, content):
    assert say(kind, content, lang) == normalize_text(content, lang)


def test_say_as_language_from_script_and_base_language():
    assert parse_ssml(speak('मेरे पास <say-as interpret-as="cardinal">25</say-as> किताबें हैं')) == [
        Seg("मेरे पास पच्चीस किताबें हैं")]
    assert say("cardinal", "25", language="mr") == "पंचवीस"  # no letters: the base request's language
    assert say("cardinal", "25", language="ta") == "இருபத்து ஐந்து"
    assert say("cardinal", "25") == "twenty five"
    doc = speak('I have <say-as interpret-as="cardinal">25</say-as>')
    assert parse_ssml(doc, language="hi") == [Seg("I have twenty five")]  # Latin text: not Hindi


def test_say_as_left_as_typed_without_verified_words():
    assert say("cardinal", "25", "sd") == "25"


@pytest.mark.parametrize("kind, content", [
    ("cardinal", "abc"), ("cardinal", "1,2,3"), ("ordinal", "first"), ("digits", "12a"), ("characters", "...!"),
    ("date", "31/13/2026"), ("date", "tomorrow"), ("time", "25:00"), ("time", "soon"), ("telephone", "call me"),
    ("currency", "500"), ("currency", "lots"), ("currency", "₹1,2,3"),
])
def test_say_as_bad_content(kind, content):
    message = refused(speak(f'<say-as interpret-as="{kind}">{content}</say-as>'))
    assert f'<say-as interpret-as="{kind}"> needs' in message


@pytest.mark.parametrize("attrs, message", [
    ('interpret-as="unit"', "use one of characters, spell-out, cardinal, digits, ordinal, date, time"),
    ("", 'interpret-as="">: use one of'),
    ('interpret-as="cardinal" format="x"', "format is only for date and currency"),
    ('interpret-as="date" format="ydm"', "use one of dmy, mdy, ymd, dm, md"),
    ('interpret-as="currency" format="JPY"', "use one of INR, USD, EUR, GBP"),
])
def test_say_as_bad_attributes(attrs, message):
    assert message in refused(speak(f"<say-as {attrs}>5</say-as>"))


def test_say_as_date_format_needs_four_digit_year():
    assert "4-digit years" in refused(speak('<say-as interpret-as="date" format="dmy">15/08/26</say-as>'))


def test_say_as_content_bounded():
    assert "1 to 200 characters" in refused(speak(f'<say-as interpret-as="digits">{"1" * 201}</say-as>'))
    assert "1 to 200 characters" in refused(speak('<say-as interpret-as="digits"> </say-as>'))


# ---------------------------------------------------------------- sub, inline tags, p and s


def test_sub_alias_replaces_text():
    assert parse_ssml(speak('Visit <sub alias="World Wide Web">WWW</sub> now')) == [Seg("Visit World Wide Web now")]
    assert "non-empty alias" in refused(speak('<sub alias=" ">WWW</sub>'))


def test_inline_tags():
    assert parse_ssml(speak("Hello<laugh/>there <chuckle/> and <sigh/> bye")) == [
        Seg("Hello <laugh> there <chuckle> and <sigh> bye")]


def test_inline_tag_must_be_empty():
    assert "text inside <laugh> (write <laugh/>)" in refused(speak("<laugh>ha</laugh>"))
    assert "an element inside <sigh>" in refused(speak("<sigh><laugh/></sigh>"))
    assert "attribute loud on <laugh>" in refused(speak('<laugh loud="1"/>'))


def test_p_and_s_end_sentences():
    doc = speak("Intro <p><s>First</s><s>Really?</s></p><p>Third <laugh/></p> tail")
    assert parse_ssml(doc) == [Seg("Intro. First. Really? Third. <laugh> tail")]
    assert parse_ssml(speak("<s>नमस्ते</s><s>कैसे हो?</s>")) == [Seg("नमस्ते। कैसे हो?")]
    assert parse_ssml(speak("<s>سلام</s><s>کیسے ہو</s>", xml_lang="ur")) == [Seg("سلام۔ کیسے ہو۔", language="ur")]
    assert parse_ssml(speak('<s>Total <say-as interpret-as="cardinal">5</say-as></s>')) == [Seg("Total five.")]


# ---------------------------------------------------------------- prosody, voice, lang, merging


@pytest.mark.parametrize("rate, pace", [
    ("x-slow", "slow"), ("slow", "slow"), ("medium", "steady"), ("fast", "fast"), ("x-fast", "fast"),
    (" FAST ", "fast"), ("50%", "slow"), ("89%", "slow"), ("90%", "steady"), ("100%", "steady"),
    ("110%", "steady"), ("111%", "fast"), ("200%", "fast"), ("75.5%", "slow"),
])
def test_prosody_rate_to_pace(rate, pace):
    assert parse_ssml(speak(f'<prosody rate="{rate}">hi</prosody>')) == [Seg("hi", pace=pace)]


@pytest.mark.parametrize("rate", ["49%", "201%", "+10%", "-10%", "200wpm", "loud", "", "default", "1.2"])
def test_prosody_unmappable_rate(rate):
    message = refused(speak(f'<prosody rate="{rate}">hi</prosody>'))
    assert f'rate="{rate}"> cannot be mapped' in message
    assert "x-slow, slow, medium, fast, x-fast or 50% to 200%" in message


@pytest.mark.parametrize("attribute", ["pitch", "volume", "duration", "contour", "range"])
def test_prosody_other_attributes_refused(attribute):
    message = refused(speak(f'<prosody {attribute}="x" rate="fast">hi</prosody>'))
    assert f"attribute {attribute} on <prosody>" in message and "<prosody> (rate)" in message


def test_prosody_nesting():
    doc = speak('a <prosody rate="slow">b <prosody rate="fast">c</prosody> d</prosody> e')
    assert parse_ssml(doc) == [Seg("a"), Seg("b", pace="slow"), Seg("c", pace="fast"), Seg("d", pace="slow"),
                               Seg("e")]


def test_voice():
    doc = speak('Hi <voice name="zoya">there</voice> you')
    assert parse_ssml(doc) == [Seg("Hi"), Seg("there", voice="zoya"), Seg("you")]
    assert parse_ssml(doc, voices=("Ira", "Zoya"))[1] == Seg("there", voice="Zoya")
    message = refused(speak('<voice name="Bob">x</voice>'), voices=("Ira", "Zoya"))
    assert '<voice name="Bob">' in message and "Ira, Zoya" in message
    assert "needs a name" in refused(speak("<voice>x</voice>"))


def test_lang():
    doc = speak('Hi <lang xml:lang="hi-IN">नमस्ते <say-as interpret-as="cardinal">3</say-as></lang> there',
                xml_lang="en-IN")
    assert parse_ssml(doc) == [Seg("Hi", language="en"), Seg("नमस्ते तीन", language="hi"),
                               Seg("there", language="en")]
    assert parse_ssml(speak('<p xml:lang="ta">வணக்கம்</p>')) == [Seg("வணக்கம்.", language="ta")]
    assert "needs xml:lang" in refused(speak("<lang>x</lang>"))
    message = refused(speak("x", xml_lang="xx-YY"))
    assert 'xml:lang="xx-YY"' in message and "Hindi (hi)" in message


def test_same_settings_merge():
    doc = speak('<prosody rate="fast">a</prosody> <prosody rate="fast">b</prosody> <voice name="Ira">c</voice>'
                '<voice name="Ira"> d</voice>')
    assert parse_ssml(doc) == [Seg("a b", pace="fast"), Seg("c d", voice="Ira")]
    assert parse_ssml(speak('<prosody rate="fast">a <break time="1s"/></prosody><prosody rate="fast">b</prosody>')) \
        == [Seg("a", pace="fast", pause_after_s=1.0), Seg("b", pace="fast")]


def test_everything_together_is_valid_project_text():
    doc = speak('<p>नमस्ते <laugh/> <break time="400ms"/><voice name="Ira"><prosody rate="slow">आज '
                '<say-as interpret-as="date">15/08/2026</say-as> है</prosody></voice></p>'
                '<lang xml:lang="en-IN"><s>Call <say-as interpret-as="telephone">98765 43210</say-as></s>'
                '<s>Pay <say-as interpret-as="currency">₹500</say-as> <sigh/></s></lang>', xml_lang="hi-IN")
    segments = parse_ssml(doc)
    assert segments == [
        Seg("नमस्ते <laugh>", language="hi", pause_after_s=0.4),
        Seg("आज पंद्रह अगस्त दो हज़ार छब्बीस है।", voice="Ira", language="hi", pace="slow"),
        Seg("Call nine eight seven six five, four three two one zero. Pay five hundred rupees. <sigh>",
            language="en"),
    ]
    for segment in segments:
        assert validate_text(segment.text) == segment.text


# ---------------------------------------------------------------- unsupported elements and attributes


@pytest.mark.parametrize("body, name", [
    ('<audio src="a.wav"/>', "element <audio>"), ("<emphasis>x</emphasis>", "element <emphasis>"),
    ('<phoneme alphabet="ipa" ph="x">x</phoneme>', "element <phoneme>"), ('<mark name="m"/>', "element <mark>"),
    ("<w>x</w>", "element <w>"), ("<token>x</token>", "element <token>"), ("<desc>x</desc>", "element <desc>"),
    ('<lexicon uri="x"/>', "element <lexicon>"), ('<meta name="a" content="b"/>', "element <meta>"),
    ("<metadata/>", "element <metadata>"), ("<giggle/>", "element <giggle>"),
    ('<amazon:effect xmlns:amazon="https://amazon.com/ssml" name="whispered">x</amazon:effect>',
     "element <effect (namespace https://amazon.com/ssml)>"),
    ('<mstts:express-as xmlns:mstts="https://www.w3.org/2001/mstts" style="x">x</mstts:express-as>',
     "element <express-as (namespace https://www.w3.org/2001/mstts)>"),
    ('<xi:include xmlns:xi="http://www.w3.org/2001/XInclude" href="/etc/passwd"/>',
     "element <include (namespace http://www.w3.org/2001/XInclude)>"),
    ("<speak>x</speak>", "<speak> inside <speak>"),
])
def test_unsupported_element_refused_by_name(body, name):
    message = refused(speak(f"a {body} b"))
    assert f"unsupported {name}" in message and "Supported: <speak> (version, xml:lang), <break>" in message


@pytest.mark.parametrize("body, attribute, tag", [
    ('<p foo="1">x</p>', "foo", "p"), ('<s foo="1">x</s>', "foo", "s"),
    ('<break duration="1s"/>', "duration", "break"),
    ('<say-as interpret-as="date" detail="1">x</say-as>', "detail", "say-as"),
    ('<sub alias="a" foo="b">x</sub>', "foo", "sub"),
    ('<voice name="Ira" gender="female">x</voice>', "gender", "voice"),
    ('<voice name="Ira" age="30">x</voice>', "age", "voice"),
    ('<voice name="Ira" variant="2">x</voice>', "variant", "voice"),
    ('<lang xml:lang="hi" foo="1">x</lang>', "foo", "lang"),
    ('<chuckle x="1"/>', "x", "chuckle"), ('<p xml:space="preserve">x</p>', "xml:space", "p"),
])
def test_unsupported_attribute_refused_by_name(body, attribute, tag):
    assert f"attribute {attribute} on <{tag}>" in refused(speak(body))


def test_unsupported_speak_attributes():
    assert "attribute foo on <speak>" in refused('<speak foo="1">x</speak>')
    assert "attribute xml:base on <speak>" in refused('<speak xml:base="http://x">x</speak>')


def test_one_error_lists_every_problem():
    message = refused(speak('<audio src="x"/><emphasis>a</emphasis><prosody pitch="high">b</prosody>'))
    for name in ("element <audio>", "element <emphasis>", "attribute pitch on <prosody>"):
        assert name in message
    assert message.count("Supported:") == 1


# ---------------------------------------------------------------- XML attacks: refused fast, memory bounded


BILLION_LAUGHS = ('<?xml version="1.0"?><!DOCTYPE speak [<!ENTITY lol "lol">'
                  + "".join(f'<!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">'
                            for i in range(1, 10))
                  + "]><speak>&lol9;</speak>")
ATTACKS = {
    "billion laughs": (BILLION_LAUGHS, "DTD, entity declaration or external reference"),
    "external entity (XXE)": ('<!DOCTYPE speak [<!ENTITY xxe SYSTEM "file:///etc/passwd">]><speak>&xxe;</speak>',
                              "DTD, entity declaration or external reference"),
    "parameter entity": ('<!DOCTYPE speak [<!ENTITY % p SYSTEM "http://example.com/x.dtd"> %p;]><speak>x</speak>',
                         "DTD, entity declaration or external reference"),
    "external DTD": ('<!DOCTYPE speak SYSTEM "http://example.com/x.dtd"><speak>x</speak>',
                     "DTD, entity declaration or external reference"),
    "10,000 deep": (speak("<s>" * 10_000 + "x" + "</s>" * 10_000), "over 64 KB"),
    "10,000 deep, under the size bound": ("<speak>" + "<s>" * 10_000 + "x", f"nested more than {MAX_DEPTH} deep"),
    "20,000 deep, unsupported tags": ("<speak>" + "<a>" * 20_000, f"nested more than {MAX_DEPTH} deep"),
    "5 MB": (speak("a " * 2_500_000), "over 64 KB"),
    "5 MB of multi-byte text": (speak("नमस्ते " * 250_000), "over 64 KB"),
    "64 KB of characters, 192 KB of bytes": (speak("न" * (MAX_SSML_BYTES - 20)), "over 64 KB"),
    "too many elements": (speak("<laugh/>" * (MAX_ELEMENTS + 1)), f"more than {MAX_ELEMENTS} elements"),
}


@pytest.mark.parametrize("name", list(ATTACKS))
def test_attack_refused_with_bounded_memory(name):
    doc, message = ATTACKS[name]
    tracemalloc.start()
    try:
        with pytest.raises(PromptError, match=message):
            parse_ssml(doc)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < ATTACK_PEAK_BYTES, f"{name}: peak {peak / 1024:.0f} KiB"


def test_depth_bound_is_exact():
    assert parse_ssml("<speak>" + "<s>" * (MAX_DEPTH - 1) + "x" + "</s>" * (MAX_DEPTH - 1) + "</speak>") == [Seg("x.")]
    assert "nested more than" in refused("<speak>" + "<s>" * MAX_DEPTH + "x" + "</s>" * MAX_DEPTH + "</speak>")


def test_output_text_bounded():
    doc = speak(" ".join(f'<sub alias="{"w" * 900}">x</sub>' for _ in range(60)))
    assert "the limit is 50,000" in refused(doc)


def test_sentence_end_reaches_the_segment_before():
    assert parse_ssml(speak('<p>Hello <voice name="Ira">there</voice></p><p>Next</p>')) == [
        Seg("Hello"), Seg("there.", voice="Ira"), Seg("Next.")]
    assert parse_ssml(speak('Hello <break time="1s"/><p>World</p>')) == [
        Seg("Hello.", pause_after_s=1.0), Seg("World.")]


def test_comments_ignored_cdata_checked():
    assert parse_ssml(speak("a <!-- note --> b")) == [Seg("a b")]
    assert "literal <" in refused(speak("<![CDATA[<laugh>]]>"))


@pytest.mark.parametrize("doc", [
    speak("<s>a<laugh/></s>" * 495),
    speak("<s>" + "a " * 24_990 + '<say-as interpret-as="digits">1</say-as></s>'),
    speak('<prosody rate="fast">a</prosody><prosody rate="slow">b</prosody>' * 450),
    speak(('<say-as interpret-as="spell-out">' + "9" * 200 + "</say-as>") * 30),
])
def test_largest_legal_documents_parse(doc):  # how fast: benchmarks/text_bounds.py
    segments = parse_ssml(doc)
    assert all("\x00" not in segment.text for segment in segments)


def test_whitespace_costs_one_pass_and_a_declaration_is_read_only_at_the_start(monkeypatch):
    """64 KB of spaces cost seconds of CPU: the XML declaration's pattern was searched (at each
    space `\\s*` rescanned the rest of the run), and each <p/> walked back again over the spaces
    after the last spoken word. Now the declaration is matched at the start only (where XML allows
    one) and each stretch of text is walked back once."""
    from rumik_app.text import ssml

    walked: list[int] = []
    spoken_end = ssml._spoken_end

    def recording(text: str) -> int:
        end = spoken_end(text)
        walked.append(len(text) - end)
        return end

    monkeypatch.setattr(ssml, "_spoken_end", recording)
    spaces = " " * (MAX_SSML_BYTES - 8_000)
    assert parse_ssml(speak("a" + spaces + "<p/>" * 990)) == [Seg("a.")]
    assert parse_ssml(speak("a" + spaces + '<break time="1s"/>' + "<p/>" * 990)) == [Seg("a.", pause_after_s=1.0)]
    assert parse_ssml('<?xml version="1.0"?>' + spaces + speak("a")) == [Seg("a")]
    assert "not well-formed" in refused(" " * (MAX_SSML_BYTES - 1))
    assert "not well-formed" in refused(speak('a<?xml version="1.0"?>'))  # was cut out anywhere
    assert sum(walked) <= 3 * len(spaces)  # once per document, not once per <p/>
