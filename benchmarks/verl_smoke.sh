#!/usr/bin/env bash
# GPU smoke run of `forge train trainer=verl` for users with a CUDA machine (not runnable on forge's CPU machines):
#   benchmarks/verl_smoke.sh [extra overrides...]
# 3 veRL steps on one GPU: SmolLM2-135M (the default model), forge's react harness on the builtin train tasks in
# local sandboxes, GRPO groups of 4, every model call through forge's capture proxy in front of veRL's vLLM replica.
# Passes when veRL exits 0, its log shows 3 training steps and the last checkpoint exists.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v nvidia-smi >/dev/null || { echo "verl_smoke: needs an NVIDIA GPU (nvidia-smi not found)" >&2; exit 1; }
scripts/setup.sh core model verl-gpu
out=${FORGE_SMOKE_DIR:-runs/verl-smoke}
.venv/bin/forge doctor trainer=verl trainer.n_gpus_per_node=1
.venv/bin/forge train trainer=verl trainer.n_gpus_per_node=1 trainer.steps=3 trainer.tasks_per_step=4 \
  algo.group_size=4 trainer.save_every=3 trainer.max_seq_len=4096 trainer.micro_batch_tokens=8192 \
  run.name=verl-smoke run.output_dir="$out" "$@"
run=$(ls -td "$out"/verl-smoke-* | head -1)
grep -q "training/global_step:3" "$run/verl/main_ppo.log" || { echo "verl_smoke: no step 3 in $run/verl/main_ppo.log" >&2; exit 1; }
[ -d "$run/checkpoints/global_step_3/actor" ] || { echo "verl_smoke: no checkpoint in $run/checkpoints" >&2; exit 1; }
echo "verl_smoke: ok ($run)"
