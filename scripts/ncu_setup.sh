# Sourced by scripts/device_profile_mamba2.sh and device_profile_verify.sh: strict mode, the
# repository root as the working directory, $OUT (default benchmarks/results) created, and the
# Nsight Compute sections both collect (SECTIONS).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${OUT:-benchmarks/results}"
mkdir -p "$OUT"
SECTIONS=(--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats
          --section MemoryWorkloadAnalysis --section SchedulerStats --section InstructionStats)
