"""Deprecated alias: forge's sampler is ``forge_cli.remote.verl.sampler`` (it runs in veRL's trainer process).

Kept for the commands an earlier forge wrote into run directories (``verl/command.sh``:
``trainer.v1.sampler.custom_sampler.path=pkg://forge_cli.train.verl.sampler``), so that such a command still runs.
Imported only by veRL from such a stored path; forge itself names the new path. To be removed once no such run
directory is in use.
"""

import warnings

from forge_cli.remote.verl.sampler import ForgeReplayBuffer as ForgeReplayBuffer

warnings.warn("forge_cli.train.verl.sampler is deprecated: use forge_cli.remote.verl.sampler",
              DeprecationWarning, stacklevel=2)
