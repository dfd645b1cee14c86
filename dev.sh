#!/usr/bin/env bash
# commscope's set-up and entry point for a fresh clone.
#   ./dev.sh app [streamlit flags]   set up .venv (once) and serve the app on the bundled data
#   ./dev.sh test [pytest args]      set up .venv (once) and run the full test suite (ruff + pytest); with
#                                    arguments, pytest runs with just those
#   ./dev.sh setup                   only set up .venv
# The virtual environment is project-local (.venv, or $COMMSCOPE_VENV) and reused; it is brought
# up to date whenever pyproject.toml or this script changes.
# PyTorch: a CUDA torch that the base Python already has is kept (the venv sees it). Without a
# CUDA GPU the CPU build torch==2.13.0 is installed, and the install stops rather than pull a
# multi-GB CUDA build (set COMMSCOPE_TORCH_INDEX to a CPU wheel index, e.g. PyTorch's /whl/cpu).
set -euo pipefail
cd "$(dirname "$0")"
VENV="${COMMSCOPE_VENV:-.venv}"
BASE_PYTHON="${PYTHON:-python3}"
TORCH_CPU_VERSION="2.13.0"

say() { printf '[commscope] %s\n' "$*" >&2; }

# pip, with its output kept out of the way unless something fails (and without the noise of
# configured package locations that do not exist on this machine)
pip_quiet() {
  local log rc=0
  log="$(mktemp)"
  "$VENV/bin/python" -m pip "$@" >"$log" 2>&1 || rc=$?
  grep -v "is ignored: it is neither a file nor a directory" "$log" | grep -v '^\s*$' >&2 || true
  rm -f "$log"
  return $rc
}

has_cuda_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

base_has_cuda_torch() {
  "$BASE_PYTHON" -c 'import torch, sys; sys.exit(0 if torch.version.cuda else 1)' >/dev/null 2>&1
}

install_cpu_torch() {
  local report
  report="$(mktemp)"
  # Resolve first, download nothing big: refuse a plan that would bring CUDA wheels.
  if "$VENV/bin/python" -m pip install --quiet --dry-run --ignore-installed --report "$report" \
        "torch==$TORCH_CPU_VERSION" ${COMMSCOPE_TORCH_INDEX:+--index-url "$COMMSCOPE_TORCH_INDEX"} >/dev/null 2>&1 \
     && ! grep -Eq '"name": "(nvidia-|triton)' "$report"; then
    pip_quiet install --quiet "torch==$TORCH_CPU_VERSION" ${COMMSCOPE_TORCH_INDEX:+--index-url "$COMMSCOPE_TORCH_INDEX"}
  else
    rm -f "$report"
    say "torch==$TORCH_CPU_VERSION would come as a CUDA build (or not at all) on this CPU-only machine."
    say "Set COMMSCOPE_TORCH_INDEX to a CPU wheel index and run again."
    exit 1
  fi
  rm -f "$report"
}

setup() {
  "$BASE_PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' \
    || { say "commscope needs Python >= 3.10 ($BASE_PYTHON is $("$BASE_PYTHON" -V 2>&1))"; exit 1; }
  if [ ! -x "$VENV/bin/python" ]; then
    if has_cuda_gpu && base_has_cuda_torch; then
      say "creating $VENV with access to the base Python's CUDA torch"
      "$BASE_PYTHON" -m venv --system-site-packages "$VENV"
    else
      say "creating $VENV"
      "$BASE_PYTHON" -m venv "$VENV"
    fi
  fi
  local stamp="$VENV/.commscope-setup" want
  want="$(cat pyproject.toml dev.sh | sha256sum | cut -d' ' -f1)"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then return 0; fi
  say "installing commscope and its dependencies into $VENV (first run, or pyproject.toml changed)"
  pip_quiet install --quiet --upgrade pip || say "could not upgrade pip; going on with $("$VENV/bin/python" -m pip -V)"
  if ! "$VENV/bin/python" -c 'import torch' >/dev/null 2>&1; then
    if has_cuda_gpu; then
      say "CUDA GPU found and no torch: installing the default (CUDA) torch build"
      pip_quiet install --quiet torch
    else
      install_cpu_torch
    fi
  fi
  pip_quiet install --quiet -e ".[all,dev]" || { say "installing commscope failed: see above"; exit 1; }
  "$VENV/bin/python" -c 'import costmodels, convergence, runners, app, torch, pytest' \
    || { say "set-up failed: see the messages above"; exit 1; }
  echo "$want" > "$stamp"
}

# System tools some tests need: a browser for the app's end-to-end test (Debian's chromium, driven by
# Playwright with executable_path; never a downloaded browser) and iproute2 for emulated networks.
system_tools() {
  local missing=()
  command -v chromium >/dev/null 2>&1 || missing+=(chromium)
  command -v ip >/dev/null 2>&1 || missing+=(iproute2)
  command -v tc >/dev/null 2>&1 || missing+=(iproute2)
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing ${missing[*]} with apt-get (tests of the app in a browser and of emulated networks)"
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null; }; } \
      || say "could not install ${missing[*]}: the tests that need them will fail and say why"
  else
    say "missing ${missing[*]} (needs root and apt-get to install): the tests that need them will fail and say why"
  fi
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
  setup) setup ;;
  app)
    setup
    say "serving the app; open the URL below in a browser"
    exec "$VENV/bin/commscope" app "$@" ;;
  test)
    setup
    system_tools
    "$VENV/bin/ruff" check .
    [ $# -gt 0 ] && exec "$VENV/bin/python" -m pytest "$@"  # with arguments: pytest with just those, serially
    # The whole suite in two passes. First the app's in-process page tests (marker app_inprocess, set by
    # tests/conftest.py: Streamlit's AppTest, no process started, nothing timed against another process) on
    # two pytest-xdist workers, a file to a worker. Then every other test one at a time, in the order of the
    # serial suite: the tests that start ranks, emulated networks, the app server or a browser time real processes
    # on the same cores and would measure each other.
    rc=0
    "$VENV/bin/python" -m pytest -n "${COMMSCOPE_TEST_WORKERS:-2}" --dist loadfile -m app_inprocess || rc=$?
    "$VENV/bin/python" -m pytest -m "not app_inprocess" || { r=$?; [ $rc -ne 0 ] || rc=$r; }
    exit $rc ;;
  *)
    echo "usage: ./dev.sh app [streamlit flags] | ./dev.sh test [pytest args] | ./dev.sh setup" >&2
    exit 2 ;;
esac
