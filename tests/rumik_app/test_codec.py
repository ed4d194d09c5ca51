"""Mimi codec wrapper: exact streaming decode, encode shapes, frame arithmetic."""

import torch


def test_streaming_decode_equals_offline_decode_across_window(tiny_engine):
    codec = tiny_engine.codec
    torch.manual_seed(0)
    frames = 300  # longer than the decoder transformer's 250-frame sliding window
    codes = torch.randint(0, 2048, (2, 8, frames))
    offline = codec.decode(codes)
    stream = codec.streaming_decoder(batch=2)
    pieces, pos, sizes = [], 0, [1, 2, 3, 5, 7]
    for k in range(1000):
        if pos >= frames:
            break
        n = sizes[k % len(sizes)]
        pieces.append(stream.decode(codes[..., pos: pos + n]))
        pos += n
    streamed = torch.cat(pieces, -1)
    assert streamed.shape == offline.shape == (2, frames * codec.frame_size)
    torch.testing.assert_close(streamed, offline, rtol=0, atol=1e-5)


def test_frame_arithmetic_and_encode(tiny_engine):
    codec = tiny_engine.codec
    assert codec.sample_rate == 24_000 and codec.frame_size == 1920 and codec.frame_rate == 12.5
    wave = torch.randn(1, 24_000) * 0.1
    codes = codec.encode(wave)
    assert codes.shape == (1, 8, 13) and codes.dtype == torch.long
    assert int(codes.max()) < 2048 and len(torch.unique(codes)) > 8, "codebooks must not be degenerate"
    assert codec.decode(codes[..., :0]).shape == (1, 0)
