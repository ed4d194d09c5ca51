"""The word-timestamp aligners: forced alignment of known words in a clip, one class per model
(docs/ARCHITECTURE.md §16). Each class implements `rumik_app.align.Aligner` and is itself the
entry point (pyproject.toml's `rumik_app.aligners` group): its constructor takes the part of the
spec after ":" (or None).

    from rumik_app.align import load_aligner
    aligner = load_aligner("pocketsphinx")                    # English (Latin script), offline
    aligner = load_aligner("indicconformer:/models/indicconf")  # 22 Indian languages, their own scripts
    aligner = load_aligner("ctc:/models/wav2vec2-base-960h")  # a local transformers CTC model (Latin)
    spans = aligner.align(samples, 24000, ["hello", "world"], "en")  # [(start_s, end_s)] per word

- `PocketSphinxAligner` ("pocketsphinx"): the English model inside the `pocketsphinx` package, its
  own alignment search (`set_align_text`, optional silences and noises between words), 10 ms
  frames, with beams as wide as they go and the search's own backtrace (narrower beams, or the
  lattice's best path, lose or truncate the path on some clips: "Final result does not match the
  grammar"). Words missing from its dictionary get a rough letter-to-phone pronunciation. A STAR
  word becomes a loop of a few broad phones (a garbage model) in a JSGF grammar, which soaks up
  speech the English model cannot spell. Audio that does not sound like the words (noise, another
  language) finds no path: an AlignmentError, not made-up times.
- `IndicConformerAligner` ("indicconformer[:PATH]"): the IndicConformer judge's ONNX encoder and
  CTC head (`evaluation.indicconformer`, loaded by the judge itself), the language's vocabulary
  pieces, CTC Viterbi (`rumik_app.align.ctc`), 80 ms frames. A STAR word is one wildcard token.
- `CTCFolderAligner` ("ctc:PATH"): an operator's local transformers CTC model folder (wav2vec2
  family, a character vocabulary with "|" between words), safetensors weights only, no remote
  code, 20 ms frames. A STAR word is one wildcard token.

Shared: the audio is at most MAX_ALIGN_SECONDS (longer is an AlignmentError: cut it first) and is
resampled once to the model's rate (`evaluation.audio_io.resample`). A word without letters
("-", "...") gets an empty span at the end of the word before it. Every error is an
AlignmentError (a subclass of RumikError) whose message names the fix. Boundaries are the
model's; `rumik_app.align.refine.refine_boundaries` snaps them to pauses (the caller runs it).

Library module; the command line is `python -m evaluation.align`.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from evaluation.asr_judge import ASRError, language_code
from evaluation.audio_io import SILENCE_PEAK, resample
from rumik_app.align import MAX_ALIGN_SECONDS, STAR, AlignmentError, word_script
from rumik_app.align.ctc import forced_align, token_spans, with_star, word_frames
from rumik_app.text.languages import get_language

Span = tuple[float, float]

POCKETSPHINX_RATE = 16_000
POCKETSPHINX_FRAME_S = 0.01
INT16_MAX = 32767
# Beams as wide as a double allows (the alignment grammar is tiny, so this costs little): with the
# defaults, and still with 1e-100 or 1e-200, the alignment search prunes the only path on some
# clips ("Final result does not match the grammar").
# bestpath off: the lattice's best path may end in a state the grammar does not accept (a
# truncated word list came back); the search's own backtrace from the final state cannot.
# cmn/dither as the judge's: a clip alone decides the result.
POCKETSPHINX_ALIGN_CONFIG = {"loglevel": "FATAL", "cmn": "batch", "dither": False, "beam": 1e-300,
                             "pbeam": 1e-300, "wbeam": 1e-300, "bestpath": False}
FILLERS = frozenset({"<s>", "</s>", "<sil>", "[NOISE]", "[SPEECH]", "(NULL)"})
# A STAR word's garbage model: a loop of a few broad phones (all 39 of the model's phones decoded
# about 50x slower, for the same boundaries on a Hindi-in-English clip).
# SIL is in the loop too (as a word of its own, dropped from the STAR's edges): without it the
# loop's phones soak up the silence around the speech it stands for.
STAR_PHONES = ("AA", "IY", "UW", "AH", "N", "S", "T", "K", "SIL")
STAR_WORD = "star_{}"  # dictionary word of one loop phone; no real word has an underscore
# Rough letter-to-phone (CMU ARPAbet) rules for words missing from the dictionary: digraphs first,
# then single letters. Rough on purpose: it only has to give the search a plausible length and
# a few right consonants so that the known words around the word still land.
DIGRAPHS = {"ch": "CH", "sh": "SH", "th": "TH", "ph": "F", "ng": "NG", "ck": "K", "qu": "K W", "wh": "W",
            "ee": "IY", "ea": "IY", "oo": "UW", "ou": "AW", "ai": "EY", "ay": "EY", "oa": "OW", "gh": "G"}
LETTERS = {"a": "AE", "b": "B", "c": "K", "d": "D", "e": "EH", "f": "F", "g": "G", "h": "HH", "i": "IH", "j": "JH",
           "k": "K", "l": "L", "m": "M", "n": "N", "o": "AA", "p": "P", "q": "K", "r": "R", "s": "S", "t": "T",
           "u": "AH", "v": "V", "w": "W", "x": "K S", "y": "Y", "z": "Z"}

INDIC_WORD_START = "\u2581"  # SentencePiece's "▁"
CTC_DELIMITER = "|"


# ---------------------------------------------------------------------------- shared
def bounded(samples: np.ndarray, sample_rate: int, rate: int) -> np.ndarray:
    """A clip [N] (float, mono) at `rate` Hz as float32; AlignmentError when it is not mono,
    holds no samples or is longer than MAX_ALIGN_SECONDS."""
    x = np.asarray(samples, dtype=np.float32)
    if x.ndim != 1 or x.size == 0 or sample_rate <= 0:
        raise AlignmentError(f"an aligner takes mono samples [N] at a positive rate; got shape {x.shape} at "
                             f"{sample_rate} Hz.")
    if x.size / sample_rate > MAX_ALIGN_SECONDS:
        raise AlignmentError(f"the clip is {x.size / sample_rate:.1f} s; an aligner takes at most "
                             f"{MAX_ALIGN_SECONDS:g} s at once. Cut it into shorter pieces (at its pauses) first.")
    if not np.all(np.isfinite(x)):
        raise AlignmentError("the clip holds NaN or infinite samples; nothing can be aligned in it.")
    return resample(x, sample_rate, rate)


def has_letters(word: str) -> bool:
    return word == STAR or any(unicodedata.category(ch)[0] in "LM" for ch in word)


def refuse_digits(word: str) -> None:
    if any(ch.isdigit() for ch in word):
        raise AlignmentError(f"the word {word!r} has digits, which an aligner cannot place; normalise the text "
                             "first (rumik_app.text.normalize.normalize_text, or --normalize).")


def fill_empty(words: Sequence[str], spans: Sequence[Span]) -> list[Span]:
    """Per word of `words`, its span: the next of `spans` (one per word with letters, in order),
    or an empty span at the end of the previous word (the start of the next) for a word without."""
    out: list[Span] = []
    placed = iter(spans)
    pending = 0
    for word in words:
        if has_letters(word):
            span = next(placed)
            out.extend([(span[0], span[0])] * pending)
            pending = 0
            out.append(span)
        elif out:
            out.append((out[-1][1], out[-1][1]))
        else:
            pending += 1
    return out + [(0.0, 0.0)] * pending


def frames_to_seconds(frames: Sequence[tuple[int, int]], frame_s: float, duration: float) -> list[Span]:
    return [(min(a * frame_s, duration), min(b * frame_s, duration)) for a, b in frames]


# ---------------------------------------------------------------------------- pocketsphinx
def clean_english(word: str) -> str:
    """A word as the English dictionary spells it: lowercase, accents dropped, letters and
    inner apostrophes only ("Don't," -> "don't"; "café" -> "cafe"); "" when none is left."""
    plain = unicodedata.normalize("NFKD", word.lower())
    plain = "".join(ch for ch in plain if "a" <= ch <= "z" or ch in "'-")
    return re.sub(r"-+", "-", plain).strip("'-")


def rough_phones(word: str) -> str:
    """A rough ARPAbet pronunciation of a lowercase word [a-z'] from DIGRAPHS and LETTERS
    (repeated letters once)."""
    letters = re.sub(r"(.)\1+", r"\1", re.sub(r"[^a-z]", "", word))
    phones, i = [], 0
    while i < len(letters):
        if letters[i:i + 2] in DIGRAPHS:
            phones.append(DIGRAPHS[letters[i:i + 2]])
            i += 2
        else:
            phones.append(LETTERS[letters[i]])
            i += 1
    return " ".join(phones)


MAX_ADDED_WORDS = 20_000  # out-of-dictionary words one decoder takes before it is made afresh


class PocketSphinxAligner:
    """English forced alignment with pocketsphinx's own model (see the module docstring).
    Covers Latin-script words in any language: the phones are English ones."""

    name = "pocketsphinx"

    def __init__(self, argument: str | None = None) -> None:
        if argument:
            raise AlignmentError(f"the pocketsphinx aligner takes no argument (got {argument!r}); use --aligner "
                                 "pocketsphinx.")
        try:
            from pocketsphinx import Decoder
        except ImportError as exc:
            raise AlignmentError("pocketsphinx is not installed; install the eval extra: "
                                 "pip install -e .[eval].") from exc
        self._new_decoder = Decoder
        self._fresh_decoder()

    def _fresh_decoder(self) -> None:
        """The shipped dictionary plus the wildcard phones; words a text adds are counted, so a
        long-running server's dictionary never grows past MAX_ADDED_WORDS (then it starts again)."""
        self.decoder = self._new_decoder(**POCKETSPHINX_ALIGN_CONFIG)
        self.added = 0
        for i, phone in enumerate(STAR_PHONES):  # the decoder is updated once, with the last word
            self.decoder.add_word(STAR_WORD.format(phone.lower()), phone, i == len(STAR_PHONES) - 1)

    def covers(self, language: str, script: str) -> bool:
        return script == "Latin"

    def dictionary_word(self, word: str) -> str:
        """The dictionary entry a word aligns as: its clean spelling, added (hyphen parts' known
        pronunciations joined, else rough_phones) when the dictionary lacks it."""
        clean = clean_english(word)
        if not clean or word_script(word) not in (None, "Latin"):
            raise AlignmentError(f"pocketsphinx can only spell Latin-script words, not {word!r}; pass it as STAR or "
                                 "align it with its own language's aligner (--aligner indicconformer:PATH).")
        if self.decoder.lookup_word(clean) is None:
            self.added += 1
            parts = [p for p in clean.split("-") if p]
            phones = [self.decoder.lookup_word(p) or rough_phones(p) for p in parts]
            self.decoder.add_word(clean, " ".join(phones), True)
        return clean

    def _grammar(self, entries: list[str]) -> str:
        """A JSGF grammar of the words in order, each STAR run a loop of STAR_PHONES."""
        loop = "(" + " | ".join(STAR_WORD.format(p.lower()) for p in STAR_PHONES) + ")+"
        body = " ".join(loop if e == STAR else e for e in entries)
        return f"#JSGF V1.0;\ngrammar align;\npublic <utterance> = {body};\n"

    def _decode(self, pcm: bytes, entries: list[str]) -> list[tuple[str, float, float]]:
        """(word, start_s, end_s) of each non-filler segment pocketsphinx found."""
        decoder = self.decoder
        decoder.reinit_feat()
        try:
            if STAR in entries:
                decoder.add_jsgf_string("align", self._grammar(entries))
                decoder.activate_search("align")
            else:
                decoder.set_align_text(" ".join(entries))
        except RuntimeError as exc:
            raise AlignmentError(f"pocketsphinx could not set up the alignment of {len(entries)} words "
                                 f"({exc}).") from exc
        decoder.start_utt()
        decoder.process_raw(pcm, full_utt=True)
        decoder.end_utt()
        if decoder.hyp() is None:
            raise AlignmentError("pocketsphinx lost the alignment path: the audio does not sound like these words "
                                 "(wrong text, another language, or mostly noise).")
        return [(s.word.split("(")[0], s.start_frame * POCKETSPHINX_FRAME_S, (s.end_frame + 1) * POCKETSPHINX_FRAME_S)
                for s in decoder.seg() if s.word not in FILLERS]

    def align(self, samples: np.ndarray, sample_rate: int, words: Sequence[str], language: str) -> list[Span]:
        """One (start_s, end_s) per word (see `rumik_app.align.Aligner`)."""
        audio = bounded(samples, sample_rate, POCKETSPHINX_RATE)
        if float(np.max(np.abs(audio))) < SILENCE_PEAK:
            raise AlignmentError("the clip is silent; there are no words to place in it.")
        for w in words:
            refuse_digits(w)
        if self.added >= MAX_ADDED_WORDS:  # between texts, never inside one
            self._fresh_decoder()
        entries = [w if w == STAR else self.dictionary_word(w) for w in words if has_letters(w)]
        if not entries:
            return fill_empty(words, [])
        runs = [e for i, e in enumerate(entries) if e != STAR or i == 0 or entries[i - 1] != STAR]
        pcm = (np.clip(audio, -1.0, 1.0) * INT16_MAX).astype("<i2").tobytes()
        segments = self._decode(pcm, runs)
        spans = _group_segments(segments, runs)
        return fill_empty(words, _split_star_runs(entries, spans))


def _group_segments(segments: list[tuple[str, float, float]], runs: list[str]) -> list[Span]:
    """One span per entry of `runs` from pocketsphinx's segments: a word's own segment, a STAR
    run's loop phones merged, less the loop's silences at its edges."""
    prefix, silence = STAR_WORD.format(""), STAR_WORD.format("sil")
    spans: list[Span] = []
    i = 0
    for entry in runs:
        if entry == STAR:
            loop = []
            while i < len(segments) and segments[i][0].startswith(prefix):
                loop.append(segments[i])
                i += 1
            heard = [s for s in loop if s[0] != silence] or loop
            at = spans[-1][1] if spans else 0.0
            spans.append((heard[0][1], heard[-1][2]) if heard else (at, at))
        elif i < len(segments) and segments[i][0] == entry:
            spans.append((segments[i][1], segments[i][2]))
            i += 1
        else:
            raise AlignmentError(f"pocketsphinx's alignment does not follow the words (expected {entry!r}); the "
                                 "audio does not match the text.")
    return spans


def _split_star_runs(entries: list[str], spans: list[Span]) -> list[Span]:
    """Per entry, its span: consecutive STARs share their run's span, cut into equal parts."""
    out: list[Span] = []
    it = iter(spans)
    i = 0
    while i < len(entries):
        n = 1
        while entries[i] == STAR and i + n < len(entries) and entries[i + n] == STAR:
            n += 1
        start, end = next(it)
        step = (end - start) / n
        out.extend((start + k * step, start + (k + 1) * step) for k in range(n))
        i += n
    return out


# ---------------------------------------------------------------------------- IndicConformer
def indic_frame_seconds(feature_frames: int, encoded_frames: int) -> float:
    """Seconds per encoder frame: the feature hop times the encoder's subsampling, read from the
    frame counts (feature / encoded, rounded to a power of two: 8, so 80 ms)."""
    from evaluation.indicconformer import HOP, MODEL_RATE

    ratio = feature_frames / max(1, encoded_frames)
    return HOP / MODEL_RATE * 2 ** round(np.log2(max(ratio, 1.0)))


def log_softmax(x: np.ndarray) -> np.ndarray:
    """log-softmax over the last axis of [T, V] scores (float32)."""
    x = np.asarray(x, dtype=np.float32)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def tokenize_pieces(word: str, pieces: dict[str, int]) -> list[int]:
    """A word's vocabulary ids by greedy longest match (SentencePiece pieces, "▁" opening a word;
    a valid spelling, not always the model's own); AlignmentError naming a character no piece has."""
    text = "".join(ch for ch in unicodedata.normalize("NFC", word) if unicodedata.category(ch)[0] in "LM"
                   or ch in "\u200c\u200d")
    ids, pos, first = [], 0, True
    longest = max(map(len, pieces), default=1)
    while pos < len(text):
        found = None
        for end in range(min(len(text), pos + longest), pos, -1):
            key = (INDIC_WORD_START if first else "") + text[pos:end]
            if key in pieces:
                found = (pieces[key], end)
                break
        if found is None and first and INDIC_WORD_START in pieces:
            ids.append(pieces[INDIC_WORD_START])  # a bare "▁", then the word's first piece
            first = False
            continue
        if found is None:
            raise AlignmentError(f"the word {word!r} has {text[pos]!r} (U+{ord(text[pos]):04X}), which no piece of "
                                 "this language's vocabulary spells; check its script and language, or pass it "
                                 "as STAR.")
        ids.append(found[0])
        pos, first = found[1], False
    return ids


class IndicConformerAligner:
    """CTC forced alignment with IndicConformer (see the module docstring). The whole clip (at
    most MAX_ALIGN_SECONDS) goes through the encoder in one pass; the tests' stand-in encoder
    lights at most 192 frames (15.4 s), so longer clips there end early and are refused."""

    def __init__(self, argument: str | None = None, device: str | None = None, threads: int | None = None) -> None:
        from evaluation.indicconformer import REPO_ID, IndicConformerJudge

        try:
            self.judge = IndicConformerJudge(argument or REPO_ID, device=device, threads=threads)
        except ASRError as exc:
            raise AlignmentError(f"{exc} (word timestamps: --aligner indicconformer:PATH)") from exc
        self.name = "indicconformer" if argument is None else f"indicconformer:{argument}"
        self.pieces = {lang: {p: i for i, p in enumerate(vocab) if 0 < i < len(vocab) - 1}
                       for lang, vocab in self.judge.vocab.items()}  # no <unk>, no blank

    def covers(self, language: str, script: str) -> bool:
        code = language_code(language)
        if code not in self.judge.masks:
            return False
        try:
            return get_language(code).script == script
        except ValueError:
            return False

    def log_probs(self, audio16k: np.ndarray, lang: str) -> tuple[np.ndarray, float]:
        """(the language's CTC log-probabilities [T', 257] (blank last), seconds per frame)."""
        from evaluation.indicconformer import log_mel

        judge = self.judge
        feats, frames = log_mel(audio16k)
        outputs, lengths = judge.encoder.run(["outputs", "encoded_lengths"],
                                             {"audio_signal": feats[None], "length": np.array([frames], np.int64)})
        scores = judge.ctc.run(["logprobs"], {"encoder_output": outputs})[0][0]  # [T', V]
        mask = judge.masks[lang]
        if scores.shape[-1] != len(mask):
            raise AlignmentError(f"the CTC head scores {scores.shape[-1]} tokens but the language masks have "
                                 f"{len(mask)}; the assets come from different models.")
        valid = int(lengths[0])
        if valid > scores.shape[0]:
            raise AlignmentError(f"the encoder gave {scores.shape[0]} frames for a clip of {valid}; this model "
                                 "cannot take clips this long. Cut the clip shorter.")
        return log_softmax(scores[:valid][:, mask]), indic_frame_seconds(frames, valid)

    def align(self, samples: np.ndarray, sample_rate: int, words: Sequence[str], language: str) -> list[Span]:
        """One (start_s, end_s) per word (see `rumik_app.align.Aligner`)."""
        from evaluation.indicconformer import BLANK, MODEL_RATE

        lang = language_code(language)
        if lang not in self.judge.masks:
            raise AlignmentError(f"IndicConformer does not cover language {language!r}; it covers "
                                 f"{', '.join(self.judge.languages)}.")
        for w in words:
            refuse_digits(w)
        audio = bounded(samples, sample_rate, MODEL_RATE)
        spelled = [w for w in words if has_letters(w)]
        if not spelled:
            return fill_empty(words, [])
        scores, frame_s = self.log_probs(audio, lang)
        scores, star = with_star(scores)
        tokens = [[star] if w == STAR else tokenize_pieces(w, self.pieces[lang]) for w in spelled]
        targets = [t for word in tokens for t in word]
        spans = token_spans(forced_align(scores, targets, BLANK), targets, BLANK)
        frames = word_frames(spans, [len(t) for t in tokens])
        return fill_empty(words, frames_to_seconds(frames, frame_s, len(audio) / MODEL_RATE))


# ---------------------------------------------------------------------------- transformers CTC
def check_ctc_folder(argument: str | None) -> Path:
    """The folder of a `ctc:PATH` spec: it exists, has config.json and safetensors weights."""
    if not argument:
        raise AlignmentError("the ctc aligner needs a local model folder: --aligner ctc:PATH (a transformers CTC "
                             "model such as a saved facebook/wav2vec2-base-960h).")
    folder = Path(argument).expanduser()
    if not (folder / "config.json").is_file():
        raise AlignmentError(f"{folder} is not a transformers model folder (no config.json); pass the folder that "
                             "save_pretrained wrote: --aligner ctc:PATH.")
    if not any(folder.glob("*.safetensors")):
        pickled = sorted(p.name for p in folder.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".ckpt"))
        only = f" (only {', '.join(pickled)})" if pickled else ""
        raise AlignmentError(f"{folder} has no .safetensors weights{only}; "
                             "pickled weights can run code when loaded, so they are refused. Convert them once "
                             "where you trust them: AutoModelForCTC.from_pretrained(PATH).save_pretrained(PATH, "
                             "safe_serialization=True).")
    return folder


class CTCFolderAligner:
    """CTC forced alignment with a local transformers CTC model folder (see the module
    docstring): character vocabulary, the tokenizer's word delimiter between words, the pad
    token as the blank. Covers Latin script in any language."""

    def __init__(self, argument: str | None = None, device: str = "cpu") -> None:
        folder = check_ctc_folder(argument)
        try:
            import torch  # noqa: F401
            from transformers import AutoModelForCTC, AutoProcessor
        except ImportError as exc:
            raise AlignmentError("transformers and torch are needed for --aligner ctc:PATH; install the eval extra: "
                                 "pip install -e .[eval].") from exc
        try:
            self.processor = AutoProcessor.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False)
            self.model = AutoModelForCTC.from_pretrained(str(folder), local_files_only=True, use_safetensors=True,
                                                         trust_remote_code=False).to(device).eval()
        except (OSError, ValueError, KeyError) as exc:
            raise AlignmentError(f"{folder} cannot be loaded as a transformers CTC model with its processor ({exc}); "
                                 "it needs config.json, safetensors weights, preprocessor_config.json and the "
                                 "tokenizer's vocab.json.") from exc
        self.name, self.device = f"ctc:{argument}", device
        tokenizer = getattr(self.processor, "tokenizer", None)
        extractor = getattr(self.processor, "feature_extractor", None)
        if tokenizer is None or extractor is None:
            raise AlignmentError(f"{folder}: its processor has no tokenizer and feature extractor (a Wav2Vec2Processor "
                                 "is); it is not a CTC speech model folder.")
        self.vocab = tokenizer.get_vocab()
        self.blank = int(tokenizer.pad_token_id)
        self.delimiter = self.vocab.get(getattr(tokenizer, "word_delimiter_token", None) or CTC_DELIMITER)
        letters = [ch for ch in self.vocab if len(ch) == 1 and ch.isalpha()]
        self.upper = sum(ch.isupper() for ch in letters) > len(letters) / 2
        self.rate = int(extractor.sampling_rate)

    def covers(self, language: str, script: str) -> bool:
        return script == "Latin"

    def spell(self, word: str) -> list[int]:
        """A word's character ids (accents dropped, characters outside the vocabulary skipped);
        AlignmentError when none of its letters is in the vocabulary."""
        plain = unicodedata.normalize("NFKD", word.upper() if self.upper else word.lower())
        ids = [self.vocab[ch] for ch in plain
               if ch in self.vocab and ch != CTC_DELIMITER and self.vocab[ch] != self.blank]
        if not ids:
            raise AlignmentError(f"the model's vocabulary spells none of the letters of {word!r}; pass it as STAR "
                                 "or align it with its own language's aligner.")
        return ids

    def log_probs(self, audio: np.ndarray) -> tuple[np.ndarray, float]:
        """(log-probabilities [T, V] of the clip at self.rate, seconds per frame)."""
        import torch

        inputs = self.processor.feature_extractor(audio, sampling_rate=self.rate, return_tensors="pt")
        with torch.inference_mode():
            logits = self.model(inputs.input_values.to(self.device)).logits[0].float()
        scores = torch.log_softmax(logits, dim=-1).cpu().numpy()
        ratio = getattr(self.model.config, "inputs_to_logits_ratio", None) or len(audio) / max(1, len(scores))
        return scores, float(ratio) / self.rate

    def align(self, samples: np.ndarray, sample_rate: int, words: Sequence[str], language: str) -> list[Span]:
        """One (start_s, end_s) per word (see `rumik_app.align.Aligner`)."""
        for w in words:
            refuse_digits(w)
        audio = bounded(samples, sample_rate, self.rate)
        spelled = [w for w in words if has_letters(w)]
        if not spelled:
            return fill_empty(words, [])
        scores, frame_s = self.log_probs(audio)
        scores, star = with_star(scores)
        tokens = [[star] if w == STAR else self.spell(w) for w in spelled]
        targets, owner = [], []  # owner: the word index of each target, -1 for a delimiter
        for i, word in enumerate(tokens):
            if i and self.delimiter is not None:
                targets.append(self.delimiter)
                owner.append(-1)
            targets += word
            owner += [i] * len(word)
        spans = token_spans(forced_align(scores, targets, self.blank), targets, self.blank)
        kept = [span for span, who in zip(spans, owner, strict=True) if who >= 0]
        frames = word_frames(kept, [len(t) for t in tokens])
        return fill_empty(words, frames_to_seconds(frames, frame_s, len(audio) / self.rate))
