"""Browsers for web tasks: one headless Chromium per rollout, driven through @playwright/mcp."""
