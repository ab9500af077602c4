"""Optimizers: the paper's Eq. 9 (ADVI's step-size sequence) and natural-gradient steps."""

from grepvi.optim.advi import ScaleByAdviStepsizeState, advi_stepsize, scale_by_advi_stepsize
from grepvi.optim.natural_gradient import natural_gradient, positive_in_log_scale

__all__ = [
    "ScaleByAdviStepsizeState",
    "advi_stepsize",
    "scale_by_advi_stepsize",
    "natural_gradient",
    "positive_in_log_scale",
]
