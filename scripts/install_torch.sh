#!/usr/bin/env bash
# Put torch into the venv that `make test` builds, cheapest first:
#   1. torch is already importable there (a GPU machine's venv made with --system-site-packages): keep it;
#   2. the CPU build from the CPU wheel index, when that index answers (no CUDA libraries to download);
#   3. otherwise (a machine that reaches only the public index) torch from the configured index, which on
#      Linux x86-64 is the CUDA build: a few GB more, and it runs the CPU test suite all the same.
# usage: install_torch.sh VENV_PYTHON VERSION [CPU_INDEX_URL]   (an empty URL skips step 2)
set -euo pipefail
python=$1
version=$2
index=${3:-}

if "$python" -c "import torch" 2>/dev/null; then
  echo "install_torch: torch $("$python" -c 'import torch; print(torch.__version__)') is already importable: using it"
  exit 0
fi
# Asked once, briefly, so an unreachable index costs a second instead of pip's retries on every package.
if [ -n "$index" ] && "$python" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=10)" \
    "${index%/}/torch/" 2>/dev/null; then
  echo "install_torch: torch==$version, CPU build, from $index"
  exec "$python" -m pip install -q --index-url "$index" "torch==$version"
fi
if [ -n "$index" ]; then
  echo "install_torch: $index cannot be reached; torch==$version comes from the configured index" \
       "(on Linux x86-64 that is the CUDA build, a few GB, unless the index holds a CPU wheel)" >&2
fi
exec "$python" -m pip install -q "torch==$version"
