#!/usr/bin/env bash
# Every experiment of Ruiz, Titsias & Blei (2016), Section 5 and supplement E, with grepvi.
# Usage: examples/reproduce.sh [BUDGET_SECONDS] [OUT] [JOBS]   (paper-length budgets are hours; see REPRODUCING.md)
# JOBS=1 (default): one run after another on every core (about 2.5 h at 600 s a run).
# JOBS=2: two sequences side by side, each pinned to one core with taskset (Olivetti, NIPS and
#   the samples sweep on core 0; MNIST and Omniglot on core 1): about 70 minutes at 600 s, and
#   each run's time per iteration is one core's.
# Needs the data files in $GREPVI_DATA_DIR (or pass --data-dir).
set -euo pipefail
BUDGET=${1:-600}
OUT=${2:-runs}
JOBS=${3:-1}
COMMON=(--time-budget "$BUDGET" --eval-samples 100 --refit-steps 2000 --elbo-every 100)

olivetti_nips_samples() {
  # Figure 1a, Figure 2b, Table 1, Figure 4 (Olivetti):
  grepvi compare --model sparse-gamma-def --dataset olivetti --estimators grep,advi,bbvi "${COMMON[@]}" --out "$OUT/olivetti"
  # Figure 2a (perplexity vs time) and Table 1, NIPS:
  grepvi compare --model sparse-gamma-def --dataset nips --estimators grep,advi,bbvi "${COMMON[@]}" --out "$OUT/nips"
  # Supplement E.1, Figure 3: G-REP with 1, 2, 5, 10, 20 samples, first 200 iterations, Olivetti,
  # Eq. 9 at Table 1's eta = 5 (clean since the models take log z: 0 skipped steps):
  grepvi samples --model sparse-gamma-def --dataset olivetti --sample-counts 1,2,5,10,20 --num-steps 200 \
    --step-size 5 --refit-steps 0 --eval-samples 10 --out "$OUT/olivetti-samples-eta5"
}

mnist_omniglot() {
  # Figures 1b, 1c, Figure 2b, Table 1, Figures 5-6:
  grepvi compare --model beta-gamma-mf --dataset mnist --estimators grep,advi,bbvi "${COMMON[@]}" --out "$OUT/mnist"
  grepvi compare --model beta-gamma-mf --dataset omniglot --estimators grep,advi "${COMMON[@]}" --out "$OUT/omniglot"
}
# The eta search of Table 1 (left): add --eta-search to any compare above (4 runs per estimator).

if [ "$JOBS" = 2 ]; then
  mkdir -p "$OUT"
  setup="set -euo pipefail; $(declare -p COMMON OUT)"
  taskset -c 0 bash -c "$setup; $(declare -f olivetti_nips_samples); olivetti_nips_samples" >"$OUT/core0.log" 2>&1 &
  first=$!
  taskset -c 1 bash -c "$setup; $(declare -f mnist_omniglot); mnist_omniglot" >"$OUT/core1.log" 2>&1 &
  second=$!
  status=0
  wait "$first" || status=$?
  wait "$second" || status=$?
  [ "$status" = 0 ] || { echo "reproduce.sh: a run failed (exit $status); see $OUT/core0.log and $OUT/core1.log" >&2; exit "$status"; }
else
  olivetti_nips_samples
  mnist_omniglot
fi
# Figures 1, 2a, 2b (heldout_loglik.png, ours beside the paper) and 3, with every table:
grepvi report "$OUT/olivetti" "$OUT/mnist" "$OUT/omniglot" "$OUT/nips" "$OUT/olivetti-samples-eta5" --out "$OUT/all"
# Supplement E.2, Figures 4-6 (reconstructions) are written by the compare runs above
# ($OUT/<data>/reconstructions_<data>.png).
