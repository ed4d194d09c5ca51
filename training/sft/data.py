"""Prepared data for training: sources, held-out split, and the deterministic mixture sampler.

    source = DataSource("data/hindi", layout, codec_sha256=fingerprint)   # a training.prepare DATA_DIR
    codes = source.codes(i)                                                # [Q, T] int64
    sampler = MixtureSampler(stages, {key: source.train_items for ...}, seed=0)
    batch = sampler.global_batch(step, 96)                                 # [(source key, item), ...]

The sampler is a pure function of (seed, step, data position): at step s the source of every
slot is drawn from `default_rng([seed, s])` with the stage's mixture weights, and each source
is read in epoch order, epoch e being the permutation `default_rng([seed, crc32(order key), e])`.
A source's order key is the sha256 of its index.jsonl (`DataSource.fingerprint`), never its
path: the same prepared data gives the same order wherever it lives, so two runs whose
configs differ only in paths (another OUT, a copied data folder) train on the same batches.
The data position (items consumed per source) and the order keys are saved in every
checkpoint, so a resumed run continues the same order. The order does not depend on the
number of processes: every rank draws the same global batch and takes its own slice.

Held-out items are chosen by a stable hash of the clip's audio path, so a clip is held out in
every run and every stage (and never trained on) whatever the seed.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from rumik_app.errors import RumikError
from rumik_app.model.tokens import TokenLayout
from rumik_app.request import DESCRIPTION_FIELDS, SynthesisRequest
from training.prepare.shards import INDEX_FILE, PREPARE_FILE, SHARDS_DIR

HASH_BUCKETS = 10_000


class DataError(RumikError, RuntimeError):
    """Prepared data cannot be used with this model or config; the message names the fix."""


def stable_hash(text: str) -> int:
    return zlib.crc32(text.encode("utf-8"))


class DataSource:
    """One prepared DATA_DIR: index rows plus memory-mapped code shards."""

    def __init__(self, path: str | Path, layout: TokenLayout, codec_sha256: str | None = None,
                 heldout_fraction: float = 0.0):
        self.path = Path(path)
        self.key = str(self.path.resolve())
        info_path, index_path = self.path / PREPARE_FILE, self.path / INDEX_FILE
        if not info_path.exists() or not index_path.exists():
            raise DataError(f"{self.path} is not a prepared data folder (no {PREPARE_FILE}/{INDEX_FILE}); "
                            f"run python -m training.prepare --manifest M.jsonl --model MODEL --out {self.path}")
        self.info = json.loads(info_path.read_text(encoding="utf-8"))
        if (self.info["num_quantizers"], self.info["codebook_size"]) != (layout.num_quantizers, layout.codebook_size):
            raise DataError(f"{self.path} holds {self.info['num_quantizers']}x{self.info['codebook_size']} codes; "
                            f"the model wants {layout.num_quantizers}x{layout.codebook_size}. Re-run training.prepare "
                            f"with this --model.")
        if codec_sha256 is not None and self.info.get("codec_sha256") != codec_sha256:
            raise DataError(f"{self.path} was encoded with a different Mimi codec than the model's; re-run "
                            f"python -m training.prepare with --model set to the checkpoint you train.")
        index = index_path.read_bytes()
        # What the data is, not where it is: seeds the sampler's epoch order (module docstring).
        self.fingerprint = hashlib.sha256(index).hexdigest()
        self.rows = [json.loads(line) for line in index.decode("utf-8").split("\n") if line.strip()]
        if not self.rows:
            raise DataError(f"{self.path} has no usable clips (see {self.path / 'report.json'}).")
        self._shards: dict[int, np.ndarray] = {}
        cut = int(round(heldout_fraction * HASH_BUCKETS))
        held = [stable_hash(f"{r['audio']}#{r['line']}") % HASH_BUCKETS < cut for r in self.rows]
        self.train_items = [i for i, h in enumerate(held) if not h]
        self.heldout_items = [i for i, h in enumerate(held) if h]
        if not self.train_items:
            raise DataError(f"{self.path}: every clip fell in the held-out split; lower eval.fraction.")

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def speakers(self) -> set[str]:
        return {r["speaker"] for r in self.rows}

    def frames(self, i: int) -> int:
        return int(self.rows[i]["frames"])

    def codes(self, i: int) -> np.ndarray:
        """Codes of clip i: [Q, T] int64."""
        row = self.rows[i]
        shard = self._shards.get(row["shard"])
        if shard is None:
            shard = np.load(self.path / SHARDS_DIR / f"shard_{row['shard']:05d}.npy", mmap_mode="r")
            self._shards[row["shard"]] = shard
        return np.asarray(shard[row["offset"] : row["offset"] + row["frames"]], dtype=np.int64).T

    def request(self, i: int) -> SynthesisRequest:
        """The SynthesisRequest whose prompt this clip was spoken for (text, voice, description)."""
        row = self.rows[i]
        extras = {k: row[k] for k in DESCRIPTION_FIELDS if row.get(k) not in (None, "")}
        return SynthesisRequest(row["text"], voice=row["speaker"], language=row.get("language"), **extras)


@dataclass(frozen=True)
class StagePlan:
    """A curriculum stage resolved to source keys: `steps` optimizer steps over `mixture`."""

    name: str
    steps: int
    mixture: tuple[tuple[str, float], ...]  # (source key, weight)


class MixtureSampler:
    """Deterministic curriculum sampler over several sources (see the module docstring).

    order_keys: per source key, the text that seeds its epoch permutations (the trainer
    passes `DataSource.fingerprint`); a source missing from it uses its key.
    """

    def __init__(self, stages: Sequence[StagePlan], items: dict[str, Sequence[int]], seed: int,
                 order_keys: dict[str, str] | None = None):
        if not stages:
            raise DataError("the config has no stages; add at least one [[stages]] with steps and a mixture")
        for stage in stages:
            if stage.steps < 1 or not stage.mixture or any(w < 0 for _, w in stage.mixture) \
                    or sum(w for _, w in stage.mixture) <= 0:
                raise DataError(f"stage {stage.name!r} needs steps >= 1 and a mixture with positive weights")
        self.stages, self.items, self.seed = list(stages), {k: list(v) for k, v in items.items()}, int(seed)
        self.positions = {key: 0 for key in self.items}
        self.order_keys = {key: (order_keys or {}).get(key, key) for key in self.items}
        self.next_step = 0
        self._perm: dict[str, tuple[int, np.ndarray]] = {}

    @property
    def total_steps(self) -> int:
        return sum(s.steps for s in self.stages)

    def stage_at(self, step: int) -> tuple[int, StagePlan]:
        """(index, stage) that optimizer step `step` (0-based) belongs to."""
        start = 0
        for index, stage in enumerate(self.stages):
            if step < start + stage.steps:
                return index, stage
            start += stage.steps
        raise DataError(f"step {step} is past the last stage ({self.total_steps} steps in all)")

    def _item(self, key: str) -> int:
        pool, pos = self.items[key], self.positions[key]
        epoch = pos // len(pool)
        cached = self._perm.get(key)
        if cached is None or cached[0] != epoch:
            rng = np.random.default_rng([self.seed, stable_hash(self.order_keys[key]), epoch])
            order = rng.permutation(len(pool))
            cached = (epoch, order)
            self._perm[key] = cached
        self.positions[key] = pos + 1
        return pool[int(cached[1][pos % len(pool)])]

    def global_batch(self, step: int, size: int) -> list[tuple[str, int]]:
        """The `size` (source key, item) pairs of optimizer step `step`; call steps in order."""
        if step != self.next_step:
            raise DataError(f"sampler is at step {self.next_step}, asked for {step} (restore its state first)")
        _, stage = self.stage_at(step)
        keys = [k for k, _ in stage.mixture]
        weights = np.array([w for _, w in stage.mixture], dtype=np.float64)
        rng = np.random.default_rng([self.seed, step])
        picks = rng.choice(len(keys), size=size, p=weights / weights.sum())
        self.next_step = step + 1
        return [(keys[c], self._item(keys[c])) for c in picks]

    def state_dict(self) -> dict:
        return {"positions": dict(self.positions), "next_step": self.next_step, "order_keys": dict(self.order_keys)}

    def load_state_dict(self, state: dict) -> None:
        """Continue a saved run: its positions, and the order keys it started with (so the epoch
        in progress keeps its permutation; checkpoints from before order keys used the path)."""
        unknown = set(state["positions"]) - set(self.positions)
        if unknown:
            raise DataError(f"the checkpoint's data position names sources not in this config: {sorted(unknown)}")
        self.positions.update({k: int(v) for k, v in state["positions"].items()})
        self.order_keys.update(state.get("order_keys") or {k: k for k in state["positions"]})
        self.next_step = int(state["next_step"])
        self._perm.clear()


def rank_micro_batches(batch: list[tuple[str, int]], frames: dict[str, DataSource], rank: int, world: int,
                       micro_batch: int) -> list[list[tuple[str, int]]]:
    """This rank's slice of a global batch, sorted longest first, cut into micro-batches."""
    per_rank = len(batch) // world
    mine = batch[rank * per_rank : (rank + 1) * per_rank]
    mine = sorted(mine, key=lambda ki: -frames[ki[0]].frames(ki[1]))
    return [mine[i : i + micro_batch] for i in range(0, len(mine), micro_batch)]
