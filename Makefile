# The two commands a newcomer needs (see README.md). Both install whatever is missing first.
.PHONY: run test lint

# the main job on the embedded defaults: react harness x builtin tasks x local sandboxes, SmolLM2 on vLLM
run:
	scripts/setup.sh core vllm mitmproxy model
	.venv/bin/forge rollout

# everything the test suite needs (also Docker and the base image), then lint, types and tests
test:
	scripts/setup.sh all
	.venv/bin/ruff check forge_cli tests benchmarks scripts
	.venv/bin/mypy
	.venv/bin/pytest

lint:
	.venv/bin/ruff check forge_cli tests benchmarks scripts
	.venv/bin/mypy
