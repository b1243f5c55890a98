"""forge: train LLM agents with RL inside the real harness they are deployed in."""

__version__ = "0.1.0"
