"""``env=osworld``: OSWorld (not built yet: its tasks need a desktop sandbox and OSWorld's own evaluators).

Reading a checkout's ``evaluation_examples/<split>.json`` is easy; scoring a task is not: every OSWorld task is
judged by its evaluator functions against the desktop's final state. Until the desktop sandbox exists this
source refuses to run rather than offer tasks that could only score 0.
"""

from __future__ import annotations

from forge_cli.envs.pending import PendingSource


class OSWorldSource(PendingSource, name="osworld"):
    benchmark = "OSWorld"
    missing = "its tasks need a desktop sandbox (VM or container with a display) and OSWorld's own evaluators"
