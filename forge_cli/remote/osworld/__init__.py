"""Runs in OSWorld's environment (``$FORGE_HOME/envs/osworld``: desktop-env and what its evaluators import):
``host_runner.py``, a standalone script (standard library and desktop_env, nothing of forge) that
``forge_cli/desktop/osworld_env.py`` runs by its path, one process per step (setup, evaluate, fetch)."""
