"""The policy server: vLLM serving a model config, its default model, and weight updates.

    from forge_cli.serve import start_server, update_weights
    server = start_server(experiment.model, port=0)      # healthy when it returns
    server.url, server.base_url, server.model            # http://127.0.0.1:P, .../v1, served name
    update_weights(server, "runs/x/checkpoints/step-3")   # → "1"; weight_version(server) == "1"
    server.stop()                                          # the whole process group
"""

from forge_cli.serve.prepare import PreparedModel, prepare_default_model, resolve_model
from forge_cli.serve.server import PolicyServer, ServerError, free_port, health, start_server
from forge_cli.serve.weights import WeightUpdateError, update_weights, weight_version

__all__ = [
    "PolicyServer",
    "PreparedModel",
    "ServerError",
    "WeightUpdateError",
    "free_port",
    "health",
    "prepare_default_model",
    "resolve_model",
    "start_server",
    "update_weights",
    "weight_version",
]
