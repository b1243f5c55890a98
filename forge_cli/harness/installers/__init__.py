"""forge's own harness installers (``harness.package.manager``), one module each, found by the installers' registry
(``forge_cli/harness/installer.py``): builtin, npm, pypi, binary."""
