"""The curriculum sampler: deterministic order, resumable position, stage mixtures, rank slices."""

import json
import shutil
from collections import Counter

import pytest

from training.sft.data import DataError, DataSource, MixtureSampler, StagePlan, rank_micro_batches

ITEMS = {"en": list(range(10)), "hi": list(range(100, 106)), "ta": [200, 201, 202]}
STAGES = [StagePlan("english", 3, (("en", 1.0),)),
          StagePlan("indic", 4, (("hi", 1.0), ("ta", 1.0), ("en", 0.25)))]


def _run(sampler, steps, size=8):
    return [sampler.global_batch(s, size) for s in steps]


def test_same_seed_same_order_and_resume_continues_it():
    full = _run(MixtureSampler(STAGES, ITEMS, seed=7), range(7))
    assert full == _run(MixtureSampler(STAGES, ITEMS, seed=7), range(7))
    assert full != _run(MixtureSampler(STAGES, ITEMS, seed=8), range(7))
    first = MixtureSampler(STAGES, ITEMS, seed=7)
    _run(first, range(4))
    resumed = MixtureSampler(STAGES, ITEMS, seed=7)
    resumed.load_state_dict(first.state_dict())
    assert _run(resumed, range(4, 7)) == full[4:]
    with pytest.raises(DataError, match="restore its state"):
        MixtureSampler(STAGES, ITEMS, seed=7).global_batch(3, 8)


def test_stages_switch_at_their_step_counts_with_replay():
    sampler = MixtureSampler(STAGES, ITEMS, seed=0)
    batches = _run(sampler, range(7), size=64)
    assert all(k == "en" for b in batches[:3] for k, _ in b)
    later = Counter(k for b in batches[3:] for k, _ in b)
    assert set(later) == {"en", "hi", "ta"} and later["en"] < later["hi"] / 2
    assert [sampler.stage_at(s)[1].name for s in (0, 2, 3, 6)] == ["english", "english", "indic", "indic"]
    with pytest.raises(DataError, match="past the last stage"):
        sampler.stage_at(7)


def test_each_epoch_visits_every_item_once():
    sampler = MixtureSampler([StagePlan("one", 5, (("en", 1.0),))], ITEMS, seed=3)
    drawn = [i for b in _run(sampler, range(5), size=4) for _, i in b]
    assert sorted(drawn[:10]) == ITEMS["en"] and sorted(drawn[10:20]) == ITEMS["en"]
    assert drawn[:10] != drawn[10:20]  # a fresh permutation per epoch


def test_zero_weight_source_is_never_drawn_and_bad_stages_fail():
    stage = StagePlan("s", 5, (("en", 1.0), ("ta", 0.0)))
    sampler = MixtureSampler([stage], ITEMS, seed=1)
    assert all(k == "en" for b in _run(sampler, range(5)) for k, _ in b)
    for bad in ([], [StagePlan("x", 0, (("en", 1.0),))], [StagePlan("x", 2, ())]):
        with pytest.raises(DataError):
            MixtureSampler(bad, ITEMS, seed=0)


class _Frames:
    def __init__(self, n):
        self.n = n

    def frames(self, i):
        return (i * 7) % self.n + 1


def test_rank_slices_partition_the_global_batch():
    batch = MixtureSampler(STAGES, ITEMS, seed=2).global_batch(0, 12)
    frames = {"en": _Frames(13)}
    parts = [rank_micro_batches(batch, frames, rank, 3, micro_batch=2) for rank in range(3)]
    assert all(len(p) == 2 and all(len(m) == 2 for m in p) for p in parts)
    flat = [x for p in parts for m in p for x in m]
    assert sorted(flat) == sorted(batch)
    for p in parts:  # longest first within a rank: less padding
        lengths = [frames[k].frames(i) for m in p for k, i in m]
        assert lengths == sorted(lengths, reverse=True)


def _renamed(items: dict, prefix: str) -> dict:
    return {f"{prefix}/{k}": v for k, v in items.items()}


def _renamed_stages(prefix: str) -> list[StagePlan]:
    return [StagePlan(s.name, s.steps, tuple((f"{prefix}/{k}", w) for k, w in s.mixture)) for s in STAGES]


def test_order_follows_the_order_keys_not_the_source_paths():
    """Two OUTs hold copies of the same data; the batches must not see the paths."""
    batches = {}
    for prefix in ("/runs/a/data", "/elsewhere/b/data"):
        order_keys = {f"{prefix}/{k}": f"sha-of-{k}" for k in ITEMS}
        sampler = MixtureSampler(_renamed_stages(prefix), _renamed(ITEMS, prefix), seed=7, order_keys=order_keys)
        batches[prefix] = [[(k.rsplit("/", 1)[1], i) for k, i in b] for b in _run(sampler, range(7))]
    assert batches["/runs/a/data"] == batches["/elsewhere/b/data"]
    by_path = [MixtureSampler(_renamed_stages(p), _renamed(ITEMS, p), seed=7) for p in ("/x", "/y")]
    assert [[i for _, i in b] for b in _run(by_path[0], range(7))] != \
        [[i for _, i in b] for b in _run(by_path[1], range(7))]  # what keying by path did


def test_resume_keeps_the_order_keys_the_run_started_with():
    keys = {k: f"sha-of-{k}" for k in ITEMS}
    full = _run(MixtureSampler(STAGES, ITEMS, seed=7, order_keys=keys), range(7))
    first = MixtureSampler(STAGES, ITEMS, seed=7, order_keys=keys)
    _run(first, range(4))
    state = first.state_dict()
    assert state["order_keys"] == keys
    resumed = MixtureSampler(STAGES, ITEMS, seed=7, order_keys={k: "changed" for k in ITEMS})
    resumed.load_state_dict(state)
    assert _run(resumed, range(4, 7)) == full[4:]
    # A checkpoint written before order keys existed continues its path-keyed order.
    legacy = _run(MixtureSampler(STAGES, ITEMS, seed=7), range(7))
    old = MixtureSampler(STAGES, ITEMS, seed=7)
    _run(old, range(4))
    resumed = MixtureSampler(STAGES, ITEMS, seed=7, order_keys=keys)
    resumed.load_state_dict({k: v for k, v in old.state_dict().items() if k != "order_keys"})
    assert _run(resumed, range(4, 7)) == legacy[4:]


def _fake_prepared(folder, layout, texts) -> None:
    folder.mkdir(parents=True)
    (folder / "prepare.json").write_text(json.dumps({"num_quantizers": layout.num_quantizers,
                                                     "codebook_size": layout.codebook_size,
                                                     "manifest": str(folder / "clips.jsonl")}))
    rows = [{"audio": f"wav/{n}.wav", "line": n + 1, "text": t, "speaker": "Ira", "language": "en", "shard": 0,
             "offset": 3 * n, "frames": 3} for n, t in enumerate(texts)]
    (folder / "index.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def test_fingerprint_names_the_content_not_the_folder(tmp_path, tiny_engine):
    layout = tiny_engine.layout
    _fake_prepared(tmp_path / "a", layout, ["one", "two", "three\u2028line"])
    shutil.copytree(tmp_path / "a", tmp_path / "copy" / "a")
    _fake_prepared(tmp_path / "b", layout, ["one", "two", "four"])
    a, copy, b = (DataSource(tmp_path / p, layout) for p in ("a", "copy/a", "b"))
    assert a.key != copy.key and a.fingerprint == copy.fingerprint != b.fingerprint
    assert len(a) == 3 and a.rows[2]["text"] == "three\u2028line"  # one row per line, whatever the text holds
