"""Where the stages run: one process ("local"), or Ray Data on this machine or a cluster ("ray").

    run_local(tasks, cleaner_args, encoder_args, progress)
    run_ray(tasks, cleaner_args, encoder_args, progress, address=None, workers=2, encoders=None)

Both run `Cleaner` (read, decode, segment, filter, embed) and then `Encoder` (Mimi, write) on
whole shards, so they write the same files. Under Ray the cleaners are a pool of CPU actors and
the encoders a pool of Mimi actors, one GPU each where the cluster has GPUs, and Ray Data streams
shards between them (a shard's audio is one object: `shard_size` bounds it). Without `address`
Ray starts on this machine with workers + encoders CPUs; with one it joins that cluster, whose
nodes need this package installed and `--out` on a disk they all see.
"""

from __future__ import annotations

import json
import logging
import os

from tqdm import tqdm

from training.prepare.clean import Cleaner
from training.prepare.rows import ShardTask
from training.prepare.shards import Encoder, PrepareError

ENGINES = ("local", "ray")
log = logging.getLogger(__name__)


def run_local(tasks: list[ShardTask], cleaner_args: dict, encoder_args: dict, progress: tqdm) -> None:
    """Every pending shard, one after the other, in this process."""
    if not tasks:
        return
    cleaner, encoder = Cleaner(**cleaner_args), Encoder(**encoder_args)
    for task in tasks:
        encoder.write(cleaner.clean(task))
        progress.update(task.num_lines)


def run_ray(tasks: list[ShardTask], cleaner_args: dict, encoder_args: dict, progress: tqdm,
            address: str | None = None, workers: int = 2, encoders: int | None = None) -> None:
    """Every pending shard through Ray Data: cleaner actors -> Mimi actors (module docstring)."""
    if not tasks:
        return
    try:
        import ray
        import ray.data
    except ImportError as exc:
        raise PrepareError("--engine ray needs Ray Data: pip install 'ray[data]==2.60.0' (the train extra).") from exc
    started = not ray.is_initialized()
    if started:
        init_ray(ray, address, workers, encoders or 1)
    try:
        gpus, encoders = check_resources(ray.cluster_resources(), workers, encoders)
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False
        rows = [{"task": json.dumps(task.__dict__)} for task in tasks]
        dataset = ray.data.from_items(rows, override_num_blocks=len(rows))  # one shard per block: all actors busy
        dataset = dataset.map(Cleaner, fn_constructor_kwargs=cleaner_args, num_cpus=1,
                              compute=ray.data.ActorPoolStrategy(size=max(1, workers)))
        encoder_args = {**encoder_args, "device": "cuda" if gpus else "cpu"}
        dataset = dataset.map(Encoder, fn_constructor_kwargs=encoder_args, num_gpus=1 if gpus else 0,
                              num_cpus=0 if gpus else 1, compute=ray.data.ActorPoolStrategy(size=encoders))
        for row in dataset.iter_rows():
            progress.update(int(row["lines"]))
    except PrepareError:
        raise
    except Exception as exc:  # a RayTaskError wraps the actor's exception; its last line says what failed
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise PrepareError(f"The Ray run stopped: {reason}. Finished shards are kept; run the same command "
                           "again to resume.") from exc
    finally:
        if started:
            ray.shutdown()


def check_resources(resources: dict, workers: int, encoders: int | None) -> tuple[int, int]:
    """(GPUs, encoders) for this cluster; PrepareError when the actor pools could never all start
    (Ray would wait for them for ever)."""
    cpus, gpus = int(resources.get("CPU", 0)), int(resources.get("GPU", 0))
    encoders = encoders or max(1, gpus)
    if gpus and encoders > gpus:
        raise PrepareError(f"--encoders {encoders} asks for more GPUs than the cluster has ({gpus}): lower it.")
    needed = workers + (0 if gpus else encoders)
    if needed > cpus:
        raise PrepareError(f"--workers {workers} and {encoders} CPU encoder(s) need {needed} CPUs; the cluster has "
                           f"{cpus}: lower --workers.")
    return gpus, encoders


def init_ray(ray, address: str | None, workers: int, encoders: int) -> None:
    """Join the cluster at `address`, or start Ray here with one CPU per actor."""
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    kwargs = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING}
    if address:
        ray.init(address=address, **kwargs)
    else:
        ray.init(num_cpus=max(1, workers) + encoders, **kwargs)
