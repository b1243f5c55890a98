"""Harness bundles, adapters and recorded harness requests."""
