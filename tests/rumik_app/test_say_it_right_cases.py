"""Hidden cases: what the model reads after lexicon, SSML and normalisation, exactly.

Each case is an SSML document in one language with a brands lexicon; the expected strings are
the spoken text of each part (and its pace and the pause after it), as a listener would want
them read. Run: .venv/bin/python -m pytest tests/rumik_app/test_say_it_right_cases.py -q
"""

from __future__ import annotations

import pytest

from rumik_app.engine.script import build_script
from rumik_app.text.lexicon_io import read_lexicon

BRANDS = read_lexicon("SBI\tएस बी आई\nUPI\tयू पी आई\nZomato\tज़ोमैटो\nHDFC\tH D F C\n", "tsv", name="brands")

CASES = [
    ("hi", '<speak>SBI से ₹2,50,000 <break time="300ms"/> <say-as interpret-as="date">15/08/2026</say-as> को UPI '
           'करें।</speak>',
     [("एस बी आई से दो लाख पचास हज़ार रुपए", None, 0.3), ("पंद्रह अगस्त दो हज़ार छब्बीस को यू पी आई करें।", None, 0.0)]),
    ("en", '<speak>Order from Zomato at <say-as interpret-as="time">7 pm</say-as>. <break/> HDFC pays 5%.</speak>',
     [("Order from ज़ोमैटो at seven PM.", None, 0.75), ("H D F C pays five per cent.", None, 0.0)]),
    ("ta", '<speak><lang xml:lang="ta-IN">விலை <say-as interpret-as="cardinal">250</say-as> ரூபாய்</lang></speak>',
     [("விலை இருநூற்று ஐம்பது ரூபாய்", None, 0.0)]),
    ("bn", '<speak>আমি <say-as interpret-as="ordinal">3</say-as> বার এসেছি। <sub alias="স্টেট ব্যাংক">SBI</sub></speak>',
     [("আমি তৃতীয় বার এসেছি। স্টেট ব্যাংক", None, 0.0)]),
    ("mr", '<speak><prosody rate="slow">मी 12 वाजता UPI वापरतो</prosody></speak>',
     [("मी बारा वाजता यू पी आई वापरतो", "slow", 0.0)]),
    ("te", '<speak>నా ఫోన్ <say-as interpret-as="telephone">+91 98765 43210</say-as></speak>',
     [("నా ఫోన్ ప్లస్ తొమ్మిది ఒకటి, తొమ్మిది ఎనిమిది ఏడు ఆరు ఐదు, నాలుగు మూడు రెండు ఒకటి సున్నా", None, 0.0)]),
    ("gu", '<speak>કિંમત <say-as interpret-as="currency">₹500</say-as> છે <laugh/></speak>',
     [("કિંમત પાંચ સો રૂપિયા છે <laugh>", None, 0.0)]),
]


@pytest.mark.parametrize("language, ssml, expected", CASES, ids=[case[0] for case in CASES])
def test_the_spoken_text_of_each_part_is_exactly_what_a_listener_wants(language, ssml, expected):
    parts = build_script({"text": ssml, "language": language, "lexicons": (BRANDS,), "seed": 1})
    got = [(part.request.spoken_text(), part.request.pace, part.pause_after_s) for part in parts if part.request]
    assert got == expected
