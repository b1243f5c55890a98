"""Code that runs outside the ``forge`` process: one subpackage per place it runs.

- ``mitmproxy/``: mitmproxy's environment (``$FORGE_HOME/envs/mitmproxy``): the capture proxy's process and its
  store writer, started by name (``python -m``) with an import root of forge's proxy-side packages only;
- ``verl/``: veRL's environment: forge's agent loop inside veRL's Ray workers, loaded by its dotted path;
- ``osworld/``: OSWorld's environment: OSWorld's task setup and scoring, run as a script;
- ``sandbox/``: the sandbox's ``python3`` (standard library only): forge's react harness, copied into its bundle.

Nothing in forge's own process imports this package (an import contract in ``pyproject.toml``): each module here is
started by name or by path in its own interpreter, and imports only what that interpreter has (``entrypoints.py``
lists them; ``tests/test_entrypoints.py`` imports each where it runs; ``docs/architecture.md``, the process map).
"""
