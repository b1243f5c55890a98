"""Conformance kits for forge's extension points, importable so that a plugin in its own package can run them
(as inspect_ai ships ``self_check``). Each kit returns the problems it found (empty: the plugin conforms); forge's
own tests run every kit over every registered plugin, and over plugins with one planted defect each.

Beside the kits, two test doubles the CLI itself runs: the teacher stand-in (``teacher_standin.py``, an
OpenAI-compatible server answering the builtin train tasks with their reference solutions) and the harness drift
guard's canary (``harness_canary.py``: ``forge harness fingerprint`` / ``check``)."""
