"""Token layout: the id formula both ways and every parse/resync rule of docs/ARCHITECTURE.md §4."""

import numpy as np
import pytest

from rumik_app.model.tokens import FrameParser, TokenLayout

# The published layout (docs/ARCHITECTURE.md §2), written out here only to check the formula against it.
PUBLISHED = TokenLayout(first_unit_id=261008, num_quantizers=8, codebook_size=2048,
                        text_start_token_id=277392, audio_start_token_id=277393, audio_end_token_id=277394)
SMALL = TokenLayout(first_unit_id=100, num_quantizers=3, codebook_size=4,
                    text_start_token_id=112, audio_start_token_id=113, audio_end_token_id=114)


def u(code, q, lay=SMALL):
    return lay.unit_id(code, q)


def test_id_formula_both_ways_on_published_layout():
    lay = PUBLISHED
    assert lay.last_unit_id == 277391
    assert lay.unit_id(0, 0) == 261008 and lay.unit_id(0, 7) == 261015 and lay.unit_id(1, 0) == 261016
    assert lay.unit_id(2047, 7) == 277391
    for token_id in (261008, 261015, 261016, 270000, 277391):
        code, q = lay.split(token_id)
        assert lay.unit_id(code, q) == token_id
        assert code == (token_id - 261008) // 8 and q == (token_id - 261008) % 8
    with pytest.raises(ValueError):
        lay.split(277392)
    assert lay.tokens_per_second == 100


def test_codes_to_ids_round_trip():
    codes = np.array([[1, 3], [0, 2], [3, 1]])  # [Q=3, T=2]
    ids = SMALL.codes_to_ids(codes)
    assert ids.tolist() == [u(1, 0), u(0, 1), u(3, 2), u(3, 0), u(2, 1), u(1, 2)]
    assert np.array_equal(SMALL.parse(ids)[0], codes)


def test_parse_stops_at_audio_end():
    ids = [u(1, 0), u(2, 1), u(3, 2), SMALL.audio_end_token_id, u(0, 0), u(0, 1), u(0, 2)]
    assert SMALL.parse(ids)[0].tolist() == [[1], [2], [3]]


def test_non_unit_token_drops_partial_frame():
    ids = [u(1, 0), u(2, 1), SMALL.audio_start_token_id, u(3, 2), u(0, 0), u(1, 1), u(2, 2)]
    # the partial frame (1, 2) is dropped; the stray q2 cannot start a frame; then (0, 1, 2)
    assert SMALL.parse(ids)[0].tolist() == [[0], [1], [2]]


def test_out_of_order_codebook_drops_partial_frame():
    ids = [u(1, 0), u(2, 2), u(3, 1), u(0, 0), u(1, 1), u(2, 2)]
    assert SMALL.parse(ids)[0].tolist() == [[0], [1], [2]]


def test_q0_out_of_order_starts_new_frame():
    ids = [u(1, 0), u(2, 1), u(3, 0), u(0, 1), u(1, 2)]
    assert SMALL.parse(ids)[0].tolist() == [[3], [0], [1]]


def test_incomplete_last_frame_discarded_and_shape():
    ids = [u(1, 0), u(2, 1), u(3, 2), u(0, 0), u(1, 1)]
    codes = SMALL.parse(ids)
    assert codes.shape == (1, 3, 1)
    assert SMALL.parse([]).shape == (1, 3, 0)


def test_incremental_parser_matches_batch_parse():
    rng = np.random.default_rng(0)
    ids = rng.integers(95, 118, size=400).tolist()
    parser = FrameParser(SMALL)
    frames = [f for i in ids if (f := parser.push(i)) is not None]
    expected = SMALL.parse(ids)[0].T.tolist()
    assert frames == expected


def test_layout_rejects_overlapping_ids():
    with pytest.raises(ValueError):
        TokenLayout(first_unit_id=100, num_quantizers=3, codebook_size=4,
                    text_start_token_id=105, audio_start_token_id=113, audio_end_token_id=114)
