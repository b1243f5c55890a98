"""Deprecated alias: forge's agent loop is ``forge_cli.remote.verl.agent_loop`` (it runs in veRL's Ray workers).

Kept for the agent-loop registrations an earlier forge wrote into run directories (``verl/agent_loops.yaml``:
``_target_: forge_cli.train.verl.agent_loop.ForgeHarnessAgentLoop``, which that run's ``verl/command.sh`` passes
to veRL), so that such a command still runs. Imported only by veRL from such a stored path; forge itself registers
the new path. To be removed once no such run directory is in use.
"""

import warnings

from forge_cli.remote.verl.agent_loop import ForgeHarnessAgentLoop as ForgeHarnessAgentLoop

warnings.warn("forge_cli.train.verl.agent_loop is deprecated: use forge_cli.remote.verl.agent_loop",
              DeprecationWarning, stacklevel=2)
