"""Optimizers: the paper's Eq. 9 (ADVI's step-size sequence), natural-gradient steps, and Adam
whose second moment restarts where the gradient's scale has left it."""

from grepvi.optim.advi import ScaleByAdviStepsizeState, advi_stepsize, scale_by_advi_stepsize
from grepvi.optim.natural_gradient import natural_gradient, positive_in_log_scale
from grepvi.optim.stale_moment import recent_adam, scale_by_recent_adam

__all__ = [
    "ScaleByAdviStepsizeState",
    "advi_stepsize",
    "scale_by_advi_stepsize",
    "natural_gradient",
    "positive_in_log_scale",
    "recent_adam",
    "scale_by_recent_adam",
]
