# The two commands a newcomer needs (see README.md). Both install whatever is missing first.
.PHONY: run test test-e2e lint docs

# the main job on the embedded defaults: a short forge train (react harness x builtin train tasks x local sandboxes,
# SmolLM2 on vLLM): 2 steps x 2 tasks x 4 rollouts, each step ending in a weight update the policy server reloads
run:
	scripts/setup.sh core vllm mitmproxy model
	.venv/bin/forge train trainer.steps=2 trainer.tasks_per_step=2

# everything the test suite needs (also Docker, the base image and the pi bundle: one real harness rollout), then
# lint, types, the docs site (broken links and missing pages fail) and tests; under CI=true a test whose part this
# installed fails instead of skipping (tests/requires.py)
test:
	scripts/setup.sh all
	FORGE_HARNESSES=pi scripts/setup.sh harnesses
	.venv/bin/ruff check forge_cli tests benchmarks scripts
	.venv/bin/mypy
	.venv/bin/lint-imports
	.venv/bin/mkdocs build --strict
	.venv/bin/pytest -m "not e2e"

# the real-harness end-to-end suite (every harness bundle, docker, vLLM with a 32k context, OSWorld's desktop image;
# ~45+ min on 2 cores, plus 10-20 min building the desktop image the first time)
test-e2e:
	scripts/setup.sh all harnesses desktop
	.venv/bin/pytest -m e2e -s

lint:
	.venv/bin/ruff check forge_cli tests benchmarks scripts
	.venv/bin/mypy
	.venv/bin/lint-imports
	.venv/bin/mkdocs build --strict

# the documentation site into site/ (git-ignored): the options reference regenerated from the config schema, then
# mkdocs build --strict (a broken link, a missing page or a bad anchor fails); `.venv/bin/mkdocs serve` to browse
docs:
	.venv/bin/python -m forge_cli.config.reference docs/reference/options
	.venv/bin/mkdocs build --strict
