# Sourced by scripts/dev and scripts/test, which then call `ensure_venv [extras]`: finds Python
# 3.12+, creates .venv and installs the project into it (with the extras named, e.g. `test`) when
# pyproject.toml changed since the last install. Sourcing takes no arguments, so the calling
# script's own arguments (e.g. `./scripts/dev --port 9000`) never reach the install.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

find_python() {
  for candidate in "${PYTHON:-}" python3.13 python3.12 python3 python; do
    [ -n "$candidate" ] || continue
    if command -v "$candidate" >/dev/null 2>&1 &&
      "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      echo "$candidate"
      return 0
    fi
  done
  echo "Python 3.12 or newer is needed (set PYTHON=/path/to/python3.12)" >&2
  return 1
}

# An install stamp newer than pyproject.toml: that install is current.
installed() {
  [ -f "$1" ] && ! [ pyproject.toml -nt "$1" ]
}

ensure_venv() {
  local extras="${1:-}"
  case "$extras" in
    "" | test) ;;
    *)
      echo "scripts/_env.sh: unknown extras '$extras' (known: test)" >&2
      exit 2
      ;;
  esac
  if [ ! -x .venv/bin/python ]; then
    local python
    python=$(find_python)
    if ! "$python" -m venv .venv 2>/dev/null; then
      echo "creating the virtual environment failed: on Debian/Ubuntu run 'sudo apt-get install python3-venv'" >&2
      exit 1
    fi
  fi
  local stamp=".venv/.installed${extras:+-$extras}"
  # The test extras include everything the box needs: a current test install serves the box too.
  if ! installed "$stamp" && ! { [ -z "$extras" ] && installed .venv/.installed-test; }; then
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e ".${extras:+[$extras]}"
    touch "$stamp"
  fi
  export PATH="$PWD/.venv/bin:$PATH"
}
