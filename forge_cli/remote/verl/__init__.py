"""Runs in veRL's environment (``$FORGE_HOME/envs/verl``, forge installed into it): forge's agent loop
(``agent_loop.ForgeHarnessAgentLoop``) inside veRL's Ray workers and forge's sampler (``sampler.ForgeReplayBuffer``)
in veRL's trainer process, each loaded by the dotted path that ``forge train trainer=verl`` names
(``train/verl/mapping.py: AGENT_LOOP_TARGET, SAMPLER``). The rest of forge's veRL integration (``train/verl/``)
runs in forge's process and plans the run; ``train/verl/counters.py`` is shared (importable without veRL)."""
