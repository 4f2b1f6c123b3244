#!/usr/bin/env bash
# The device call that measures each issue-29 fusion against the tree without it, on one GPU (one machine, so the
# numbers compare). Fusions are switched off by name with DSV4_FUSION_OFF (dsv4/layers/kernels.py); add a fusion's
# name to FUSIONS when it lands. Results (logs, JSON rows) go to $OUT.
#
#   bash benchmarks/dsv4_fusion_device.sh bench   # pro-4L --runs full --steps 64 with all fusions off, each alone, all on
#   bash benchmarks/dsv4_fusion_device.sh tests   # kernel tests + bit-for-bit replay == eager on tiny
#   bash benchmarks/dsv4_fusion_device.sh all
#
# Run from the repository root with the device preamble (wheels on PYTHONPATH) already done.
set -uo pipefail
FUSIONS=(route combine index_scores fp8_matvec shared_rows)
OUT=${OUT:-/tmp/dsv4_fusion}
mkdir -p "$OUT"
ALL=$(IFS=,; echo "${FUSIONS[*]}")

bench() {  # name, DSV4_FUSION_OFF value
    echo "== $1 (off: ${2:-none})"
    DSV4_FUSION_OFF=$2 python3 benchmarks/dsv4_kernels.py --preset pro-4L --json "$OUT/kernels_$1.json" | tail -7
    DSV4_FUSION_OFF=$2 python3 benchmarks/dsv4_decode.py --preset pro-4L --runs full --steps 64 \
        --json "$OUT/decode_$1.json" 2>&1 | tail -3
}

stage_bench() {
    bench none "$ALL"
    for f in "${FUSIONS[@]}"; do
        bench "$f" "$(IFS=,; echo "${FUSIONS[*]/$f}" | sed 's/,,*/,/g; s/^,//; s/,$//')"
    done
    bench all ""
}

stage_tests() {
    python3 -m pytest -m gpu -q -n 4 --dist loadfile tests/dsv4/test_moe_kernels.py tests/dsv4/test_index_scores.py \
        tests/dsv4/test_graphs_gpu.py -k "moe or fused or index or replay_matches_eager" 2>&1 | tail -15
}

case "${1:-all}" in
    bench) stage_bench ;;
    tests) stage_tests ;;
    all) stage_tests; stage_bench ;;
    *) echo "usage: $0 bench|tests|all" >&2; exit 2 ;;
esac 2>&1 | tee "$OUT/fusion_${1:-all}.log"
