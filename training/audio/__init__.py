"""Audio helpers below every folder of training that reads recordings (training.prepare, training.voice).

    vad.py      CutSettings; Silero (ONNX) or energy VAD; the cut of a recording into clips
    levels.py   a clip's clipped share, frame levels, speech level and SNR (the level filters)

Import the modules themselves (`from training.audio.vad import speech_frames`); this package file
imports nothing. It imports no torch (docs/ARCHITECTURE.md §1: the layers of training).
"""
