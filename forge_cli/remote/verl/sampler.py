"""``ForgeReplayBuffer``: veRL 0.9.1's sync replay buffer with forge's counters added to each batch's metrics
(``counters``). Imported only inside veRL's environment; forge names it in ``trainer.v1.sampler.custom_sampler``.

veRL gives a custom sampler only its base arguments; the ones its built-in sampler gets from the trainer (DAPO's
filter metric, ``sync_refill_failed_groups``, the batch sizes) forge passes in ``trainer.v1.sampler.sampler_kwargs``
with the same values veRL's ``_build_replay_buffer`` computes (``mapping.overrides``), beside
``forge_counters_dir``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

from forge_cli.train.verl.counters import Deltas

# sampler_kwargs forge passes on to veRL's ReplayBuffer (the rest of its arguments come from veRL itself)
PASSED = ("filter_groups_metric", "sync_refill_failed_groups", "train_batch_size", "gen_batch_size",
          "max_inflight_gen_batches")


class ForgeReplayBuffer(ReplayBuffer):
    def __init__(self, *args: Any, sampler_kwargs: Any = None, **kwargs: Any) -> None:
        own = dict(sampler_kwargs or {})
        self.forge_deltas = Deltas(Path(str(own.pop("forge_counters_dir"))))
        passed = {k: own.pop(k) for k in PASSED if k in own}
        super().__init__(*args, sampler_kwargs=own, **kwargs, **passed)

    def sample(self, *args: Any, **kwargs: Any) -> Any:
        batch, metrics = super().sample(*args, **kwargs)
        return batch, {**metrics, **self.forge_deltas()}
