#!/usr/bin/env bash
# Every experiment of Ruiz, Titsias & Blei (2016), Section 5 and supplement E, with grepvi.
# Usage: examples/reproduce.sh [BUDGET_SECONDS] [OUT]   (paper-length budgets are hours; see REPRODUCING.md)
# Needs the data files in $GREPVI_DATA_DIR (or pass --data-dir).
set -euo pipefail
BUDGET=${1:-600}
OUT=${2:-runs}
COMMON=(--time-budget "$BUDGET" --eval-samples 100 --refit-steps 2000 --elbo-every 100)

# Figure 1 (ELBO vs time), Figure 2b (test log-likelihood), Table 1 (time per iteration, eta):
grepvi compare --model sparse-gamma-def --dataset olivetti --estimators grep,advi,bbvi "${COMMON[@]}" --out "$OUT/olivetti"
grepvi compare --model beta-gamma-mf --dataset mnist --estimators grep,advi,bbvi "${COMMON[@]}" --out "$OUT/mnist"
grepvi compare --model beta-gamma-mf --dataset omniglot --estimators grep,advi "${COMMON[@]}" --out "$OUT/omniglot"
# Figure 2a (perplexity vs time) and Table 1, NIPS:
grepvi compare --model sparse-gamma-def --dataset nips --estimators grep,advi,bbvi "${COMMON[@]}" --out "$OUT/nips"
# The eta search of Table 1 (left): add --eta-search to any compare above (4 runs per estimator).
# Supplement E.1, Figure 3: G-REP with 1, 2, 5, 10, 20 samples, first 200 iterations, Olivetti,
# Eq. 9 at Table 1's eta = 5 (clean since the models take log z: 0 skipped steps):
grepvi samples --model sparse-gamma-def --dataset olivetti --sample-counts 1,2,5,10,20 --num-steps 200 \
  --step-size 5 --refit-steps 0 --eval-samples 10 --out "$OUT/olivetti-samples-eta5"
# Figures 1, 2a, 2b (heldout_loglik.png, ours beside the paper) and 3, with every table:
grepvi report "$OUT/olivetti" "$OUT/mnist" "$OUT/omniglot" "$OUT/nips" "$OUT/olivetti-samples-eta5" --out "$OUT/all"
# Supplement E.2, Figures 4-6 (reconstructions) are written by the compare runs above
# ($OUT/<data>/reconstructions_<data>.png).
