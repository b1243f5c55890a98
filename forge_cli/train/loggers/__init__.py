"""forge's own experiment loggers (``trainer.loggers``): one module each, found by where they live
(``forge_cli/config/loggers.py``: the interface and the registry)."""
