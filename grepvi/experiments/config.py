"""The options of one run (:class:`RunConfig`), checked in one place.

Errors name the option as the Python API spells it (``num_steps: expected a positive
integer``); the command line shows the same message with its flags (:func:`option_flags`:
``--num-steps``).
"""

import dataclasses
import re

import numpy as np

from grepvi import validation
from grepvi.errors import ConfigError
from grepvi.models.registry import get_model_spec, model_names

__all__ = ["RunConfig", "MODELS", "ESTIMATORS", "SYNTHETIC", "option_flags"]

MODELS = model_names()
ESTIMATORS = ("grep", "bbvi", "advi", "implicit", "rsvi")
SYNTHETIC = "synthetic"
DEFAULT_ETA = 0.5
# Without a paper value: ADVI's Gaussians on log-scale diverge at 0.5 on small problems; the paper
# chose 0.1 for ADVI on three of four data sets.
DEFAULT_ETA_BY_ESTIMATOR = {"advi": 0.1}
# Hyperparameter options of the registered models (a run's identity keeps its model's only).
_MODEL_OPTIONS = {"layer_sizes", "num_factors"}
# Options that do not change the result (left out of a run's identity).
_NOT_IDENTITY = ("data_dir", "checkpoint_every", "checkpoint_seconds", "parallel")


@dataclasses.dataclass
class RunConfig:
    """Every option of one run.

    Attributes:
      model: "sparse-gamma-def" or "beta-gamma-mf".
      dataset: "olivetti", "nips", "mnist", "omniglot", "synthetic" (simulated from the model)
        or a path to a data file.
      estimator: a registered estimator name ("grep", "bbvi", "advi", "implicit", "rsvi").
      num_steps / time_budget: stop after this many iterations / seconds of training time
        (at least one of them).
      step_size: ``eta`` of Eq. 9 (None: the paper's value for this data set and estimator,
        else 0.5).
      num_samples: draws per gradient (None: the estimator's default; paper: 1, BBVI 30).
      elbo_samples: draws of the ELBO reported per iteration, evaluated outside the timed
        region (None: as in the paper, 20 for ADVI (1 on Omniglot) and 1 for BBVI; G-REP and
        the others report the ELBO of their own gradient draw, which costs nothing extra).
      eval_samples: posterior draws of the held-out log-likelihood (paper: 100).
      refit_steps: iterations fitting the test rows' local latents (``q(W)`` fixed).
      refit_step_size: ``eta`` of that refit (None: the training ``step_size``).
      refit_estimator: estimator of that refit (None: the training one, except G-REP for BBVI:
        the same family and objective, two orders of magnitude cheaper per step).
      chunk_size: iterations per compiled window, in both procedures (also: how often the
        perplexity is computed); None: 10 for a fixed schedule, 100 for the default procedure.
      batch_size: minibatch VI with this many rows of the data per step (None: all rows;
        ``"auto"``, the default: all rows unless a full-data step is large,
        :mod:`grepvi.inference.batch_size`).
      parallel: data-parallel VI over every device (rows split over a device mesh).
      elbo_every: with ``elbo_samples``, evaluate that ELBO every iteration (1, the paper) or
        once per ``elbo_every`` iterations (a multiple of ``chunk_size``; 20 draws of the log
        joint cost ADVI several times its own step).
      compute_variance: record the average gradient variance (needs ``num_samples > 1``).
      tolerance: the default procedure's stopping accuracy in posterior standard deviations
        (None: by the model's size, ``controller.default_tolerance``); unused with ``step_size``.
      alphabets: Omniglot's alphabets, ``"all"`` or comma-separated names (None: the paper's
        ten, :data:`grepvi.data.omniglot.DEFAULT_ALPHABETS`); only with ``dataset="omniglot"``.
    """

    model: str
    dataset: str
    estimator: str
    num_steps: int | None = None
    time_budget: float | None = None
    step_size: float | None = None
    num_samples: int | None = None
    elbo_samples: int | None = None
    seed: int = 0
    data_dir: str | None = None
    layer_sizes: tuple[int, ...] = (100, 40, 15)
    num_factors: int = 100
    eval_samples: int = 100
    refit_steps: int = 2000  # Olivetti: 500 steps gave -5.60 +- 3.19, 2000 -4.53, 5000 -4.45
    refit_step_size: float | None = None
    refit_estimator: str | None = None
    chunk_size: int | None = None
    batch_size: int | str | None = "auto"
    parallel: bool = False
    elbo_every: int = 1
    compute_variance: bool = False
    tolerance: float | None = None
    synthetic_size: tuple[int, int, int] = (100, 25, 64)
    alphabets: str | None = None
    checkpoint_every: int = 0
    checkpoint_seconds: float = 60.0

    def validate(self) -> "RunConfig":
        """Checks every option; returns a copy with the defaults resolved."""
        config = dataclasses.replace(self)
        get_model_spec(config.model)
        from grepvi.estimators import estimator_names

        if config.estimator not in estimator_names():
            raise ConfigError(
                f"estimator: unknown estimator {config.estimator!r}; expected one of {', '.join(ESTIMATORS)}"
            )
        if config.num_steps is None and config.time_budget is None and config.step_size is not None:
            raise ConfigError("with step_size, give num_steps N or time_budget SECONDS (or both)")
        if config.tolerance is not None:
            config.tolerance = _positive_float(config.tolerance, "tolerance")
            if config.step_size is not None:
                raise ConfigError(
                    "tolerance: applies to the default procedure; with step_size the run is the paper's "
                    "fixed schedule (Eq. 9) for num_steps or time_budget"
                )
        if config.num_steps is not None:
            config.num_steps = _positive_int(config.num_steps, "num_steps")
        if config.time_budget is not None:
            config.time_budget = _positive_float(config.time_budget, "time_budget")
        if config.step_size is not None:  # the paper's Eq. 9 with this eta; None: the default procedure
            config.step_size = _positive_float(config.step_size, "step_size")
        if config.num_samples is not None:
            config.num_samples = _positive_int(config.num_samples, "num_samples")
        if config.elbo_samples is None and config.step_size is None:
            pass  # the default procedure reports the estimator's own ELBO (no extra draws)
        elif config.elbo_samples is None and config.estimator == "advi":
            config.elbo_samples = 1 if str(config.dataset).lower() == "omniglot" else 20
        if config.elbo_samples is None and config.estimator == "bbvi":
            config.elbo_samples = 1  # the paper's one draw, not the mean over BBVI's 30 gradient draws
        if config.elbo_samples is not None:
            config.elbo_samples = _positive_int(config.elbo_samples, "elbo_samples")
        config.seed = validation.seed(config.seed, "seed")
        config.eval_samples = _positive_int(config.eval_samples, "eval_samples")
        config.refit_steps = _non_negative_int(config.refit_steps, "refit_steps")
        if config.refit_step_size is None:
            config.refit_step_size = config.step_size
        if config.refit_step_size is not None:
            config.refit_step_size = _positive_float(config.refit_step_size, "refit_step_size")
        if config.refit_estimator is None:
            config.refit_estimator = "grep" if config.estimator == "bbvi" else config.estimator
        if config.refit_estimator not in estimator_names():
            raise ConfigError(
                f"refit_estimator: unknown estimator {config.refit_estimator!r}; "
                f"expected one of {', '.join(ESTIMATORS)}"
            )
        if config.chunk_size is not None:
            config.chunk_size = _positive_int(config.chunk_size, "chunk_size")
            if config.step_size is None and config.chunk_size < 2:
                raise ConfigError("chunk_size: the default procedure needs windows of at least 2 iterations")
        if isinstance(config.batch_size, str):
            if config.batch_size.lower() not in ("auto", "all"):
                raise ConfigError(
                    f"batch_size: expected a positive integer, 'auto' or 'all', found {config.batch_size!r}"
                )
            config.batch_size = None if config.batch_size.lower() == "all" else "auto"
        elif config.batch_size is not None:
            config.batch_size = _positive_int(config.batch_size, "batch_size")
            if config.parallel:
                raise ConfigError("parallel: minibatch VI (batch_size) runs on one device; give one of them")
        if config.alphabets is not None:
            if str(config.dataset).lower() != "omniglot":
                raise ConfigError(f"alphabets: applies to the omniglot data set, not {config.dataset!r}")
            config.alphabets = str(config.alphabets).strip()
            if not config.alphabets:
                raise ConfigError("alphabets: expected 'all' or comma-separated alphabet names, found ''")
        config.elbo_every = _positive_int(config.elbo_every, "elbo_every")
        if config.elbo_every != 1 and config.elbo_every % config.window():
            raise ConfigError(
                f"elbo_every: expected 1 or a multiple of chunk_size ({config.window()}), "
                f"found {config.elbo_every}"
            )
        config.layer_sizes = tuple(_positive_int(k, "layer_sizes") for k in _as_tuple(config.layer_sizes))
        if not config.layer_sizes:
            raise ConfigError("layer_sizes: expected at least one layer, e.g. 100,40,15")
        config.num_factors = _positive_int(config.num_factors, "num_factors")
        config.synthetic_size = tuple(
            _positive_int(k, "synthetic size") for k in _as_tuple(config.synthetic_size)
        )
        if len(config.synthetic_size) != 3:
            raise ConfigError("synthetic size: expected (train rows, test rows, columns)")
        config.checkpoint_every = _non_negative_int(config.checkpoint_every, "checkpoint_every")
        config.checkpoint_seconds = float(config.checkpoint_seconds)
        if not config.checkpoint_seconds >= 0:
            raise ConfigError(
                f"checkpoint_seconds: expected a number >= 0, found {self.checkpoint_seconds!r}"
            )
        if config.compute_variance and (config.num_samples or 1) < 2 and config.estimator != "bbvi":
            raise ConfigError("the gradient variance needs num_samples of at least 2")
        return config

    def window(self) -> int:
        """Iterations per compiled window: ``chunk_size``, else 10 for a fixed schedule (the
        paper's runs, perplexity every 10) and 100 for the default procedure."""
        if self.chunk_size is not None:
            return int(self.chunk_size)
        return 10 if self.step_size is not None else 100

    def options(self) -> dict:
        return {
            key: (list(value) if isinstance(value, tuple) else value)
            for key, value in dataclasses.asdict(self).items()
        }

    def identity(self) -> dict:
        """The options that determine the result (``config.json``'s ``identity``)."""
        options = self.options()
        used = set(get_model_spec(self.model).options.values())
        for option in _MODEL_OPTIONS - used:
            options.pop(option, None)
        if str(self.dataset).lower() != SYNTHETIC:
            options.pop("synthetic_size")
        if str(self.dataset).lower() != "omniglot" or self.alphabets is None:
            options.pop("alphabets", None)
        for key in _NOT_IDENTITY:
            options.pop(key, None)
        return options


# --- checks ------------------------------------------------------------------------------------


def _as_tuple(value):
    if isinstance(value, str):
        try:
            return tuple(int(part) for part in value.split(",") if part.strip())
        except ValueError as error:
            raise ConfigError(f"expected comma-separated integers, found {value!r}") from error
    if isinstance(value, int | np.integer):
        return (int(value),)
    return tuple(value)


# The checks themselves are grepvi.validation's (one place for the whole package).
_positive_int = validation.positive_int
_non_negative_int = validation.non_negative_int
_positive_float = validation.positive_float


def option_flags(message: str) -> str:
    """``message`` with the option names of :class:`RunConfig` (and the command line's own
    ``etas``, ``sample_counts``) written as flags: ``num_steps:`` -> ``--num-steps:``."""
    names = [field.name for field in dataclasses.fields(RunConfig)] + ["etas", "sample_counts", "estimators"]
    names = sorted((name for name in names if "_" in name or name in _FLAG_WORDS), key=len, reverse=True)
    pattern = r"(?<![\w-])(" + "|".join(names) + r")(?=[: ]|$)"
    message = re.sub(r"\b(resume|overwrite)=True", r"--\1", message)
    return re.sub(pattern, lambda match: "--" + match.group(1).replace("_", "-"), message)


# One-word options that read as flags in messages (others, like "model", are ordinary words).
_FLAG_WORDS = {"seed", "tolerance", "etas", "estimators"}
