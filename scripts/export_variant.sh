#!/usr/bin/env bash
# Export a git revision's kernels and benchmarks under variants/NAME, for timing it side by side
# with the working tree in one device call (scripts/device_compare.sh). variants/ is kept out of
# git through .git/info/exclude, so the device tool carries it only when named in `carry`.
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
git archive "$rev" trtllm_replayssm benchmarks | tar -x -C "variants/$name" --exclude=benchmarks/results  # raw results stay behind: the device tool carries 64 MiB
echo "variants/$name <- $(git rev-parse --short "$rev")"
