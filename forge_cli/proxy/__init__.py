"""The capture proxy: a mitmproxy addon (run by mitmdump as a child process) that serves and records model calls.

The addon and the modules it hands its hooks to run in mitmproxy's own virtual environment; ``launcher`` and
``client`` run in forge's and start or talk to it. The processes that run there are started by name from
``forge_cli/remote/mitmproxy/``: the proxy (``main.py``, mitmproxy's master with this addon) and its store writer
(``writer.py``).
"""
