#!/usr/bin/env bash
# GPU smoke run of `forge train trainer=verl` for users with a CUDA machine that reaches PyPI (not runnable on forge's
# CPU machines; nothing of it has run on a GPU yet, see docs/verl.md):
#   FORGE_SMOKE_MODEL=DIR benchmarks/verl_smoke.sh [extra overrides...]
# 3 veRL steps on one GPU: a policy that calls tools (FORGE_SMOKE_MODEL: a Hugging Face directory, e.g. the SFT
# checkpoint of `benchmarks/learning.py --sft --harness pi`, docs/sft.md; the default SmolLM2 never emits a valid
# tool call, docs/results/teacher-sft.md) through the real pi harness in docker sandboxes on the builtin train tasks,
# GRPO groups of 4, every model call through forge's capture proxy in front of veRL's vLLM replica.
# Passes when veRL exits 0, its log shows 3 training steps, the last checkpoint exists and at least one tool call
# came back with its result (benchmarks/tool_calls.py over the workers' records): a run whose policy never called a
# tool would prove nothing about the harnesses.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v nvidia-smi >/dev/null || { echo "verl_smoke: needs an NVIDIA GPU (nvidia-smi not found)" >&2; exit 1; }
model=${FORGE_SMOKE_MODEL:-}
[ -f "$model/config.json" ] || {
  echo "verl_smoke: set FORGE_SMOKE_MODEL to a model directory whose policy calls tools (config.json in it), e.g." >&2
  echo "  .venv/bin/python benchmarks/learning.py --sft --harness pi --repeats 1 --control none \\" >&2
  echo "      --output-dir runs/learning-sft-pi -- runtime=docker   # then its checkpoint: docs/sft.md" >&2
  exit 2; }
scripts/setup.sh core model docker verl-gpu
FORGE_HARNESSES=pi scripts/setup.sh harnesses
out=${FORGE_SMOKE_DIR:-runs/verl-smoke}
.venv/bin/forge doctor trainer=verl trainer.n_gpus_per_node=1 +harness=pi runtime=docker
.venv/bin/forge train trainer=verl trainer.n_gpus_per_node=1 trainer.steps=3 trainer.tasks_per_step=4 \
  algo.group_size=4 trainer.save_every=3 trainer.max_seq_len=4096 trainer.micro_batch_tokens=8192 \
  +harness=pi runtime=docker model=vllm model.path="$model" run.name=verl-smoke run.output_dir="$out" "$@"
run=$(ls -td "$out"/verl-smoke-* | head -1)
grep -q "training/global_step:3" "$run/verl/main_ppo.log" || { echo "verl_smoke: no step 3 in $run/verl/main_ppo.log" >&2; exit 1; }
[ -d "$run/checkpoints/global_step_3/actor" ] || { echo "verl_smoke: no checkpoint in $run/checkpoints" >&2; exit 1; }
.venv/bin/python benchmarks/tool_calls.py "$run/rollouts" --min 1 || { echo "verl_smoke: no tool call succeeded" >&2; exit 1; }
echo "verl_smoke: ok ($run)"
