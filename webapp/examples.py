"""Example texts for the Synthesise tab, written for this project (not taken from any data set).

Library module (no command line). `LANGUAGE_EXAMPLES` has one short, everyday line per
language in its usual script (all 22 scheduled languages and English); choosing a language
in the app loads it. `SHOWCASE` holds the clickable examples: the seven benchmark languages
(English, Hindi, Telugu, Tamil, Kannada, Bengali, Punjabi) with a tone each, and
code-switched text with inline tags.
"""

from __future__ import annotations

from rumik_app.text.languages import LANGUAGES, dominant_script, get_language

DEFAULT_LANGUAGE = "hi"

LANGUAGE_EXAMPLES: dict[str, str] = {
    "as": "নমস্কাৰ! আজি বতৰটো বৰ ধুনীয়া, বলা অলপ ফুৰি আহোঁ।",
    "bn": "শুভ সকাল! আজ আবহাওয়াটা খুব সুন্দর, চলো একটু হাঁটতে যাই।",
    "brx": "खुलुमबाय! नों माबोरै दं?",
    "doi": "नमस्ते! तुंदा केह् हाल ऐ? अज्ज मौसम बड़ा खरा ऐ।",
    "gu": "નમસ્તે! આજે હવામાન ખૂબ સરસ છે, ચાલો થોડું ફરવા જઈએ.",
    "hi": "नमस्ते! आज मौसम बहुत सुहाना है, चलो बाहर टहलने चलते हैं।",
    "kn": "ನಮಸ್ಕಾರ! ಇಂದು ಹವಾಮಾನ ತುಂಬಾ ಚೆನ್ನಾಗಿದೆ, ಸ್ವಲ್ಪ ನಡೆಯೋಣ ಬನ್ನಿ.",
    "ks": "آداب! تہی چھوا ٹھیک؟ اَز چھُ موسم واریاہ جان۔",
    "kok": "नमस्कार! तुमी कशें आसात? आयज हवामान बरें आसा.",
    "mai": "प्रणाम! अहाँ केहन छी? आइ मौसम बड्ड नीक अछि।",
    "ml": "നമസ്കാരം! ഇന്ന് കാലാവസ്ഥ വളരെ നല്ലതാണ്, നമുക്ക് കുറച്ച് നടക്കാം.",
    "mni": "ꯈꯨꯔꯨꯝꯖꯔꯤ! ꯑꯗꯣꯝ ꯀꯔꯝꯅ ꯂꯩꯔꯤꯕꯒꯦ?",
    "mr": "नमस्कार! आज हवामान खूप छान आहे, चला थोडं फिरायला जाऊ या.",
    "ne": "नमस्ते! आज मौसम धेरै राम्रो छ, हिँड्न जाऔँ।",
    "or": "ନମସ୍କାର! ଆଜି ପାଗ ବହୁତ ସୁନ୍ଦର, ଚାଲ ଟିକେ ବୁଲିଯିବା।",
    "pa": "ਸਤ ਸ੍ਰੀ ਅਕਾਲ! ਅੱਜ ਮੌਸਮ ਬਹੁਤ ਵਧੀਆ ਹੈ, ਚਲੋ ਥੋੜ੍ਹਾ ਘੁੰਮ ਆਈਏ।",
    "sa": "नमो नमः! अद्य वातावरणं अतीव सुन्दरम् अस्ति।",
    "sat": "ᱡᱚᱦᱟᱨ! ᱪᱮᱫ ᱞᱮᱠᱟ ᱢᱮᱱᱟᱢᱟ?",
    "sd": "السلام عليڪم! توهان ڪيئن آهيو؟",
    "ta": "வணக்கம்! இன்று வானிலை மிகவும் அருமையாக இருக்கிறது, கொஞ்சம் நடந்து வரலாமா?",
    "te": "నమస్కారం! ఈ రోజు వాతావరణం చాలా బాగుంది, కొంచెం నడుద్దాం రండి.",
    "ur": "السلام علیکم! آج موسم بہت خوشگوار ہے، چلیں تھوڑی سیر کر آئیں۔",
    "en": "Good morning! The tea is ready, come and sit with us for a while.",
}

# (text, voice, language code, tone, accent, pace)
SHOWCASE: list[tuple[str, str, str, str, str, str]] = [
    ("Honestly, I did not expect that <laugh> but it worked out perfectly!",
     "Ira", "en", "happy", "Indian English", "steady"),
    ("अरे वाह! <laugh> तुमने तो कमाल कर दिया, मुझे यकीन ही नहीं हो रहा।", "Aisha", "hi", "excited", "Hindi", "fast"),
    ("ఈ వార్త విని నాకు చాలా బాధగా ఉంది <sigh> ఏం చేయాలో తెలియడం లేదు.", "Siya", "te", "sad", "Telugu", "slow"),
    ("நாளை காலை ஒன்பது மணிக்கு கூட்டம் தொடங்கும், தயவுசெய்து நேரத்திற்கு வாருங்கள்.",
     "Zoya", "ta", "professional", "Tamil", "steady"),
    ("ಅಯ್ಯೋ, ಮತ್ತೆ ಬಸ್ ತಪ್ಪಿಹೋಯಿತು! <sigh> ಇವತ್ತು ಏನೂ ಸರಿಯಾಗಿ ನಡೆಯುತ್ತಿಲ್ಲ.", "Ira", "kn", "sad", "Kannada", "steady"),
    ("দারুণ খবর! আমরা ফাইনালে উঠে গেছি <laugh> আজ রাতে পার্টি হবে!", "Aisha", "bn", "excited", "Bengali", "fast"),
    ("ਇਹ ਕੀ ਕਰ ਦਿੱਤਾ ਤੁਸੀਂ? ਮੈਂ ਕਿੰਨੀ ਵਾਰ ਕਿਹਾ ਸੀ ਕਿ ਧਿਆਨ ਨਾਲ ਕੰਮ ਕਰੋ!", "Siya", "pa", "angry", "Punjabi", "fast"),
    ("Yaar, meeting phir se postpone ho gayi <chuckle> lagta hai boss ko bhi chhutti chahiye.",
     "Zoya", "hi", "happy", "Hindi", "steady"),
    ("कल का presentation बहुत अच्छा गया <chuckle> but honestly मैं बहुत nervous थी।",
     "Ira", "hi", "happy", "Hindi", "steady"),
    ("Weekend-la plan enna? <laugh> Naan already movie tickets book pannitten!",
     "Aisha", "ta", "excited", "Tamil", "fast"),
]

LANGUAGE_CHOICES: list[tuple[str, str]] = [(f"{lang.name} ({lang.script})", lang.code) for lang in LANGUAGES]


def example_for(language: str | None) -> str:
    """The example line of a language (ISO code or English name); English for unknown input."""
    try:
        return LANGUAGE_EXAMPLES[get_language(language or DEFAULT_LANGUAGE).code]
    except ValueError:
        return LANGUAGE_EXAMPLES["en"]


def script_note(text: str, language: str | None) -> str:
    """A one-line hint when the text's script is not the chosen language's script; else ''."""
    if not text or not text.strip() or not language:
        return ""
    try:
        lang = get_language(language)
    except ValueError:
        return ""
    found = dominant_script(text)
    if found == lang.script or (found == "Latin" and lang.code != "en"):  # romanised text is fine
        return ""
    return (
        f"Note: the text is mostly {found} script, but {lang.name} is usually written in {lang.script}. "
        "The model reads the language from the script; the language menu only picks examples and the speaking rate."
    )
