"""Per-harness adapters: bundles, rendered config files, the one-shot command."""
