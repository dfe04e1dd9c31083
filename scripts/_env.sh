# Sourced by scripts/dev and scripts/test: finds Python 3.12+, creates .venv and installs the
# project into it when pyproject.toml changed since the last install.
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

extras="${1:-}"
if [ ! -x .venv/bin/python ]; then
  python=$(find_python)
  if ! "$python" -m venv .venv 2>/dev/null; then
    echo "creating the virtual environment failed: on Debian/Ubuntu run 'sudo apt-get install python3-venv'" >&2
    exit 1
  fi
fi
stamp=".venv/.installed${extras:+-$extras}"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e ".${extras:+[$extras]}"
  touch "$stamp"
fi
export PATH="$PWD/.venv/bin:$PATH"
