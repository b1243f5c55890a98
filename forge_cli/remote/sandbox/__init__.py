"""Runs inside the sandbox, with the sandbox image's ``python3`` and its standard library only: forge's own
harness (``react_agent.py``, ``forge-react``), which the builtin installer (``harness/installers/builtin.py``)
copies into the harness bundle by its path; nothing here is imported."""
