"""Composing and validating experiments (the only part that imports Hydra)."""
