"""Runs in mitmproxy's environment (``$FORGE_HOME/envs/mitmproxy``), started by ``proxy/launcher.py``: the capture
proxy's process (``main.py``: mitmproxy's core with forge's addon) and its store writer (``writer.py``, the proxy's
child). Their import root holds forge's ``proxy/``, ``traces/``, ``plugins.py`` and this subpackage, nothing else."""
