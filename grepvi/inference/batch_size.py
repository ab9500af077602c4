"""The batch size of ``batch_size="auto"`` (the default): all rows unless a full-data step is
large, then minibatch VI over rows enough for a step of a set size.

A step of minibatch VI (:mod:`grepvi.inference.minibatch`) sees ``B`` of the ``N`` rows: its
cost is ``G + r B`` (``G`` the global latents' draws and the terms without rows, ``r`` a row's
terms and its local latents), counted as floating-point operations of the traced gradient
estimate (:func:`grepvi.inference.cost.jaxpr_flops`, two traces of shapes only: nothing is
compiled or computed). Where the full-data estimate stays within ``MAX_FULL_BATCH_FLOPS`` of
the platform, every row is used (``None``): the iterations of a full-batch step update every
local latent, and the measured cases are fastest to the answer that way. Above it the batch is
the most rows whose estimate stays within ``BATCH_FLOPS``, at least ``MIN_BATCH_ROWS`` and at
most a quarter of the rows (every row where a quarter is fewer than ``MIN_BATCH_ROWS``: no
trace at all below 1,024 rows). The traces cost 0.4-0.9 s on MNIST's 5,000 rows, 0.6-1.3 s on
Omniglot's.

Measured on 2 CPU cores (full-data step; ``jaxpr_flops`` of its estimate): MNIST's beta-gamma
MF (5,000 x 784, K = 100) 71 ms, 5.7e9; Olivetti's DEF 37 ms, 2.1e9; NIPS's DEF 2.7e9;
Omniglot's MF at the paper's 4,425 images (11,025 pixels) 0.87 s, 5.4e10: all full batch (in
600 s, minibatches of 500 Omniglot images reached an ELBO no higher: -7.47e6 against -7.2e6).
Omniglot's 24,345 training images of all 50 alphabets, 2.9e11 (~4.6 s a step, 130 steps in
600 s): minibatches of 889 rows, 0.15 s a step (1.2e7 flops a row). A GPU runs a
full-data step of Omniglot's MF in 2.3 ms (380 times the CPU's): other platforms allow
``ACCELERATOR_FACTOR`` times the CPU's flops.
"""

import math

import jax
import numpy as np

from grepvi.errors import ConfigError
from grepvi.inference import minibatch
from grepvi.inference.cost import jaxpr_flops
from grepvi.inference.state import initial_params
from grepvi.target import bind_data
from grepvi.validation import positive_int

__all__ = [
    "AUTO",
    "MAX_FULL_BATCH_FLOPS",
    "BATCH_FLOPS",
    "MIN_BATCH_ROWS",
    "ACCELERATOR_FACTOR",
    "estimate_flops",
    "automatic_batch_size",
    "resolve_batch_size",
]

AUTO = "auto"
MAX_FULL_BATCH_FLOPS = 1.0e11  # a CPU full-data estimate above this (~1.6 s) runs in minibatches
BATCH_FLOPS = 1.2e10  # a minibatch estimate's size on a CPU (~0.2 s)
MIN_BATCH_ROWS = 256
ACCELERATOR_FACTOR = 256.0


def estimate_flops(model, families: dict, estimator, batch_size: int) -> float:
    """``jaxpr_flops`` of one gradient estimate of minibatch VI over ``batch_size`` rows of
    ``model`` (all rows: the full-data estimate), traced at abstract shapes."""
    problem = minibatch.minibatch_problem(model, batch_size, families)
    target = minibatch.batch_target(problem)
    params = jax.eval_shape(lambda: initial_params(jax.random.key(0), problem.families, None))
    rows = jax.ShapeDtypeStruct((batch_size,), np.int32)
    batch = jax.eval_shape(lambda p, i: minibatch.batch_params(problem, p, i), params, rows)
    data = jax.eval_shape(lambda i: minibatch.batch_data(problem, problem.data, i), rows)

    def estimate(params, data):
        return estimator.estimate(jax.random.key(0), params, bind_data(target, data))

    return float(jaxpr_flops(jax.make_jaxpr(estimate)(batch, data).jaxpr))


def automatic_batch_size(model, families: dict, estimator, platform: str | None = None) -> int | None:
    """The batch size of ``batch_size="auto"``: ``None`` (every row) where the full-data
    estimate's flops stay within the platform's ``MAX_FULL_BATCH_FLOPS``, else the most rows
    whose estimate stays within ``BATCH_FLOPS`` (by ``G + r B`` from the traces at ``N`` and
    ``N / 4`` rows), at least ``MIN_BATCH_ROWS``. ``None`` also for a model without rows to
    subsample (no ``num_observations`` or ``minibatch_problem``) and where a quarter of the
    rows is under ``MIN_BATCH_ROWS``."""
    rows = _num_rows(model)
    if rows is None or rows // 4 < MIN_BATCH_ROWS:
        return None
    platform = platform or jax.default_backend()
    factor = 1.0 if platform == "cpu" else ACCELERATOR_FACTOR
    full = estimate_flops(model, families, estimator, rows)
    if full <= MAX_FULL_BATCH_FLOPS * factor:
        return None
    quarter = estimate_flops(model, families, estimator, rows // 4)
    per_row = (full - quarter) / (rows - rows // 4)
    if per_row <= 0.0:  # the rows cost nothing measurable: the largest batch allowed
        return rows // 4
    fixed = full - per_row * rows  # the line's intercept (the counts bend a little: may be < 0)
    size = math.floor((BATCH_FLOPS * factor - fixed) / per_row)
    return int(min(max(size, MIN_BATCH_ROWS), rows // 4))


def _num_rows(model) -> int | None:
    """``N`` of a model whose rows minibatch VI can subsample (a named-axis ``Model``), else None."""
    rows = getattr(model, "num_observations", None)
    return None if rows is None or not hasattr(model, "joint") else int(rows)


def resolve_batch_size(batch_size, model, families: dict, estimator, parallel: bool = False) -> int | None:
    """The rows per step of a run: ``batch_size`` itself (a positive int), ``None`` (every
    row), or for ``"auto"`` :func:`automatic_batch_size` (``None`` without a model whose rows
    can be subsampled, and for data-parallel runs, which split every row over the devices).

    Raises:
      ConfigError: anything else, naming ``batch_size``.
    """
    if batch_size is None:
        return None
    if isinstance(batch_size, str):
        if batch_size.lower() != AUTO:
            raise ConfigError(f"batch_size: expected a positive integer, 'auto' or None, got {batch_size!r}")
        if parallel or model is None:
            return None
        return automatic_batch_size(model, families, estimator)
    return positive_int(batch_size, "batch_size")
