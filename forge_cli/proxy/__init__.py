"""The capture proxy: a mitmproxy addon (run by mitmdump as a child process) that serves and records model calls.

Only ``addon.py`` imports mitmproxy; every other module here is stdlib-only so that it runs inside
mitmproxy's own virtual environment as well as forge's.
"""
