# The two commands a newcomer needs (see README.md). Both install whatever is missing first.
.PHONY: run test lint setup

run:
	scripts/setup.sh core
	.venv/bin/forge rollout --dry-run

test:
	scripts/setup.sh all
	.venv/bin/ruff check forge_cli tests benchmarks
	.venv/bin/mypy
	.venv/bin/pytest

lint:
	.venv/bin/ruff check forge_cli tests benchmarks
	.venv/bin/mypy
