#!/usr/bin/env bash
# Export a git revision's code (package, builders, plugins, tests, benchmarks) under variants/NAME,
# for timing it side by side with the working tree in one device call (scripts/device_compare.sh)
# or running its GPU tests there (cd variants/NAME && PYTHONPATH=$PWD python3 -m pytest ...).
# variants/ is kept out of git through .git/info/exclude, so the device tool carries it only when
# named in `carry`.
#   bash scripts/export_variant.sh main main        # then run(..., carry=["variants"])
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $# -ne 2 ]]; then
  echo "usage: scripts/export_variant.sh REV NAME" >&2
  exit 2
fi
rev=$1 name=$2
grep -qx '/variants/' .git/info/exclude 2>/dev/null || echo '/variants/' >> .git/info/exclude
rm -rf "variants/$name"
mkdir -p "variants/$name"
# raw results stay behind: the device tool carries 64 MiB; the tests import builders and plugins
git archive "$rev" trtllm_replayssm builders plugins tests benchmarks pytest.ini setup.py \
  | tar -x -C "variants/$name" --exclude=benchmarks/results
echo "variants/$name <- $(git rev-parse --short "$rev")"
