"""Prefix replay: a recorded rollout re-run with its first K model calls answered from the recording.

``script`` reads a rollout's recorded calls into what a replay answers; ``compare`` checks a replayed request's
prompt against the recorded one; ``server`` is the upstream that answers (between the capture proxy and the
policy server); ``run`` is ``forge rollout --replay``. docs/replay.md describes it for users.
"""
