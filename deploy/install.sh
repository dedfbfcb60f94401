#!/usr/bin/env sh
# Install Threadkeeper with only what running it needs into the virtualenv DIR (created if missing).
# The container image runs exactly this; so can any host: deploy/install.sh /opt/threadkeeper
set -eu
venv="${1:?usage: deploy/install.sh VENV_DIR [SOURCE_DIR]}"
source_dir="${2:-$(cd "$(dirname "$0")/.." && pwd)}"
python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
  || { echo "Threadkeeper needs Python 3.11 or newer" >&2; exit 1; }
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --no-cache-dir --disable-pip-version-check \
  -c "$source_dir/constraints.txt" "$source_dir"
"$venv/bin/threadkeeper" --help > /dev/null
echo "installed: $venv/bin/threadkeeper"
