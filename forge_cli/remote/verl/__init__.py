"""Runs in veRL's environment (``$FORGE_HOME/envs/verl``, forge installed into it): forge's agent loop
(``agent_loop.ForgeHarnessAgentLoop``) inside veRL's Ray workers, loaded by the dotted path that
``forge train trainer=verl`` registers (``train/verl/mapping.py: AGENT_LOOP_TARGET``). The rest of forge's veRL
integration (``train/verl/``) runs in forge's process and plans the run."""
