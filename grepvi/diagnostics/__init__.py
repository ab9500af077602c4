"""Diagnostics: Pareto k, ELBO estimates, held-out log-likelihood and perplexity, reference optima."""

from grepvi.diagnostics.pareto import ParetoK, pareto_k

__all__ = ["ParetoK", "pareto_k"]
