"""The default procedure as pure state: ``init``, ``update`` after every window, ``answer``.

The design follows RAABBVI (Welandawe, Andersen, Vehtari & Huggins 2022) and FASO (Dhaka,
Catalina, Welandawe, Andersen, Huggins & Vehtari 2020), with Stan's step-size adaptation
(Kucukelbir et al. 2017) turned into a choice between update rules; its shape is that of
blackjax's ``window_adaptation`` and optax's ``contrib.reduce_on_plateau``: a NamedTuple of
arrays that a short loop (:mod:`grepvi.inference.driver`) threads through and checkpoints, so a run
killed at any moment and resumed from its last checkpoint takes the same decisions.

0. **Trial.** Each candidate (:class:`grepvi.inference.rules.Candidate`: Adam at three rates,
   and natural-gradient steps with a KL trust region where every family has a closed-form
   Fisher information) runs ``trial_steps`` iterations from the same start, in the same
   compiled program (the rule is an index in the optimizer state). A candidate's score is the
   median ELBO of its last window; a later candidate replaces the leader when it is better by
   two standard errors (MAD-based), or when it is ``preferred`` (the natural gradient) and
   not worse by two standard errors. A candidate whose window median trails the leader's at
   the same number of steps by two standard errors stops there where it trails by
   ``TRIAL_WIDE_GAP`` of the leader's median (a rate that diverges or crawls is seen early),
   else where it trailed at the check before too (a rule whose first steps are clipped by its
   trust region may be ahead a window later). Every candidate's first
   window ends at the trial's first check, a quarter of its steps (at least
   ``TRIAL_FIRST_CHECK``, where the first candidate's timed probes end), so that the others
   are compared with the first there: on the Olivetti DEF at a 120 s budget a trial of 187
   steps per rule cost 548 steps with the natural gradient first (it ran all 187 at an ELBO
   35 times below Adam 0.1's), and one of 180 steps costs 315 with Adam 0.1 first (the
   other three stopped at the check, 45 steps). The leader continues from where its trial
   ended. On a model of fewer than ``EARLY_END_ELEMENTS`` elements where the trial keeps
   Adam, the natural rule takes over where Adam's first approach ends; a fall in its first
   stage couples its locations where their Hessian says so (a stiff direction across them),
   else halves its step (``HANDOVER_HALVINGS`` times), and Adam resumes at the next
   (:func:`_handover_candidate`).
1. **Approach.** Windows of ``window`` steps at step ``rho``. After each, the median ELBO is
   kept; the iterates are stationary when a regression of the last (up to 8) medians on
   their index shows no increase (t < 2). A **fall** restores the mean iterate of the best
   window and halves ``rho``: the median falls below the best by 2% of its magnitude, 10
   standard errors of the best window's median and 2 nats; or half the steps were
   non-finite; or the window's lower 5% quantile falls 100 magnitudes of its median below
   it while the median does not (a left tail of many draws, e.g. ADVI's log-normal weights
   drawing ``e^30``: the one-draw ELBO reaches ``-1e16`` before the parameters leave the
   float range; a single draw that far down is the normal heavy tail of small gamma shapes,
   not a collapse). Three windows in a row without a finite step raise
   :class:`~grepvi.errors.NumericalError`. A run stopped before its first average answers
   with the mean iterate of its best window (:func:`answer`).
2. **Average.** Once stationary, window mean iterates are averaged in batches of at least
   ``10 / rho`` iterations; batch means give the Monte Carlo standard error, measured in the
   Fisher metric of ``q`` (posterior standard deviations). In the first stage the batches'
   ELBOs are tested for a climb at every batch from ``min_batches`` on (:func:`climbing`):
   the trend test that ended the approach sees 8 windows, and a slow climb hides in their
   noise. Where the batch ELBOs rise (t > ``CLIMB_T``), the average so far lags the iterates
   and restarts from the next batch.
3. **Stages.** When the MCSE is below ``tolerance`` (or after ``max_batches`` batches; up to
   twice that where the stage could end the run and its error is within ``sqrt(2)`` tolerances:
   :func:`_near_miss`), the average is the stage's answer. A stage's average is biased by its
   step: to first order in ``rho / D`` (``D`` gradient draws per step). For constant-step
   stochastic approximation the averaged iterate's bias is, to leading order, the step times a
   term that depends on the gradient noise through the iterates' stationary covariance, which is
   linear in the noise's covariance (Dieuleveut, Durmus & Bach 2020), and ``D`` draws divide
   that by ``D``. So when a stage at ``s_k = rho_k / D_k`` follows one at ``s_{k-1}`` (ratio
   ``r = s_k / s_{k-1} < 1``), their change ``c`` estimates the last stage's bias as
   ``c r / (1 - r)`` (``c`` itself when the step was halved; ``c`` less the two averages' errors
   at the 90th percentile of their noise: :func:`systematic_change`; the previous stage's own
   error enters it times ``r / (1 - r)``, which must also be within ``2 * tolerance``); the run
   ends when the last stage is known to ``tolerance`` and its bias so estimated is within
   ``2 * tolerance`` (the default ``tolerance`` widened where the first stage's average
   measured noisy draws: :func:`sized_tolerance`). Otherwise a new stage starts from the
   average with ``rho / D`` smaller:
   by **more draws per step** where a stage at the current draws would cost ``f >= 2`` times
   its floor (the approach windows and ``min_batches`` batches; ``f >= EARLY_FACTOR`` ends the
   stage at its first MCSE): ``f`` times the draws buy a stage at the floor for the same
   work, its bias divided by ``f`` (rat tumours: the stage needed ~12,000 steps of 3 draws; 10
   times the draws cost the same and divide its bias by 10, the work of three halvings and
   three stages), or by the factor the estimated bias asks for if larger; where ``f < 2`` on a
   model of fewer than ``EARLY_END_ELEMENTS`` elements, by twice the draws (thirty-fifth
   session: the same ``rho / D`` as a halved step, but the stage's batches stay ``10 / rho``
   steps long and its approach short, where a halved step doubles both; a small model's draws
   are vectorized, so twice them cost less than twice the steps: on 44 small models 900 fewer
   iterations on 25, stochastic volatility 8,850 -> 4,350, seeds 9,350 -> 5,150). Else ``rho``
   is halved: where the draws are at their cap (:func:`grepvi.inference.fitting.max_repeats`),
   on larger models (whose last stage's Monte Carlo error, not its batches' floor, sets its
   length: :func:`_step_divisor`), and where the rule is Adam, whose normalized step's bias
   falls only as ``1 / sqrt(D)`` (:class:`~grepvi.inference.rules.Candidate`).

A fixed schedule (Eq. 9 or any optax optimizer) is the same state in the ``FIXED`` phase:
it never changes the step. Everything here is host-side NumPy on the window's outputs: the
decisions are deterministic functions of the window outputs, so a resumed run is bitwise
the uninterrupted one.
"""

import math
import statistics
from typing import Any, NamedTuple

import jax
import numpy as np

from grepvi import validation
from grepvi.errors import ConfigError, NumericalError

__all__ = [
    "AdaptiveSettings",
    "default_tolerance",
    "default_max_draws",
    "Convergence",
    "ControllerState",
    "WindowSummary",
    "PHASES",
    "TRIAL",
    "APPROACH",
    "AVERAGE",
    "FIXED",
    "init",
    "update",
    "finish",
    "answer",
    "summarize",
    "next_window_length",
    "size_trial",
    "elbo_trend_t",
    "convergence",
]

TRIAL, APPROACH, AVERAGE, FIXED = 0, 1, 2, 3
PHASES = ("trial", "approach", "average", "fixed")
REASONS = (
    "",
    "converged",
    "max_steps",
    "time_budget",
    "interrupted",
    "fixed_schedule",
    "max_draws",
    "drifting",
)
TRIAL_FRACTION = 0.2  # of a time budget left after compilation, at most, for the trial
MIN_TRIAL_STEPS = 20  # per candidate; where fewer fit, the fallback candidate runs alone
STALL_STEPS = 50  # skipped steps in a row that stop a fixed schedule with NumericalError
STALL_WINDOWS = 3  # windows in a row without one finite step stop the run with NumericalError
# The stall's error where every step's ELBO was finite: the model's value is finite at the
# draws, its gradient is not. Leaving those draws out of a step (more than a quarter of them,
# grepvi.estimators.grep.MAX_UNUSABLE_SHARE) biases it toward where they lie: an Emax curve
# ``(dose / ed50) ** hill`` with a dose of 0 drifted into ``hill < 1`` at three quarters.
_FINITE_VALUE_HINT = (
    " The model's value was finite at every step, its gradient was not: an operation whose "
    "derivative is infinite where the chain rule multiplies it by zero, e.g. (x / c) ** p at "
    "x = 0 with p < 1 (its derivative in c is inf * 0 = NaN), or sqrt / log at 0 in a jnp.where's "
    "branch not taken. Compute it only where its derivative is finite: jnp.where(x > 0, x, 1.0) "
    "** p, then jnp.where(x > 0, that, 0.0)."
)
FALL_NATS = 2.0  # a window's median ELBO this far below the best (and FALL_FRACTION, 10 SE) is a fall
FALL_FRACTION = 0.02  # of the best median's magnitude
TAIL_FACTOR = 100.0  # a window's TAIL_QUANTILE this many magnitudes of the median below it: a collapse
TAIL_QUANTILE = 0.05
TREND_WINDOWS = 8
TRIAL_CURVE = 16  # trial windows per candidate whose medians are kept (early stop of the trial)
TRIAL_CHECK_FRACTION = 0.25  # of the trial's steps: where every candidate's first window ends
TRIAL_FIRST_CHECK = 11  # steps, at least: the driver's probes (1 + 10 steps) end there
# A candidate that trails the leader by 2 SE at equal steps stops at once where it trails by
# this fraction of the leader's median too (a rule many times worse, seen at its first check),
# else only after trailing at two checks in a row: on a 10,000-group gamma-Poisson the natural
# gradient was ahead of Adam 0.1 after 75 steps, 2.7% behind after 100 (its trust region clips
# the first steps) and ahead from 200 on, at a stationary ELBO 170 nats higher; stopped at 100,
# Adam was kept and the fit took 16,850 steps.
TRIAL_WIDE_GAP = 0.1
# A trial in which every rule failed from the families' start (:func:`narrows`) runs again from
# a start whose q is NARROWING times as wide (each family's ``narrowed_params``), at most
# MAX_NARROWINGS times.
NARROWING = 0.1
MAX_NARROWINGS = 3
# A candidate whose q moved less than this in its whole trial (the Fisher length of the change
# at the start, in q's standard deviations) did not move: its steps were skipped or vanished.
STILL_SD = 1e-3
MIN_APPROACH_WINDOWS = 4  # windows of a stage before the trend test may start its average
# A stage that would cost this many floors at its draws ends at its first MCSE (2: every stage
# whose successor raises the draws). At 3, a stage at 2-3 floors ran on to its accuracy and the
# next still raised the draws: the negative-binomial regression averaged 1,500 steps at 5 draws,
# then 1,300 at 15 (4,450 steps, 8.3 s); at 2, 700 at 5 and 1,500 at 10 (3,850 steps, 7.3 s),
# the same answer; the eleven other textbook models ran the same steps.
EARLY_FACTOR = 2
# The fraction of latent elements whose averaged steps a stage's trust region shrank, above
# which the stage's average is not used to estimate a bias (nor can it end the run), the stage
# ends at its first MCSE (min_batches batches: its average only starts the next stage), and its
# successor raises the draws by at least CLIPPED_DRAWS_FACTOR (where it may). Clipping makes a
# step nonlinear in its gradient, asymmetrically: at a gamma posterior of shape 0.1 13% of
# 8-draw steps were clipped at the optimum (0.1% of 64-draw ones), a stage's bias no longer
# fell as rho / D, and a bias estimated across such a stage was 10 times too small (the
# fourteenth session). Fifty gamma rates of shape 13 at 5 draws clip 1.7%, and their stages'
# bias falls as rho / D.
MAX_CLIPPED = 0.05
# The clipped fraction of a natural-gradient stage up to which the next stage approaches for
# ``10 / rho`` steps only (:func:`_restart_settled`). Measured in the stage before the second:
# a gamma posterior of shape 0.1 clips 0.9% (with the short approach its variance errors over
# 12 seeds rose from 0.44% to 0.52% on average and 1.5% to 1.9% at worst: not kept there); a
# horseshoe regression 0.35%, rat tumours 0.16%, pumps, baseball and a ridge a + b none.
SETTLED_CLIPPED = 0.005
CLIPPED_DRAWS_FACTOR = 8
# A stage's Monte Carlo error this many times what the previous stage's predicts for its draws
# (``e' sqrt(N' / N)``: an average's error falls as one over the root of its draws, whatever the
# step) after at least DRIFT_MIN_DRAWS times the previous stage's draws: the average drifts
# (a ridge of the posterior that q cannot settle on), and more draws will not settle it.
DRIFT_FACTOR = 4.0
DRIFT_MIN_DRAWS = 4.0
# A stage at max_batches whose average could end the run (its bias against the previous stage
# within the rule's bound, the previous stage settled) and whose Monte Carlo error is within
# NEAR_MISS_ACCURACY times the tolerance averages on, up to NEAR_MISS_BATCHES times max_batches
# batches, instead of ending (:func:`_near_miss`): an average's error falls as one over the
# root of its batches, so at sqrt(2) times the tolerance twice the batches reach it.
NEAR_MISS_ACCURACY = math.sqrt(2.0)
NEAR_MISS_BATCHES = 2
# A first stage's batch ELBOs (the mean of a batch's window medians) rising against their
# index with a regression t above CLIMB_T: the iterates still climb, and the average restarts
# from the next batch (:func:`climbing`). Under stationarity t has n - 2 degrees of freedom:
# P(t > 3.5) is 0.6% at the first test (8 batches) and under 0.1% from 20 on.
CLIMB_T = 3.5
# A stage whose average cannot be the answer ends once its Monte Carlo error is within this
# many times the tolerance (:func:`_provisional`): the first stage (no bias is known without a
# second), and a later one whose bias, estimated against the stage before, already exceeds the
# convergence rule's bound. Its error enters the next stage's bias estimate only as the part of
# the change it explains (:func:`systematic_change`) and, times ``ratio / (1 - ratio)``, in the
# ``settled`` test: at a halved step that is ``2 x tolerance``, the rule's bound. Only for
# models of at least EARLY_END_ELEMENTS latent elements, where the change between two stage
# averages is a mean over that many elements and its noise small against the bound.
EARLY_END_ACCURACY = 2.0
EARLY_END_ELEMENTS = 1024
# Where a stage's bias is known and the next stage shrinks the step (not raising the draws),
# models of EARLY_END_ELEMENTS elements or more divide it by what brings that bias to this
# fraction of the convergence rule's bound (by 2 at least, by MAX_STEP_DIVISOR at most):
# halving put a 10,000-group gamma-Poisson's third stage at a bias of 0.034-0.039 sd against
# a bound of 0.04, and one seed in five ran a fourth stage (:func:`_step_divisor`).
STEP_AIM = 0.75
MAX_STEP_DIVISOR = 8.0


SMALL_MODEL_TOLERANCE = 0.005  # sd, up to SMALL_MODEL_TOLERANCE_ELEMENTS latent elements
LARGE_MODEL_TOLERANCE = 0.02  # sd, from LARGE_MODEL_TOLERANCE_ELEMENTS on
SMALL_MODEL_TOLERANCE_ELEMENTS = 64
LARGE_MODEL_TOLERANCE_ELEMENTS = 1024


def default_tolerance(num_elements: int) -> float:
    """The default ``tolerance`` for a model of ``num_elements`` latent elements (sd).

    0.005 up to 64 elements, ``0.005 sqrt(n / 64)`` between, 0.02 from 1,024 on. The work to
    the convergence rule is about ``n / tolerance^2`` element-draws (the averaged iterate's
    Monte Carlo error falls as one over the root of the gradient draws, whatever the step), so
    between 64 and 1,024 elements it stays what 0.005 sd costs at 64. 0.005 puts the means and
    variances of the conjugate test cases within 2%; 0.02 is still the Monte Carlo error of
    about 2,500 independent posterior draws (NUTS's 1,000 draws: about 0.03). At 0.005 a
    1,000-group gamma-Poisson hierarchy took 44.7 s (75,000 draws of 16 per step in its second
    stage) against NUTS's 5.4 s; at 0.02, 7.8 s (``docs/performance.md``).
    """
    n = max(int(num_elements), 1)
    if n <= SMALL_MODEL_TOLERANCE_ELEMENTS:
        return SMALL_MODEL_TOLERANCE
    if n >= LARGE_MODEL_TOLERANCE_ELEMENTS:
        return LARGE_MODEL_TOLERANCE
    return SMALL_MODEL_TOLERANCE * math.sqrt(n / SMALL_MODEL_TOLERANCE_ELEMENTS)


DRAWS_PER_INVERSE_SQUARED_TOLERANCE = 128


def default_max_draws(tolerance: float) -> int:
    """The default cap on the gradient draws a run spends averaging: ``128 / tolerance^2``
    (5.12 million at 0.005 sd, 320,000 at 0.02).

    The averaged iterate's Monte Carlo error after ``N`` draws is about ``sqrt(c / N)`` sd with
    ``c`` of 0.5 to 2 on the models the project measured, and a run's stages (the step halved
    once or twice) take a few times what one stage needs: converged runs took 2.6 to 7.1 /
    tolerance^2 draws in all (eleven NumPyro models, ``docs/performance.md``), and the most
    seen, 32 / tolerance^2 in its averaging phases, a gamma ``q`` of a posterior near an
    inverse gamma of shape 2 whose gradients are heavy-tailed (``tests/test_widened_gradient.py``).
    A model whose average drifts along a nearly flat direction of the ELBO (a horseshoe
    regression: ``z lambda tau`` identifies only the product) does not converge by averaging
    longer: more draws barely move its error (0.108 sd after 800 draws, 0.039 after 410,000),
    and the run stopped by ``max_steps`` after 25 million draws and 12 minutes. The cap stops
    it at 4 times the most a converged run took, with the accuracy it reached.
    """
    return int(math.ceil(DRAWS_PER_INVERSE_SQUARED_TOLERANCE / float(tolerance) ** 2))


def _tolerance(settings, state=None) -> float:
    """The run's tolerance: ``state.tolerance`` once the first stage has sized it
    (:func:`sized_tolerance`), else ``settings.tolerance``; ``None`` (sized by ``fit`` from the
    model, :func:`default_tolerance`) reads as the small-model value where the controller runs
    without ``fit``."""
    if state is not None and math.isfinite(float(state.tolerance)):
        return float(state.tolerance)
    return SMALL_MODEL_TOLERANCE if settings.tolerance is None else settings.tolerance


# The error constant c (squared Monte Carlo error times gradient estimates, sd^2) the default
# tolerance is sized for: the first stage's c of the textbook models is 0.00-0.87 (pumps 0.04,
# eight schools 0.01, rat tumours 0.09, logistic regression 0.08, GARCH and a Hawkes process
# 0.87), of the census's slow ones 2-170 (a 100-input GP 2.0, a Bayesian neural network 4.4, a topic
# model 5.0, a Poisson factorization 45, a log-Gaussian Cox process 137).
NOMINAL_ERROR_CONSTANT = 1.0
# Models of fewer latent elements keep their tolerance whatever their noise: the conjugate
# cases of tests/test_default_accuracy.py (1-3 elements; G-REP's error constant at a posterior
# gamma shape of 0.1 is ~88) ask their means and variances within 2%, which 0.02 sd misses
# (2.6-7.4% off), and a model that small averages in little time.
WIDENED_TOLERANCE_ELEMENTS = 16


def sized_tolerance(tolerance: float, coarsest: float, accuracy: float, estimates: int) -> float:
    """The tolerance of a run whose first stage averaged ``estimates`` gradient estimates to a
    Monte Carlo error of ``accuracy`` (sd): ``tolerance * sqrt(c / NOMINAL_ERROR_CONSTANT)``
    with ``c = accuracy^2 * estimates``, within ``[tolerance, coarsest]``.

    The draws to the convergence rule are about ``c / tolerance^2`` (Polyak-Ruppert: the
    averaged iterate's error falls as one over the root of its draws, whatever the step), and
    :func:`default_tolerance` sizes the tolerance for ``c`` about 1. A model whose draws are
    ``c`` times noisier pays for it with a tolerance ``sqrt(c)`` times coarser, up to
    ``coarsest`` (0.02 sd, the Monte Carlo error of about 2,500 independent posterior draws:
    NUTS's 1,000 give about 0.03), so that its draws to the rule stay what ``c = 1`` costs.
    A log-Gaussian Cox process (43 elements, ``c`` 137: 0.02 sd) took 122-181 s before and
    13.7-16.9 s after, a Bayesian neural network (46, ``c`` 4.4: 0.0105 sd) 59.6-73.7 s and
    24.0-33.3 s, their ELBOs within 0.01 nats (``docs/performance.md``, sixty-eighth session).
    A first stage whose average still drifts (a ridge) reads the drift as noise here too."""
    c = float(accuracy) ** 2 * max(int(estimates), 1)
    if not math.isfinite(c) or c <= NOMINAL_ERROR_CONSTANT:
        return float(tolerance)
    # never below ``tolerance``, even where ``coarsest`` is set finer than it
    return float(max(min(tolerance * math.sqrt(c / NOMINAL_ERROR_CONSTANT), coarsest), tolerance))


class AdaptiveSettings(NamedTuple):
    """Knobs of the default procedure (all have defaults that need no tuning).

    Attributes:
      step_size: the natural-gradient candidate's ``rho`` (1 is Newton's step at a conjugate
        optimum).
      max_kl: ``kappa``, the KL trust region of one natural step per latent element (nats).
      tolerance: target accuracy of the answer, in posterior standard deviations (Fisher
        metric, root mean square over the latent elements); ``None``: by the model's size,
        :func:`default_tolerance` (0.005 up to 64 elements, 0.02 from 1,024).
      window: iterations per compiled window (the unit of monitoring).
      min_batches: batch means needed before the MCSE is trusted.
      max_batches: batch means after which a stage ends (step halved) even when its average
        is not yet known to ``tolerance`` (a near miss that could end the run averages on, up
        to ``NEAR_MISS_BATCHES`` times as many).
      trial_windows: windows each candidate runs before the best is kept.
      adam_step_size: the Adam candidates' middle learning rate.
      max_draws: gradient draws spent in the averaging phases after which the run stops
        unconverged (reason ``"max_draws"``, with the accuracy it reached; the approach to the
        optimum is not counted: ``num_steps`` caps it); ``None``: :func:`default_max_draws` of
        the tolerance, 4 times the most a converged run has spent averaging (no cap for minibatch VI,
        whose draws see a batch of the rows: ``num_steps`` caps it).
      coarsest_tolerance: where set, ``tolerance`` is widened at the first stage's end by its
        measured noise up to this (:func:`sized_tolerance`); ``None``: ``tolerance`` holds for
        the whole run. ``fit`` sets it (to 0.02) where the tolerance is its default and the
        model has at least ``WIDENED_TOLERANCE_ELEMENTS`` latent elements.
    """

    step_size: float = 0.1
    max_kl: float = 0.5
    tolerance: float | None = None
    window: int = 100
    min_batches: int = 8
    max_batches: int = 64
    trial_windows: int = 3
    adam_step_size: float = 0.1
    max_draws: int | None = None
    coarsest_tolerance: float | None = None

    def validated(self) -> "AdaptiveSettings":
        for name in ("step_size", "max_kl", "adam_step_size"):
            validation.positive_float(getattr(self, name), name)
        if self.tolerance is not None:
            validation.positive_float(self.tolerance, "tolerance")
        if self.max_draws is not None:
            validation.positive_int(self.max_draws, "max_draws")
        if self.coarsest_tolerance is not None:
            validation.positive_float(self.coarsest_tolerance, "coarsest_tolerance")
        for name in ("window", "min_batches", "max_batches", "trial_windows"):
            if validation.positive_int(getattr(self, name), name) < 2:
                raise ConfigError(f"{name}: expected an integer of at least 2, found {getattr(self, name)!r}")
        return self


class Convergence(NamedTuple):
    """How a run ended.

    Attributes:
      converged: the stopping rule was met (two consecutive stage averages agree and each is
        known to ``tolerance``).
      reason: ``"converged"``, ``"max_steps"``, ``"time_budget"``, ``"interrupted"``,
        ``"max_draws"`` (the draws cap), ``"drifting"`` (the stage's average did not settle as
        its draws predict: :func:`drifting`) or ``"fixed_schedule"`` (an explicit step size or
        optimizer: no convergence rule ran).
      num_iterations: iterations run (the trial's steps of every candidate included).
      num_stages: step-size stages begun.
      step_size: ``rho`` of the last stage.
      accuracy: estimated error of the returned average, in posterior standard deviations:
        its Monte Carlo error and, for a run stopped before converging, its stage's bias
        estimated from the change between stages (``stage_bias``, or this stage's average
        against the last one's). nan where no average was formed, and where the answer is the
        first stage's average: its bias, of the order of its step, is measured only by a
        second stage (rat tumours stopped at 5 s in its first stage: Monte Carlo error 0.020
        sd, 0.064 sd from the converged answer; the converged run's first stage change was
        0.065 sd). ``monte_carlo_error`` says the part that is known.
      stage_change: difference between the last two stage averages, same units (nan if fewer).
      stage_bias: the last stage's bias estimated from that change (:func:`stage_bias`; the
        change itself when the step was halved between them; nan across a stage that clipped
        more than ``MAX_CLIPPED`` of its elements' steps).
      averaged_iterations: iterations in the returned average (0: the last iterate).
      restarts: times a falling ELBO restored the best state and halved ``rho``.
      direction: the update rule kept (``"natural"`` or ``"adam-<learning rate>"``).
      draws: gradient estimates averaged per step in the last stage (0: not the default
        procedure's record).
      trial_elbos: each candidate's median ELBO over its last trial window.
      trial_note: how the rule was chosen (the trial's length, or why there was none).
      monte_carlo_error: the answer's Monte Carlo error alone (sd; nan: no average).
      climbs: times the first stage's average restarted because its batch ELBOs still rose
        (:func:`climbing`).
      coupled: the natural steps coupled the real-valued latents' locations by the log
        joint's Hessian (:mod:`grepvi.optim.coupling`; :func:`_coupled_next` says when).
      control_variate: ``"quadratic"`` where a stage of the run ran again with G-REP's
        quadratic control variate (:func:`_expands` says when), else ``""``.
      error_latent: for a run stopped unconverged with its answer the current stage's
        average, the latent whose ``q`` holds the largest share of that average's squared
        Monte Carlo error (:func:`error_shares`; a small model's latents stacked into one
        array are named together, ``"a+b"``); ``""`` otherwise.
      error_share: that share (nan where ``error_latent`` is ``""``).
      change_latent: for a run stopped unconverged after two stages, the latent whose ``q``
        moved most between the last two stages' averages: its share of the squared change in
        the Fisher metric (:func:`change_shares`, the change ``stage_bias`` is estimated
        from) is the largest; ``""`` otherwise. Where the answer's bias exceeds its Monte Carlo
        error this says where the average still moves as ``rho / D`` shrinks.
      change_share: that share (nan where ``change_latent`` is ``""``).
      settles: times a later stage's average restarted because its batch means still moved
        along a line (:func:`settling`), all stages together.
      narrowed: times the trial ran again from a start ``NARROWING`` times as wide, every rule
        having failed from the wider one (:func:`narrows`).
      clipped: for a run stopped with a stage's average as its answer, the largest fraction of
        latent elements whose steps the natural gradient's trust region shrank in that stage
        and the one its bias is measured against; over ``MAX_CLIPPED`` the bias is not
        estimated and ``accuracy`` is nan (nan: no stage average).
      tolerance: the tolerance the run's convergence rule used (sd): the settings' or, where
        the first stage's noise widened it, :func:`sized_tolerance`'s (nan: a fixed schedule).
    """

    converged: bool
    reason: str
    num_iterations: int
    num_stages: int = 0
    step_size: float = math.nan
    accuracy: float = math.nan
    stage_change: float = math.nan
    stage_bias: float = math.nan
    averaged_iterations: int = 0
    restarts: int = 0
    direction: str = ""
    draws: int = 0
    trial_elbos: dict = {}
    trial_note: str = ""
    monte_carlo_error: float = math.nan
    climbs: int = 0
    coupled: bool = False
    error_latent: str = ""
    error_share: float = math.nan
    control_variate: str = ""
    change_latent: str = ""
    change_share: float = math.nan
    settles: int = 0
    narrowed: int = 0
    clipped: float = math.nan
    tolerance: float = math.nan

    def summary(self) -> str:
        state = "converged" if self.converged else f"not converged ({self.reason})"
        accuracy = f"accuracy {self.accuracy:.2g} sd"
        if self.converged and math.isfinite(self.tolerance):
            accuracy += f" (tolerance {self.tolerance:.2g})"
        if math.isnan(self.accuracy) and math.isfinite(self.monte_carlo_error):
            why = "the first stage's bias is measured by a second"
            if self.clipped > MAX_CLIPPED:
                why = (
                    f"the trust region clipped {self.clipped:.0%} of the elements' steps, and a "
                    "clipped stage's bias is not measured"
                )
            accuracy = f"accuracy unknown (Monte Carlo error {self.monte_carlo_error:.2g} sd; {why})"
        return (
            f"{state} after {self.num_iterations} iterations, {self.num_stages} stage(s) of "
            f"{self.direction or 'fixed'} steps"
            + (" with coupled locations" if self.coupled else "")
            + (f" with the {self.control_variate} control variate" if self.control_variate else "")
            + (f" ({self.draws} draws per step)" if self.draws else "")
            + "; "
            f"{accuracy}, stage change {self.stage_change:.2g} sd "
            f"(bias {self.stage_bias:.2g} sd); "
            + (
                f"the answer averages {self.averaged_iterations} iterates"
                if self.averaged_iterations
                else "the answer is the last iterate"
            )
            + (
                f" (the first stage's average restarted {self.climbs} time(s) while the ELBO climbed)"
                if self.climbs
                else ""
            )
            + (
                f" (a stage's average restarted {self.settles} time(s) while its iterates still moved)"
                if self.settles
                else ""
            )
            + (
                f" (from a start {NARROWING**-self.narrowed:g} times narrower than the families': every "
                "rule failed from the wider start)"
                if self.narrowed
                else ""
            )
        )


class WindowSummary(NamedTuple):
    """What the controller reads of a window: per-step ELBO estimates and finiteness, which
    latents had a non-finite gradient, and the mean of the window's iterates."""

    elbo: np.ndarray
    finite: np.ndarray
    nonfinite_latents: np.ndarray  # (steps, latents) bool
    mean_params: Any
    clipped: np.ndarray | None = None  # per step, the fraction of elements the trust region shrank


class ControllerState(NamedTuple):
    """Everything the procedure decides from, as arrays (checkpointed with the run).

    Scalars are NumPy 0-d arrays; ``leader_state`` and ``best_state`` are states of the loop
    (``VIState``), the others pytrees shaped like the parameters (float64).
    """

    phase: np.ndarray
    reason: np.ndarray
    iterations: np.ndarray
    candidate: np.ndarray
    step_size: np.ndarray
    trial_steps: np.ndarray  # per candidate; -1: to be sized by a timed probe
    trial_done: np.ndarray
    trial_scores: np.ndarray  # (candidates,), nan until tried
    trial_spreads: np.ndarray
    leader: np.ndarray  # -1: none yet
    leader_state: Any
    stage: np.ndarray
    restarts: np.ndarray
    stalled: np.ndarray
    medians: np.ndarray  # the last TREND_WINDOWS window medians
    num_medians: np.ndarray
    best_elbo: np.ndarray
    best_state: Any
    batches: np.ndarray
    mean: Any
    m2: Any
    batch_sum: Any
    batch_windows: np.ndarray
    previous: Any
    has_previous: np.ndarray
    accuracy: np.ndarray
    stage_change: np.ndarray
    skipped_trial: np.ndarray  # the trial did not fit its time limit: the fallback ran
    trial_ran: np.ndarray  # (candidates,) trial steps each candidate ran (fewer: stopped early)
    trial_curve: np.ndarray  # (3, TRIAL_CURVE) the running candidate's window medians, SEs and steps
    leader_curve: np.ndarray  # (3, TRIAL_CURVE) the leader's (compared at equal steps)
    trailing: np.ndarray  # checks in a row at which the running candidate trailed the leader
    widened: np.ndarray  # gradients widened to float64 where float32 overflows: 1 on, 0 untried, -1 no help
    repeats: np.ndarray  # repeats of the step's gradient estimates (the draws per step over the base)
    previous_scale: np.ndarray  # rho / repeats of the previous stage (nan: none)
    previous_accuracy: np.ndarray  # the previous stage's MCSE (sd)
    previous_iterations: np.ndarray  # iterations in the previous stage's average
    stage_bias: np.ndarray  # the last stage's bias estimated from the change (sd; nan: none)
    best_se: np.ndarray  # the standard error of the best window's median (nan: none)
    estimates: np.ndarray  # gradient estimates of the averaging phases: steps x repeats (x base draws: draws)
    clipped_sum: np.ndarray  # the stage's averaged steps' clipped fractions, summed
    clipped_steps: np.ndarray  # the steps counted in clipped_sum
    previous_clipped: np.ndarray  # the previous stage's mean clipped fraction (0: none)
    previous_estimates: np.ndarray  # gradient estimates (steps x repeats) in the previous stage's average
    batch_elbo: np.ndarray  # the current batch's window medians, summed
    # (5,) of the finite batch ELBOs y_b: y_1, their count, sums of b (y_b - y_1), y_b - y_1, squares
    elbo_trend: np.ndarray
    climbs: np.ndarray  # times a first stage's average restarted because its batch ELBOs rose
    # the natural rule's locations coupled (grepvi.optim.coupling): 1 yes, -1 tried and not, 0 untried;
    # EXPANDED (2): a stage ran again with the quadratic control variate instead (_expands);
    # SLIDE_UNCOUPLED (-2): tried again where a stage slid at its draws cap, not coupled (sliding_uncoupled);
    # COUPLING_DEFERRED (-3): the first stage's error did not ask for it, the second stage's may (_error_rose)
    coupled: np.ndarray = np.asarray(0)
    # the natural rule took over from the trial's non-linear rule at its approach's end
    # (_handover_candidate): 1 yes, -1 it fell in its first stage and that rule resumed, 0 not
    handed_over: np.ndarray = np.asarray(0)
    handed_from: np.ndarray = np.asarray(-1)  # the candidate it took over from
    handed_step: np.ndarray = np.asarray(np.nan)  # that candidate's step size then
    handed_at: np.ndarray = np.asarray(0)  # the iterations run then
    # the first stage's Monte Carlo error times the root of its gradient estimates, where the
    # coupling reran it (nan: none, or its rerun already judged: _coupling_helped)
    uncoupled_error: np.ndarray = np.asarray(np.nan)
    # the latent (index in the sorted names of the averages) holding the largest share of the
    # last stage change (change_shares; -1: none measured), and that share
    change_latent: np.ndarray = np.asarray(-1)
    change_share: np.ndarray = np.asarray(np.nan)
    # sum over the stage's batch means of (batch index x mean): their trend against the index
    # (:func:`settling`; set by :func:`init`)
    trend_sum: Any = None
    settles: np.ndarray = np.asarray(0)  # times a stage's average restarted for its trend (all stages)
    stage_settles: np.ndarray = np.asarray(0)  # those of the current stage
    # candidates of the current trial whose trial failed (:func:`_trial_failed`)
    trial_failed: np.ndarray = np.asarray(0)
    narrowed: np.ndarray = np.asarray(0)  # times the trial ran again from a narrower start (narrows)
    # the tolerance the first stage's noise sized (sized_tolerance; nan: settings.tolerance)
    tolerance: np.ndarray = np.asarray(np.nan)


def _i(value) -> np.ndarray:
    return np.asarray(value, np.int64)


def _f(value) -> np.ndarray:
    return np.asarray(value, np.float64)


def _zeros_like_params(params):
    return jax.tree_util.tree_map(lambda leaf: np.zeros(np.shape(leaf), np.float64), params)


def _as_host(tree):
    """Parameter pytrees as float64 NumPy arrays (the averages are kept on the host)."""
    return jax.tree_util.tree_map(lambda leaf: np.asarray(leaf, np.float64), tree)


def init(
    state,
    num_candidates: int,
    first_step_size: float,
    *,
    fixed: bool = False,
    trial_steps: int = 0,
) -> ControllerState:
    """The controller for a run starting at the loop state ``state``.

    ``fixed``: a fixed schedule (no trial, no stages). ``trial_steps``: iterations per
    candidate (``-1``: sized later by :func:`size_trial`; ``0`` or one candidate: no trial).
    """
    zeros = _zeros_like_params(state.params)
    trial = not fixed and num_candidates > 1 and trial_steps != 0
    return ControllerState(
        phase=_i(FIXED if fixed else (TRIAL if trial else APPROACH)),
        reason=_i(0),
        iterations=_i(0),
        candidate=_i(0),
        step_size=_f(first_step_size),
        trial_steps=_i(trial_steps if trial else 0),
        trial_done=_i(0),
        trial_scores=np.full(max(num_candidates, 1), np.nan),
        trial_spreads=np.zeros(max(num_candidates, 1)),
        leader=_i(-1),
        leader_state=state,
        stage=_i(0),
        restarts=_i(0),
        stalled=_i(0),
        medians=np.zeros(TREND_WINDOWS),
        num_medians=_i(0),
        best_elbo=_f(-np.inf),
        best_state=state,
        batches=_i(0),
        mean=zeros,
        m2=zeros,
        batch_sum=zeros,
        batch_windows=_i(0),
        previous=zeros,
        has_previous=np.asarray(False),
        accuracy=_f(np.nan),
        stage_change=_f(np.nan),
        skipped_trial=np.asarray(False),
        trial_ran=np.zeros(max(num_candidates, 1), np.int64),
        trial_curve=np.full((3, TRIAL_CURVE), np.nan),
        leader_curve=np.full((3, TRIAL_CURVE), np.nan),
        trailing=_i(0),
        widened=_i(0),
        repeats=_i(1),
        previous_scale=_f(np.nan),
        previous_accuracy=_f(np.nan),
        previous_iterations=_i(0),
        estimates=_i(0),
        clipped_sum=_f(0.0),
        clipped_steps=_i(0),
        previous_clipped=_f(0.0),
        previous_estimates=_i(0),
        stage_bias=_f(np.nan),
        best_se=_f(np.nan),
        batch_elbo=_f(0.0),
        elbo_trend=np.zeros(5),
        climbs=_i(0),
        coupled=_i(0),
        handed_over=_i(0),
        handed_from=_i(-1),
        handed_step=_f(np.nan),
        handed_at=_i(0),
        uncoupled_error=_f(np.nan),
        change_latent=_i(-1),
        change_share=_f(np.nan),
        trend_sum=zeros,
        settles=_i(0),
        stage_settles=_i(0),
        trial_failed=_i(0),
        narrowed=_i(0),
        tolerance=_f(np.nan),
    )


def elbo_trend_t(means) -> float:
    """t statistic of the slope of ``means`` against their index (inf when perfectly linear
    and increasing; nan below 3 values)."""
    y = np.asarray(means, np.float64)
    n = y.size
    if n < 3:
        return math.nan
    x = np.arange(n) - (n - 1) / 2
    slope = float(np.dot(x, y - y.mean()) / np.dot(x, x))
    residual = y - y.mean() - slope * x
    variance = float(np.dot(residual, residual)) / (n - 2)
    se = math.sqrt(variance / float(np.dot(x, x)))
    if se == 0.0:
        return math.inf if slope > 0 else (-math.inf if slope < 0 else 0.0)
    return slope / se


class _Window(NamedTuple):
    median: float
    se: float
    low: float  # the TAIL_QUANTILE of the finite estimates
    good: int
    steps: int


def summarize(summary: WindowSummary) -> _Window:
    """Robust statistics of a window's ELBO estimates: the median and a MAD-based standard
    error (one-draw estimates at small gamma shapes have heavy tails), and the lower
    ``TAIL_QUANTILE`` quantile."""
    elbo = np.asarray(summary.elbo, np.float64)
    good = elbo[np.asarray(summary.finite, bool) & np.isfinite(elbo)]
    if not good.size:
        return _Window(-math.inf, math.inf, -math.inf, 0, elbo.size)
    median = float(np.median(good))
    se = (
        float(1.4826 * np.median(np.abs(good - median)) / math.sqrt(good.size)) if good.size > 1 else math.inf
    )
    return _Window(median, se, float(np.quantile(good, TAIL_QUANTILE)), int(good.size), int(elbo.size))


def _fell_below_best(state: ControllerState, window: _Window) -> bool:
    """The window's median is below the best window's by ``FALL_FRACTION`` of its magnitude,
    ``FALL_NATS`` and 10 standard errors of the best window's median.

    The best window's standard error, not this one's: a collapsing ``q`` widens its own
    window's spread. On the Olivetti DEF (Adam 0.1, step ~3,400) the one-draw ELBO's spread
    grew twentyfold within a window (median SE 3e3 to 6e4-1.3e5) as the median fell from
    -6.22e6 to -6.4e6..-6.7e6 and stayed there; ten of its own standard errors hid the fall,
    and the stage averaged the fallen iterates (answer -6.24e6 +- 1.3e5 against the best
    window's -6.12e6 +- 3e3)."""
    best = float(state.best_elbo)
    if not math.isfinite(best):
        return False
    noise = float(state.best_se) if math.isfinite(float(state.best_se)) else window.se
    return window.median < best - max(FALL_FRACTION * abs(best), 10.0 * noise, FALL_NATS)


def _collapsed(window: _Window) -> bool:
    """A left tail the median hides: the window's lower 5% quantile is far below its median.

    Not the mean: a healthy one-draw ELBO at gamma shapes near 0.1 has single draws a million
    times its median (the Olivetti DEF on a GPU, 733 windows of 100: mean up to 1.7e4
    magnitudes below the median, the 5% quantile at most 0.73), which halved a converging
    run's step 12 times; a diverging ADVI (Omniglot: draws of -1e16 under a -7e6 median) puts
    many draws there."""
    return window.low < _collapse_floor(window.median)


def _collapse_floor(level: float) -> float:
    """``TAIL_FACTOR`` magnitudes of ``level`` below it: a window's lower tail under it has
    collapsed (:func:`_collapsed`), as has a trial score under the leader's (:func:`_runner_up`)."""
    return level - TAIL_FACTOR * max(abs(level), 1.0)


def trial_check(trial_steps: int) -> int:
    """Steps after which every candidate's first trial window ends (the first comparison
    with the leader): ``TRIAL_CHECK_FRACTION`` of the trial, at least ``TRIAL_FIRST_CHECK``."""
    return max(math.ceil(TRIAL_CHECK_FRACTION * trial_steps), TRIAL_FIRST_CHECK)


def next_window_length(state: ControllerState, window: int, max_steps: int | None) -> int:
    """Steps of the next window (before any time limit): a full window; in the trial, up to
    the trial's check (:func:`trial_check`), then the trial's remainder first (so that each
    candidate's last window, the one scored, is full); or what is left under ``max_steps``."""
    length = window
    if int(state.phase) == TRIAL and int(state.trial_steps) > 0:
        done = int(state.trial_done)
        remaining = int(state.trial_steps) - done
        check = trial_check(int(state.trial_steps))
        length = min(check - done, window) if done < check else remaining % window or window
    if max_steps is not None:
        length = min(length, max_steps - int(state.iterations))
    return max(length, 0)


def size_trial(
    state: ControllerState, steps: int, fallback: int, step_size: float, loop_state, initial_state, select
) -> tuple[ControllerState, Any]:
    """Sets the trial's steps per candidate after a timed probe. Below ``MIN_TRIAL_STEPS`` the
    trial is skipped and candidate ``fallback`` runs (from the probe's state if it was the
    probed candidate, else from the start). Returns ``(state, loop state to run next)``."""
    if steps >= MIN_TRIAL_STEPS:
        return state._replace(trial_steps=_i(steps)), loop_state
    keep = loop_state if fallback == int(state.candidate) else initial_state
    keep = select(keep, fallback, step_size)
    return state._replace(
        phase=_i(APPROACH),
        candidate=_i(fallback),
        step_size=_f(step_size),
        trial_steps=_i(0),
        skipped_trial=np.asarray(True),
        best_state=keep,
    ), keep


def _welford_add(state: ControllerState, tree) -> ControllerState:
    count = int(state.batches) + 1
    trend_sum = jax.tree_util.tree_map(lambda s, x: s + count * x, state.trend_sum, tree)
    if count == 1:
        return state._replace(batches=_i(1), mean=tree, m2=_zeros_like_params(tree), trend_sum=trend_sum)
    delta = jax.tree_util.tree_map(np.subtract, tree, state.mean)
    mean = jax.tree_util.tree_map(lambda m, d: m + d / count, state.mean, delta)
    m2 = jax.tree_util.tree_map(lambda s, x, m, d: s + d * (x - m), state.m2, tree, mean, delta)
    return state._replace(batches=_i(count), mean=mean, m2=m2, trend_sum=trend_sum)


def _standard_error(state: ControllerState):
    n = int(state.batches)
    return jax.tree_util.tree_map(lambda m2: np.sqrt(m2 / (n * (n - 1))), state.m2)


def _restart_settled(state: ControllerState, linear: bool, rho: float, window: int) -> bool:
    """Whether a natural-gradient stage after the first has approached for long enough without
    the ELBO's trend test: ``10 / rho`` steps (a batch's length), at least.

    Such a stage starts from the previous stage's average, and a natural-gradient step
    contracts the distance to the stationary mean by about ``1 - rho`` (exactly, for a
    posterior in the family), so ``10 / rho`` steps leave ``e^-10`` of a start that is already
    within the previous stage's bias. The trend test alone grows stricter as the draws rise
    (its noise falls) and waited on an ELBO that rose only by what a ridge lets mean-field q
    slide: a horseshoe regression's second stage, at 64 times the draws, approached for
    1,900 steps (12 s) where the other textbook models' stages after the first took 400.

    The contraction holds for a step linear in its gradient: where the previous stage's trust
    region shrank more than ``SETTLED_CLIPPED`` of its elements' steps a clipped step does not
    contract by ``1 - rho``, and the stage waits for ``MIN_APPROACH_WINDOWS`` windows as well.
    Elsewhere the ``10 / rho`` steps suffice: the second stage, the costliest of a small
    model's fit (41-64 times the draws a step), approaches for one window instead of four."""
    if not linear or int(state.stage) < 1:
        return False
    if int(state.num_medians) < _batch_windows_needed(rho, window):
        return False
    return int(state.num_medians) >= MIN_APPROACH_WINDOWS or float(state.previous_clipped) <= SETTLED_CLIPPED


def _batch_windows_needed(rho: float, window: int) -> int:
    return max(1, math.ceil(10.0 / rho / window))


def _new_stage_statistics(state: ControllerState) -> ControllerState:
    zeros = _zeros_like_params(state.mean)
    return state._replace(
        num_medians=_i(0),
        batches=_i(0),
        mean=zeros,
        m2=zeros,
        batch_sum=zeros,
        batch_windows=_i(0),
        clipped_sum=_f(0.0),
        clipped_steps=_i(0),
        batch_elbo=_f(0.0),
        elbo_trend=np.zeros(5),
        trend_sum=zeros,
    )


def _add_batch_elbo(state: ControllerState, elbo: float) -> ControllerState:
    """Adds the batch ELBO ``elbo`` to the stage's regression sums (its index: the count of
    finite batch ELBOs so far), shifted by the first one (the sums stay small). A non-finite
    batch ELBO (a window with no finite draw, at a step that may not be halved further) is
    left out."""
    if not math.isfinite(elbo):
        return state
    trend = state.elbo_trend.copy()
    index = int(trend[1]) + 1
    if index == 1:
        trend[0] = elbo
    y = elbo - trend[0]
    trend[1:] += (1.0, index * y, y, y * y)
    return state._replace(elbo_trend=trend)


def batch_trend_t(state: ControllerState) -> float:
    """The t statistic of the slope of the stage's batch ELBOs against their index
    (:func:`elbo_trend_t` from running sums: ``S_xy / S_xx`` over its standard error; nan
    below 3 batches)."""
    _, count, sum_by, sum_y, sum_yy = (float(v) for v in state.elbo_trend)
    n = int(count)
    if n < 3:
        return math.nan
    mean_b = (n + 1) / 2.0
    sxx = n * (n * n - 1) / 12.0
    sxy = sum_by - mean_b * sum_y
    syy = sum_yy - sum_y * sum_y / n
    slope = sxy / sxx
    variance = max(syy - slope * sxy, 0.0) / (n - 2)
    if variance == 0.0:
        return math.inf if slope > 0 else (-math.inf if slope < 0 else 0.0)
    return slope / math.sqrt(variance / sxx)


def climbing(state: ControllerState) -> bool:
    """Whether a first stage's average is over a climb: its batch ELBOs rise against their
    index with a regression t above ``CLIMB_T``.

    The approach's trend test regresses the last 8 window medians; a climb slower than their
    noise ends it, and the stage then averaged iterates that kept climbing: the Olivetti DEF
    (Adam, rho 0.05) began its average at step 4,925 with a window ELBO of -5.86e6, which
    rose to -5.71e6 by step 18,125, and the 600 s answer (the average of 12,800 iterates)
    scored -5.977e6. Only the first stage: a later stage starts from the previous one's
    average, near the optimum, and a natural-gradient stage there may average along a ridge
    whose ELBO rises without end (a horseshoe regression; :func:`drifting` stops those)."""
    return int(state.stage) == 0 and batch_trend_t(state) > CLIMB_T


SETTLE_SHARE = 0.5  # detrended error at most this share of the stage's error: still settling
MAX_STAGE_SETTLES = 3  # restarts of one stage's average for its trend
SETTLE_MIN_ERROR = 2.0  # tolerances: a stage's error below this is not worth a restart


def detrended_accuracy(state: ControllerState, distance) -> float:
    """The Monte Carlo error of the stage's average (sd, as ``accuracy``) from its batch means'
    residuals about a straight line in their index: what the error would be were the stage's
    trend not in its batch means. nan below 4 batches."""
    n = int(state.batches)
    if n < 4:
        return math.nan
    centre = (n + 1) / 2.0
    sxx = n * (n * n - 1) / 12.0

    def residual(m2, mean, trend_sum):
        sxy = trend_sum - centre * n * mean
        return np.sqrt(np.maximum(m2 - sxy * sxy / sxx, 0.0) / (n * (n - 2)))

    errors = jax.tree_util.tree_map(residual, state.m2, state.mean, state.trend_sum)
    return float(distance(state.mean, errors))


def settling(state: ControllerState, accuracy: float, distance, tolerance: float, room: int) -> bool:
    """Whether a stage's average restarts (at the same step and draws) because its batch means
    still move: most of its error is their trend (:func:`detrended_accuracy` at most
    ``SETTLE_SHARE`` of ``accuracy``), checked at every batch from ``min_batches`` on where
    the stage is a later one (the first stage's climb is the ELBO's test, :func:`climbing`,
    and its slide along a stiff direction the coupling's), its error over
    ``SETTLE_MIN_ERROR`` tolerances, and its draws may still be raised (``room``, where a
    trend read as noise would raise them for nothing); at most ``MAX_STAGE_SETTLES`` times a
    stage.

    A trend is not Monte Carlo noise, and more draws do not shrink it. UC Berkeley admissions
    (McElreath's varying intercepts and slopes, non-centred): the coupled rerun of its first
    stage read the department scales' slide along the non-centred ridge as an error of 0.087
    sd (0.041 without the trend), drew 64 times the draws a step, slid on at that cost for
    1,500 steps, and its average, half slide, lay 0.49 sd from the next stage's: the run
    ended at the draws cap (10,550 steps, 16.2-16.5 s). With one restart it converges in
    7,250 (9.1-10.1 s). Over the 163 models of the census, 160 ran as before; an AR(1) state
    space model took 6,450 steps instead of 3,950 (6.1-7.0 s against 4.5-5.0): its second
    stage restarted and, its error no longer inflated by the trend, raised the draws 5 times
    where 10 times had sufficed before; its third stage restarted too, and a fourth ran.
    """
    if int(state.stage) < 1 or int(state.stage_settles) >= MAX_STAGE_SETTLES or room < 2:
        return False
    if not math.isfinite(accuracy) or accuracy <= SETTLE_MIN_ERROR * tolerance:
        return False
    detrended = detrended_accuracy(state, distance)
    return math.isfinite(detrended) and detrended <= SETTLE_SHARE * accuracy


SLIDE_UNCOUPLED = -2  # ControllerState.coupled: tried again where a stage slid at its draws cap, not coupled


def sliding_uncoupled(state: ControllerState, accuracy: float, distance, tolerance: float, room: int) -> bool:
    """Whether a later stage, uncoupled and at its draws cap, slides: most of its error is the
    trend of its batch means (:func:`detrended_accuracy` at most ``SETTLE_SHARE`` of
    ``accuracy``, which is over ``SETTLE_MIN_ERROR`` tolerances), the draws cannot be raised
    (``room < 2``, where :func:`settling` does not restart), and the locations are not coupled
    (``coupled`` -1: never coupled, or the coupling dropped after the first stage's rerun).
    Its locations are then coupled at the iterate, once (:func:`grepvi.optim.coupling`), and
    the stage runs again; where the coupling covers nothing, ``coupled`` becomes
    ``SLIDE_UNCOUPLED`` and the stage goes on.

    The first stage's rerun judges the coupling on the error of one gradient estimate at its
    draws, where the noise of a single draw can hide a slow slide along a ridge that dominates
    once the draws are many. Kline's Gaussian process (McElreath's m14.8: ``lambda = a P^b / g
    e^k``, only ``a / g`` identified with ``k``'s mean): at seed 7 the coupled rerun's error
    was 1.16 times the first stage's, the coupling was dropped, and the third stage, at 64
    times the draws, slid (``a``'s log-mean 1.155 -> 1.207, ``g``'s -0.263 -> -0.310 over
    4,700 steps, its error stuck at 0.013-0.015 sd against 0.005) to the draws cap."""
    if int(state.coupled) not in (-1, COUPLING_DEFERRED) or int(state.stage) < 1 or room >= 2:
        return False
    if not math.isfinite(accuracy) or accuracy <= SETTLE_MIN_ERROR * tolerance:
        return False
    detrended = detrended_accuracy(state, distance)
    return math.isfinite(detrended) and detrended <= SETTLE_SHARE * accuracy


def _stage_clipped(state: ControllerState) -> float:
    """The mean fraction of latent elements whose step the trust region shrank over the
    stage's averaged steps (0 where the rule reports none)."""
    return float(state.clipped_sum) / max(int(state.clipped_steps), 1)


def update(
    state: ControllerState,
    summary: WindowSummary,
    loop_state,
    *,
    settings: AdaptiveSettings,
    candidates,
    initial_state,
    select,
    distance,
    latent_names=(),
    max_repeats: int = 1,
    num_elements: int = 0,
    couple=None,
    expandable: bool | str = False,
    narrow=None,
) -> tuple[ControllerState, Any]:
    """The procedure's decision after a window: ``(controller state, loop state to run next)``.

    Args:
      summary: the window's :class:`WindowSummary`.
      loop_state: the loop state after the window.
      candidates: the :class:`grepvi.inference.rules.Candidate` list.
      initial_state: the loop state every candidate starts from.
      select: ``(loop state, candidate index, step size, repeats=1) -> loop state`` (sets the
        rule, its step and the repeats of the step's gradient estimates).
      distance: ``(params, delta) -> float``, the Fisher-metric length of ``delta`` at
        ``params`` in posterior standard deviations.
      max_repeats: the most repeats of the step's gradient estimates a stage may set (1: the
        draws per step never change).
      num_elements: the model's latent elements (0: unknown); from ``EARLY_END_ELEMENTS`` on,
        a stage whose average cannot be the answer ends at ``EARLY_END_ACCURACY`` times the
        tolerance (:func:`_provisional`).
      couple: ``(loop state) -> loop state or None``: the loop state with the natural rule's
        locations coupled at its parameters (:mod:`grepvi.optim.coupling`), or None where they
        are not coupled enough to need it; None: never coupled (:func:`_coupled_next`).
      expandable: the step may run G-REP's quadratic control variate (a second program): a
        stage that would raise the draws to ``EXPANSION_FACTOR`` times the first stage's runs
        again with it instead (:func:`_expands`); ``EXPAND_WHERE_CAPPED``: only where the draws
        cap leaves such a stage ``EARLY_FACTOR`` floors or more (:func:`_capped`).
      narrow: ``(loop state, times) -> loop state``: ``initial_state`` with every family's
        spread narrowed ``NARROWING ** times``-fold (:func:`narrows`); None: never narrowed.
    """
    window = summarize(summary)
    phase = int(state.phase)
    averaged = window.steps * int(state.repeats) if phase == AVERAGE else 0
    state = state._replace(
        iterations=_i(int(state.iterations) + window.steps),
        estimates=_i(int(state.estimates) + averaged),
    )
    if phase == FIXED:
        return _fixed_update(state, summary, latent_names), loop_state
    stalled = int(state.stalled) + 1 if window.good == 0 else 0
    state = state._replace(stalled=_i(stalled))
    if stalled >= STALL_WINDOWS and phase != TRIAL:
        bad = np.asarray(summary.nonfinite_latents, bool).reshape(window.steps, -1).any(0)
        latents = [name for name, flag in zip(latent_names, bad, strict=False) if flag]
        raise NumericalError(
            f"{stalled} windows in a row (up to iteration {int(state.iterations)}) had a non-finite "
            f"gradient at every step for latent(s) {latents}, with the step size halved to "
            f"{float(state.step_size):.3g}; the run has stalled. Check the model at the current parameters."
            + (_FINITE_VALUE_HINT if np.all(np.isfinite(np.asarray(summary.elbo))) else "")
        )
    if phase == TRIAL:
        return _trial_update(state, window, loop_state, candidates, initial_state, select, narrow, distance)
    return _stage_update(
        state, window, summary, loop_state, settings, candidates, select, distance, max_repeats, num_elements,
        couple, expandable,
    )  # fmt: skip


def _fixed_update(state, summary, latent_names):
    """A fixed schedule never changes the step; ``STALL_STEPS`` skipped steps in a row stop it."""
    finite = np.asarray(summary.finite, bool)
    run = int(state.stalled)
    for index, ok in enumerate(finite):
        run = 0 if ok else run + 1
        if run >= STALL_STEPS:
            bad = np.asarray(summary.nonfinite_latents, bool).reshape(finite.size, -1).any(0)
            latents = [name for name, flag in zip(latent_names, bad, strict=False) if flag]
            iteration = int(state.iterations) - finite.size + index + 1
            raise NumericalError(
                f"{run} steps in a row up to iteration {iteration} had a non-finite gradient "
                f"(latents {latents}); the run has stalled. Lower the step size or check the model "
                "at the current parameters."
            )
    return state._replace(stalled=_i(run))


def _trails_leader(state: ControllerState, window: _Window, done: int) -> float:
    """How far (a fraction of the leader's median's magnitude) the window's median is below
    the leader's after the same number of steps, where it is two standard errors below (0
    otherwise, and where the leader's curve has no window that ended there). Only at equal
    steps: with a trial of 201 steps on the Olivetti DEF, Adam's one-step window, still at
    the starting ELBO, was once compared with the natural gradient's window after 11 steps,
    every Adam rate stopped there, and the natural gradient, the worst rule by a factor of
    five, was kept."""
    if int(state.leader) < 0 or not math.isfinite(window.median):
        return 0.0
    (columns,) = np.nonzero(state.leader_curve[2] == done)
    if not columns.size:
        return 0.0
    median, se, _ = state.leader_curve[:, columns[-1]]
    if not math.isfinite(median):
        return 0.0
    if window.median < median - 2.0 * math.hypot(se, window.se if math.isfinite(window.se) else 0.0):
        return (median - window.median) / max(abs(median), 1e-30)
    return 0.0


def _trial_diverged(curve: np.ndarray, column: int, window: _Window) -> bool:
    """Whether a candidate's trial window shows it diverging: its median fell below the best
    of the candidate's earlier trial windows (``curve[:, :column]``) by the stages' fall rule
    (``FALL_FRACTION`` of its magnitude, ``FALL_NATS`` and 10 standard errors of that window),
    or its lower tail collapsed (:func:`_collapsed`) while its median rose no higher than that
    best. A candidate's first window, and a window whose median climbs past the best, is no
    collapse: its left tail is the climb itself (the natural gradient on an inverse gamma's
    tiny mean went from -1e17 to -500 within its first 75 steps: a 5% quantile of -1.6e17
    under a median of -8.4e9).

    Such a candidate scores ``-inf``: ranked by its last window alone, ADVI's Adam 0.1 on
    Omniglot's MF (median -8.5e7 after 26 steps, -8.7e9 after 97 with a 5% quantile of -5.9e16)
    beat Adam 0.01 (-2.4e8 after 25 steps, stopped there as it trailed Adam 0.1's curve), was
    kept, and the run's one-draw ELBO stayed near -1e16 for 600 s."""
    medians, ses = curve[0, :column], curve[1, :column]
    finite = np.isfinite(medians)
    if not math.isfinite(window.median) or not finite.any():
        return False
    best_index = int(np.argmax(np.where(finite, medians, -np.inf)))
    best, se = float(medians[best_index]), float(ses[best_index])
    if _collapsed(window) and window.median <= best:
        return True
    noise = se if math.isfinite(se) else (window.se if math.isfinite(window.se) else 0.0)
    return window.median < best - max(FALL_FRACTION * abs(best), 10.0 * noise, FALL_NATS)


def _replaces_leader(state: ControllerState, candidates, index: int) -> bool:
    """Candidate ``index``, having run the whole trial, becomes the leader: there is none, it
    is better by two standard errors, or it is ``preferred`` over the leader and not worse by
    two standard errors (the natural gradient, run after Adam 0.1, wins their ties as it did
    when it ran first)."""
    leader = int(state.leader)
    if leader < 0:
        return True
    scores, spreads = state.trial_scores, state.trial_spreads
    margin = 2.0 * math.hypot(spreads[leader], spreads[index])
    if scores[index] > scores[leader] + margin:
        return True
    preferred = bool(candidates) and candidates[index].preferred and not candidates[leader].preferred
    return preferred and scores[index] >= scores[leader] - margin


def _trial_failed(score: float, window: _Window, moved: bool = True, rule_finite: bool = True) -> bool:
    """A candidate's trial failed: its scored window has no finite score (non-finite, or
    diverged: :func:`_trial_diverged`), most of its steps skipped (a non-finite gradient), or
    its lower tail collapsed (:func:`_collapsed`), as a stage's window that falls; or its ``q``
    did not move from the start (``moved``: :func:`_moved`); or its rule's state is not finite
    (``rule_finite``: Adam's second moment of a gradient over ``1.8e19`` is ``inf`` in float32,
    and every later step of that element is 0)."""
    fell = not math.isfinite(score) or window.good < 0.5 * window.steps or _collapsed(window)
    return fell or not moved or not rule_finite


def _moved(loop_state, start, distance=None) -> bool:
    """Whether ``loop_state``'s ``q`` moved from ``start``'s by ``STILL_SD`` of ``q``'s own
    standard deviations or more (the Fisher length of the change at the start, ``distance``;
    without it, whether any parameter changed at all)."""
    end, begin = _as_host(loop_state.params), _as_host(start.params)
    if distance is None:
        leaves = zip(jax.tree_util.tree_leaves(end), jax.tree_util.tree_leaves(begin), strict=True)
        return not all(np.array_equal(x, y) for x, y in leaves)
    return not distance(begin, jax.tree_util.tree_map(np.subtract, end, begin)) < STILL_SD


def _all_finite(tree) -> bool:
    """Every inexact leaf of ``tree`` is finite (on the host)."""
    for leaf in jax.tree_util.tree_leaves(tree):
        value = np.asarray(leaf)
        if np.issubdtype(value.dtype, np.inexact) and not np.all(np.isfinite(value)):
            return False
    return True


def narrows(state: ControllerState, num_candidates: int, narrow) -> bool:
    """Whether the trial, at its end, runs again from a narrower start: every candidate's
    trial failed (:func:`_trial_failed`), the run can narrow its start (``narrow``) and has
    done so fewer than ``MAX_NARROWINGS`` times.

    A ``q`` as wide as the families' start can reach where the model overflows. A Poisson
    regression with covariates of scale 10 and ``q``'s scale 1 on the coefficients drew log
    rates of +-30 and more (median ELBO -2e26, lower 5% -9e31): every rule of the trial diverged
    and the run ended at the draws cap after 83,300 iterations at the start's answer; a
    Gompertz survival model (rates ``exp(log_rate + b x)`` raised to the times) had half its
    steps skipped in every window at an ELBO of -8e31 (its lower tail -3e34), Adam's second
    moments ``inf`` and the natural rule's steps vanishing, and ended there too after 84,100.
    From a start a tenth as wide both converged (3,650 and 6,550 iterations). Where any
    candidate's trial is sound the trial goes on as before: the run's rules decide there, not
    the start."""
    return (
        narrow is not None
        and num_candidates > 1
        and int(state.trial_failed) >= num_candidates
        and int(state.narrowed) < MAX_NARROWINGS
    )


def _narrowed_trial(state: ControllerState, candidates, initial_state, narrow, select):
    """The trial from its first candidate again, from ``initial_state`` narrowed once more
    (the same RNG key as the first trial's start)."""
    times = int(state.narrowed) + 1
    first = candidates[0].step_size
    start = select(narrow(initial_state, times), 0, first)
    count = len(state.trial_scores)
    state = state._replace(
        narrowed=_i(times),
        candidate=_i(0),
        step_size=_f(first),
        trial_done=_i(0),
        trial_scores=np.full(count, np.nan),
        trial_spreads=np.zeros(count),
        trial_ran=np.zeros(count, np.int64),
        trial_curve=np.full((3, TRIAL_CURVE), np.nan),
        leader_curve=np.full((3, TRIAL_CURVE), np.nan),
        leader=_i(-1),
        leader_state=start,
        trailing=_i(0),
        trial_failed=_i(0),
    )
    return state, start


def _trial_update(state, window, loop_state, candidates, initial_state, select, narrow=None, distance=None):
    done = int(state.trial_done) + window.steps
    index = int(state.candidate)
    ran = state.trial_ran.copy()
    ran[index] = done
    state = state._replace(trial_done=_i(done), trial_ran=ran)
    sized = int(state.trial_steps) >= 0  # -1: the probe ran; size_trial sets the steps next
    column = int(np.isfinite(state.trial_curve[2]).sum())  # the candidate's windows so far
    if column < TRIAL_CURVE:
        curve = state.trial_curve.copy()
        curve[:, column] = (window.median, window.se, done)
        state = state._replace(trial_curve=curve)
    ended = sized and done >= int(state.trial_steps)
    diverged = sized and _trial_diverged(state.trial_curve, min(column, TRIAL_CURVE), window)
    gap = _trails_leader(state, window, done) if sized else 0.0
    trailing = int(state.trailing) + 1 if gap > 0.0 else 0
    state = state._replace(trailing=_i(trailing))
    stop = gap >= TRIAL_WIDE_GAP or trailing >= 2 or diverged
    if (not sized or not ended) and math.isfinite(window.median) and not stop:
        return state, loop_state
    base_state = initial_state
    if narrow is not None and int(state.narrowed) > 0:  # the start this trial's candidates share
        initial_state = narrow(base_state, int(state.narrowed))  # at a candidate's end only
    scores, spreads = state.trial_scores.copy(), state.trial_spreads.copy()
    scores[index] = window.median if math.isfinite(window.median) and not diverged else -math.inf
    spreads[index] = window.se if math.isfinite(window.se) else 0.0
    failed = int(state.trial_failed)
    if narrow is not None:  # read only by narrows
        moved = _moved(loop_state, initial_state, distance)
        rule_finite = _all_finite(getattr(loop_state, "opt_state", None))
        failed += int(_trial_failed(scores[index], window, moved, rule_finite))
    state = state._replace(trial_scores=scores, trial_spreads=spreads, trial_failed=_i(failed))
    leader = int(state.leader)
    if ended and not diverged and _replaces_leader(state, candidates, index):
        state = state._replace(leader=_i(index), leader_state=loop_state, leader_curve=state.trial_curve)
    elif leader < 0:
        # The first candidate stopped early (non-finite, or diverged): the leader for now,
        # from the start (its own iterate left the region where its steps are stable), and
        # with no curve the others are compared with.
        start = initial_state if diverged else loop_state
        state = state._replace(leader=_i(index), leader_state=start)
    state = state._replace(trial_curve=np.full((3, TRIAL_CURVE), np.nan), trailing=_i(0))
    if index + 1 < len(candidates):
        nxt = candidates[index + 1]
        state = state._replace(candidate=_i(index + 1), trial_done=_i(0), step_size=_f(nxt.step_size))
        return state, select(initial_state, index + 1, nxt.step_size)
    if narrows(state, len(candidates), narrow):
        return _narrowed_trial(state, candidates, base_state, narrow, select)
    kept = int(state.leader)
    rho = candidates[kept].step_size
    start = select(state.leader_state, kept, rho)
    # The kept rule's scored window is the approach's best so far (its state is where the
    # approach starts): a first window far below it is a fall (:func:`_stage_update`).
    score = float(state.trial_scores[kept])
    best = score if math.isfinite(score) else -math.inf
    state = state._replace(
        phase=_i(APPROACH),
        candidate=_i(kept),
        step_size=_f(rho),
        best_state=start,
        best_elbo=_f(best),
        best_se=_f(float(state.trial_spreads[kept]) if math.isfinite(best) else math.nan),
    )
    return _new_stage_statistics(state), start


def _runner_up(state: ControllerState, candidates) -> int | None:
    """The trial's best-scored rule other than the one running, where its score is not a
    collapse below the running rule's (:func:`_collapsed`: ``TAIL_FACTOR`` magnitudes of the
    leader's score below it). None: no such score.

    Omniglot's runner-up (Adam 0.01, -1.4e8 under the leader's -4.5e7) is one; on a gamma
    posterior where float32 overflows (``tests/test_widened_gradient.py``, seed 2) Adam 0.1 at
    -6.9e15 under the natural rule's 77.2 is not: it took over from the natural rule's trial
    state, fell, halved its step 13 times and ended at the draws cap, its mean 5,000 times the
    posterior's."""
    current = int(state.candidate)
    leader = float(state.trial_scores[current])
    floor = _collapse_floor(leader) if math.isfinite(leader) else -math.inf
    scores = [
        (float(score), index)
        for index, score in enumerate(state.trial_scores[: len(candidates)])
        if index != current and math.isfinite(float(score)) and float(score) >= floor
    ]
    return max(scores)[1] if scores else None


FALLS_TO_RUNNER_UP = 3  # the trial's rule's falls in its first stage before the runner-up takes over


def _keeps_falling(state: ControllerState) -> bool:
    """The window's fall would be the trial's kept rule's ``FALLS_TO_RUNNER_UP``-th in its
    first stage (no handover, the trial ran): each fall has halved its step, and the rule the
    trial ranked next goes on instead (:func:`_runner_up`), once.

    A panel of 50 latent AR(1) series (``benchmarks/medium_models.py``, 2,003 elements) kept
    the natural rule at seed 1; five windows of its first stage fell (the last three with 3 to
    8 of their 100 one-draw ELBOs non-finite), its step went from 0.1 to 0.0031, whose batches
    are 3,200 steps long, and the run ended at ``max_steps`` (200,000 iterations, 46 s). With
    Adam 0.1 taking over at the third fall it converges in 17,550; at seed 0 the trial kept
    Adam 0.1, which converged in 11,350. Over the 199 census models at seeds 0 and 1 the rule
    never fired."""
    return (
        int(state.stage) == 0
        and int(state.handed_over) == 0
        and int(state.trial_steps) > 0
        and int(state.candidate) == int(state.leader)
        and int(state.restarts) >= FALLS_TO_RUNNER_UP - 1
    )


def _restarted(state: ControllerState, start, loop_state, **changes) -> tuple[ControllerState, Any]:
    """A new approach from ``start`` after a fall (the run's current RNG key, the restart
    counted, the stage's statistics cleared), with ``changes`` to the controller's state."""
    state = state._replace(phase=_i(APPROACH), restarts=_i(int(state.restarts) + 1), **changes)
    return _new_stage_statistics(state), start._replace(rng_key=loop_state.rng_key)


def _first_after_trial(state: ControllerState) -> bool:
    """The window is the first of the approach that follows the trial (no restart, no stage
    ended, no window recorded yet), and the trial ran."""
    return (
        int(state.phase) == APPROACH
        and int(state.stage) == 0
        and int(state.restarts) == 0
        and int(state.num_medians) == 0
        and int(state.trial_steps) > 0
        and not bool(state.skipped_trial)
        and int(state.handed_over) == 0
    )


def _stage_update(
    state,
    window,
    summary,
    loop_state,
    settings,
    candidates,
    select,
    distance,
    max_repeats=1,
    num_elements=0,
    couple=None,
    expandable=False,
):
    rho = float(state.step_size)
    repeats = int(state.repeats)
    linear = bool(candidates) and candidates[int(state.candidate)].linear
    room = max_repeats // repeats if linear else 1  # draws are raised for a step linear in the gradient
    base = candidates[int(state.candidate)].step_size if candidates else rho
    best = float(state.best_elbo)
    fell = window.good < 0.5 * window.steps or _collapsed(window) or _fell_below_best(state, window)
    mean_params = _as_host(summary.mean_params)
    if fell and _handed_over_first_stage(state):
        coupled_loop = None
        if couple is not None and linear and int(state.coupled) == 0:
            # a stiff direction across the locations (the natural step unstable along it):
            # Newton's coupled step from the best window's mean, at the same step
            coupled_loop = couple(state.best_state)
        if coupled_loop is not None:
            start = select(coupled_loop, int(state.candidate), rho, repeats)
            return _restarted(state, start, loop_state, coupled=_i(1))
        if rho > base * 2.0**-HANDOVER_HALVINGS:  # its step halved first, as any rule's fall
            start = select(state.best_state, int(state.candidate), rho / 2.0, repeats)
            return _restarted(state, start, loop_state, step_size=_f(rho / 2.0))
        return _hand_back(state, loop_state, select)
    unsound = _first_after_trial(state) or _keeps_falling(state)
    runner_up = _runner_up(state, candidates) if fell and candidates and unsound else None
    if runner_up is not None or (fell and rho > base * 2.0**-12):
        # A fall restores the best state and halves the step; where the kept rule fell in its
        # first window after the trial, the trial was too short to show its instability (ADVI
        # on Omniglot, one core: Adam 0.1 led after 46 steps and its next window's median was
        # -8e16; halving from there took every window of the budget), and the runner-up, which
        # ran as long without falling, goes on from the kept rule's trial state instead; so
        # it does, from the best state, at the kept rule's third fall in its first stage
        # (:func:`_keeps_falling`).
        candidate = int(state.candidate) if runner_up is None else runner_up
        rho = rho / 2.0 if runner_up is None else candidates[runner_up].step_size
        start = select(state.best_state, candidate, rho, repeats)
        return _restarted(state, start, loop_state, candidate=_i(candidate), step_size=_f(rho))
    if window.median > best:
        # The window's mean iterate, not its last: an instability that starts at the end of
        # the best window (seen on the Olivetti DEF with Adam) must not be what a fall restores.
        best_state = loop_state._replace(params=_cast_like(mean_params, loop_state.params))
        state = state._replace(best_elbo=_f(window.median), best_se=_f(window.se), best_state=best_state)
    if int(state.phase) == APPROACH:
        count = int(state.num_medians)
        medians = np.roll(state.medians, -1)
        medians[-1] = window.median
        count += 1
        state = state._replace(medians=medians, num_medians=_i(count))
        t = elbo_trend_t(medians[-min(count, TREND_WINDOWS) :])
        settled = _restart_settled(state, linear, rho, settings.window)
        if (count >= MIN_APPROACH_WINDOWS and t < 2.0) or settled:
            handover = _handover_candidate(state, candidates, num_elements)
            if handover is not None:
                return _hand_over(state, loop_state, mean_params, handover, candidates, select)
            state = _new_stage_statistics(state)._replace(phase=_i(AVERAGE))
        return state, loop_state
    # AVERAGE
    batch_sum = jax.tree_util.tree_map(np.add, state.batch_sum, mean_params)
    batch_windows = int(state.batch_windows) + 1
    batch_elbo = float(state.batch_elbo) + window.median
    state = state._replace(batch_sum=batch_sum, batch_windows=_i(batch_windows), batch_elbo=_f(batch_elbo))
    if summary.clipped is not None:
        clipped = np.asarray(summary.clipped, np.float64)
        state = state._replace(
            clipped_sum=_f(float(state.clipped_sum) + float(clipped.sum())),
            clipped_steps=_i(int(state.clipped_steps) + clipped.size),
        )
    if batch_windows < _batch_windows_needed(rho, settings.window):
        return state, loop_state
    state = _welford_add(state, jax.tree_util.tree_map(lambda s: s / batch_windows, batch_sum))
    state = _add_batch_elbo(state, batch_elbo / batch_windows)
    zeros = _zeros_like_params(batch_sum)
    state = state._replace(batch_sum=zeros, batch_windows=_i(0), batch_elbo=_f(0.0))
    if couple is not None and linear:
        _prepare_coupling(state, loop_state, couple, rho, settings, room, distance)
    if int(state.batches) < settings.min_batches:
        return state, loop_state
    if climbing(state):
        restarted = _new_stage_statistics(state)._replace(phase=_i(AVERAGE))
        return restarted._replace(climbs=_i(int(state.climbs) + 1)), loop_state
    accuracy = distance(state.mean, _standard_error(state))
    state = state._replace(accuracy=_f(accuracy))
    accurate = accuracy <= _tolerance(settings, state)
    averaged = _averaged_steps(state, rho, settings)
    can_couple = couple is not None and linear
    if can_couple and sliding_uncoupled(state, accuracy, distance, _tolerance(settings, state), room):
        coupled_loop = couple(loop_state)
        if coupled_loop is not None:  # the stage runs again from its iterate, coupled (not judged)
            return _run_again(state, select(coupled_loop, int(state.candidate), rho, repeats), 1)
        state = state._replace(coupled=_i(SLIDE_UNCOUPLED))
    if settling(state, accuracy, distance, _tolerance(settings, state), room):
        restarted = _new_stage_statistics(state)._replace(phase=_i(AVERAGE))
        return restarted._replace(
            settles=_i(int(state.settles) + 1), stage_settles=_i(int(state.stage_settles) + 1)
        ), loop_state
    if not accurate and drifting(state, accuracy, averaged * repeats):
        return state._replace(reason=_i(REASONS.index("drifting"))), loop_state
    costly = not accurate and _draws_factor(state, rho, math.nan, settings, room) >= EARLY_FACTOR
    provisional = not accurate and _provisional(
        state, accuracy, rho / repeats, settings, distance, num_elements
    )
    clipped = _stage_clipped(state)
    clipped_stage = clipped > MAX_CLIPPED  # only starts the next stage
    if not (accurate or costly or provisional or clipped_stage or int(state.batches) >= settings.max_batches):
        return state, loop_state
    if not (accurate or costly or provisional or clipped_stage) and _near_miss(
        state, accuracy, rho / repeats, settings, distance
    ):
        return state, loop_state
    # A stage ends when its average is known to the tolerance, or after max_batches batches
    # (a step too large for the noise is not averaged for ever), or as soon as its MCSE says
    # that at these draws it would cost EARLY_FACTOR floors (the next stage, at that many
    # times the draws, costs one; this one's error reaches the next one's bias estimate
    # divided by the factor). Only an accurate stage can end the run.
    average = state.mean
    scale = rho / repeats
    bias = math.nan
    if bool(state.has_previous):
        change, ratio, bias = _against_previous(state, accuracy, scale, distance)
        # a clipped stage's bias does not scale as rho / D: no estimate across it (the record
        # reports none; the next stage's size still reads the change)
        linear_steps = max(clipped, float(state.previous_clipped)) <= MAX_CLIPPED
        state = state._replace(
            stage_change=_f(change),
            stage_bias=_f(bias if linear_steps else np.nan),
            **_largest_change(state, distance),
        )
        # the previous stage's own error enters the estimate times ratio / (1 - ratio)
        settled = stage_bias(float(state.previous_accuracy), ratio) <= 2.0 * _tolerance(settings, state)
        if accurate and settled and linear_steps and bias <= 2.0 * _tolerance(settings, state):
            params = _cast_like(average, loop_state.params)
            return state._replace(reason=_i(REASONS.index("converged"))), loop_state._replace(params=params)
    params = _cast_like(average, loop_state.params)
    error = accuracy * math.sqrt(averaged * repeats)  # the stage's error for one estimate
    if couple is not None and linear:
        if int(state.coupled) == 1 and math.isfinite(float(state.uncoupled_error)):
            # a rerun whose trust region clipped its steps measured a shrunk step's error: not
            # a cut the coupling made (a 100-input Gaussian process's rerun clipped 89% of its
            # steps, and the coupled stages after it 86%, 69% and 38%)
            helped = _coupling_helped(float(state.uncoupled_error), error) and clipped <= MAX_CLIPPED
            state = state._replace(uncoupled_error=_f(np.nan))
            if not helped:
                state = state._replace(coupled=_i(-1))
                loop_state = couple.uncouple(loop_state)
        coupled_loop = _coupled_next(
            state, loop_state._replace(params=params), couple, rho, settings, room, error
        )
        if coupled_loop is not None and int(state.coupled) != 1:
            # The first stage drifted along a coupled direction: it runs again from its average
            # with the locations coupled, at its step and draws (its average, not settled,
            # would count as a bias against the next stage's).
            # judged after the rerun where a gamma's log-mean is in the block (_coupling_helped)
            gammas = bool(np.any(couple.mask(coupled_loop) & couple.gamma_elements))
            state = state._replace(uncoupled_error=_f(error if gammas else np.nan))
            return _run_again(state, select(coupled_loop, int(state.candidate), rho, repeats), 1)
        if coupled_loop is not None:
            loop_state = coupled_loop
        elif int(state.coupled) == 0:  # tried, or deferred to the second stage (_error_rose)
            asked = _coupling_asked(state, rho, settings, room)
            state = state._replace(coupled=_i(-1 if asked else COUPLING_DEFERRED))
        elif int(state.coupled) == COUPLING_DEFERRED:  # the second stage's end: tried or not, settled
            state = state._replace(coupled=_i(-1))
    if settings.coarsest_tolerance is not None and not math.isfinite(float(state.tolerance)):
        # the first stage average's noise sizes the run's tolerance (and the next stage's
        # draws); a first stage run again (coupled) is measured at its rerun's end
        sized = sized_tolerance(
            _tolerance(settings), settings.coarsest_tolerance, accuracy, averaged * repeats
        )
        state = state._replace(tolerance=_f(sized))
    factor = _draws_factor(state, rho, bias, settings, room)
    if expandable == EXPAND_WHERE_CAPPED:
        expands = _capped(state, rho, bias, settings, room)
    else:
        expands = bool(expandable) and (
            _expands(state, repeats * factor) or _capped(state, rho, bias, settings, room)
        )
    if expands:
        # The stage's error asks many times the first stage's draws: it runs again from its
        # average with the quadratic control variate (another program), at its step and draws;
        # the stage before it, if any, stays the one its bias is measured against.
        next_state = select(loop_state._replace(params=params), int(state.candidate), rho, repeats)
        return _run_again(state, next_state, EXPANDED)
    previous_estimates = averaged * repeats
    if clipped > MAX_CLIPPED and room >= 2:  # fewer steps are clipped at more draws (less noise)
        factor = max(factor, min(CLIPPED_DRAWS_FACTOR, room))
    if factor == 1 and room >= 2 and num_elements < EARLY_END_ELEMENTS:
        factor = 2  # twice the draws, not half the step: the same rho / D at the same batches
    if factor > 1:
        repeats *= factor
    else:
        rho /= _step_divisor(bias, settings, num_elements, state)
    next_state = select(loop_state._replace(params=params), int(state.candidate), rho, repeats)
    state = state._replace(
        previous=average,
        has_previous=np.asarray(True),
        previous_scale=_f(scale),
        previous_accuracy=_f(accuracy),
        previous_clipped=_f(clipped),
        previous_estimates=_i(previous_estimates),
        previous_iterations=_i(averaged),
        stage=_i(int(state.stage) + 1),
        stage_settles=_i(0),
        step_size=_f(rho),
        repeats=_i(repeats),
        phase=_i(APPROACH),
        best_elbo=_f(-np.inf),
        best_se=_f(np.nan),
        best_state=next_state,
    )
    return _new_stage_statistics(state), next_state


def _handover_candidate(state: ControllerState, candidates, num_elements: int) -> int | None:
    """The candidate that takes over at the end of the first approach: the natural rule
    (``linear``), where the trial kept a rule that is not (Adam), the natural rule ran in the
    trial, and the model has fewer than ``EARLY_END_ELEMENTS`` latent elements (None: no
    handover).

    The trial compares the rules' ELBOs after a few hundred steps from the start: it asks
    which rule finds the region of the answer, and there Adam can win where the natural rule
    heads for another optimum (a two-component mixture with ordered locations: the natural
    rule settled at an ELBO of -243.8, Adam reached -216). But the stages after the approach
    ask how fast a rule's average reaches the answer, and there the natural rule's steps are
    linear in the gradient: its average's bias falls as ``rho / D``, so the controller doubles
    the draws instead of halving the step, and each stage's bias is estimated against the
    last. Adam's is not: its stages halve the step, and each halving doubles the next
    stage's length. So where Adam's approach has found the region (its window medians
    stationary), the natural rule goes on from the last window's mean iterate with a first
    stage of its own (the mixture: 5,550 iterations to the same answer against 14,250 with
    Adam's stages). Large models keep the trial's rule: their stages end early
    (:func:`_provisional`), and on the Olivetti DEF the natural rule's first steps fell 35
    times below Adam's.

    A natural rule that diverged in the trial takes over too (until the fifty-ninth session it
    did not): the trial ran it from the start, far from the answer, and a fall after the
    handover hands back (:func:`_hand_back`). Of the 199 benchmark models two kept Adam after
    the natural rule's trial diverged: a logistic growth curve (the natural rule fell from the
    start, where its rates were far off) now converges in 7,675 iterations against 22,475
    (7.1 s against 7.8 s), and Kline's island tools, where Adam ran to the draws cap (102,675
    iterations, 22.9 s), converge coupled in 6,875 (13.9 s)."""
    if int(state.handed_over) != 0 or int(state.stage) != 0 or not candidates:
        return None
    if not 0 < num_elements < EARLY_END_ELEMENTS or candidates[int(state.candidate)].linear:
        return None
    for index, candidate in enumerate(candidates):
        if candidate.linear and not np.isnan(state.trial_scores[index]):  # run in the trial
            return index
    return None


def _hand_over(state: ControllerState, loop_state, mean_params, index: int, candidates, select):
    """The natural rule (candidate ``index``) runs on from the approach's last window's mean
    iterate: a new approach at its own step, its first stage after it
    (:func:`_handover_candidate`)."""
    rho = candidates[index].step_size
    start = select(loop_state._replace(params=_cast_like(mean_params, loop_state.params)), index, rho)
    state = state._replace(
        handed_over=_i(1),
        handed_from=_i(int(state.candidate)),
        handed_step=_f(float(state.step_size)),
        handed_at=_i(int(state.iterations)),
        candidate=_i(index),
        step_size=_f(rho),
        repeats=_i(1),
        phase=_i(APPROACH),
        best_elbo=_f(-np.inf),
        best_se=_f(np.nan),
        best_state=start,
    )
    return _new_stage_statistics(state), start


def _handed_over_first_stage(state: ControllerState) -> bool:
    """The natural rule, having taken over, is still in its first stage."""
    return int(state.handed_over) == 1 and int(state.stage) == 0


def _hand_back(state: ControllerState, loop_state, select):
    """The natural rule fell in its first stage after taking over: the rule it took over from
    resumes, at its step then, from the best window's mean iterate (its own inner state as it
    left it), and the run goes on as if there had been no handover."""
    candidate, rho = int(state.handed_from), float(state.handed_step)
    start = select(state.best_state, candidate, rho, 1)
    changes = dict(handed_over=_i(-1), candidate=_i(candidate), step_size=_f(rho), repeats=_i(1))
    return _restarted(state, start, loop_state, **changes)


# the natural rule's step halvings in its first stage after a handover before it hands back
HANDOVER_HALVINGS = 3
COUPLING_FACTOR = 4  # a first stage whose MCSE asks this many times the draws tries coupled locations


def _prepare_coupling(state: ControllerState, loop_state, couple, rho: float, settings, room: int, distance):
    """Starts compiling the Hessian's program on a thread of its own (``couple.prepare_soon``;
    no effect on the run's numbers) once the first stage's error so far says that its end
    will try the coupling (:func:`_coupled_next`), so that the try does not wait for it.

    Compiled at every fit's start instead, beside the window's program, it cost the fits that
    never couple 0.3-1.0 s each (pumps 2.43-2.58 -> 3.38-3.56 s, the Weibull regression
    3.13-3.21 -> 3.69-4.29, the negative binomial 3.53-3.77 -> 4.21-4.75; fresh processes):
    its tracing holds the interpreter, its compilation a core."""
    prepare = getattr(couple, "prepare_soon", None)
    first = int(state.stage) == 0 and int(state.coupled) == 0
    second = int(state.stage) == 1 and int(state.coupled) == COUPLING_DEFERRED
    if prepare is None or not (first or second) or int(state.batches) < 2:
        return
    if couple.preparing():  # begun already: no distance to compute per batch
        return
    probe = state._replace(accuracy=_f(distance(state.mean, _standard_error(state))))
    if first and _coupling_asked(probe, rho, settings, room):
        prepare(loop_state.params)
    estimates = _averaged_steps(probe, rho, settings) * int(probe.repeats)
    if second and _error_rose(probe, float(probe.accuracy) * math.sqrt(estimates)):
        prepare(loop_state.params)


def _averaged_steps(state: ControllerState, rho: float, settings) -> int:
    """The steps in the stage's average so far: its batches of ``10 / rho`` steps (whole windows)."""
    return int(state.batches) * _batch_windows_needed(rho, settings.window) * settings.window


def _coupling_asked(state: ControllerState, rho: float, settings, room: int) -> bool:
    """Whether a first stage's MCSE asks at least ``COUPLING_FACTOR`` times its draws."""
    return _draws_factor(state, rho, math.nan, settings, max(room, COUPLING_FACTOR)) >= COUPLING_FACTOR


def _coupled_next(
    state: ControllerState, loop_state, couple, rho: float, settings, room: int, error: float = math.nan
):
    """The next loop state with the natural rule's locations coupled at its parameters
    (:mod:`grepvi.optim.coupling`), or None. Tried once, at the end of a first stage whose
    MCSE asks at least ``COUPLING_FACTOR`` times its draws (the sign of a drift along a
    direction the mean-field step crosses slowly: a softmax regression's first stage asked 14
    times them, and at 14 times its error fell 1.5-fold, not 3.7-fold), else at the end of the
    second stage where its error for one estimate (``error``) rose over the first's
    (:func:`_error_rose`); once coupled, the matrix is recomputed at every stage's average.
    Models whose first stages' errors the draws can fix pay nothing: the Hessian's program is
    compiled only when tried."""
    if int(state.coupled) == 1:
        return couple(loop_state)
    if int(state.coupled) == COUPLING_DEFERRED and _error_rose(state, error):
        return couple(loop_state)
    if int(state.coupled) != 0 or int(state.stage) != 0:
        return None
    if not _coupling_asked(state, rho, settings, room):
        return None
    return couple(loop_state)


COUPLING_DEFERRED = -3  # ControllerState.coupled: the first stage did not ask; the second may (_error_rose)
NOT_COUPLED = (0, -1, SLIDE_UNCOUPLED, COUPLING_DEFERRED)  # ControllerState.coupled: locations not coupled
ERROR_RISE = 1.5  # a second stage's error for one estimate this many times the first's tries the coupling


def _error_rose(state: ControllerState, error: float) -> bool:
    """Whether the second stage's Monte Carlo error for one gradient estimate (``error``, ``e
    sqrt(N)``) is at least ``ERROR_RISE`` times the first stage's: more draws per step did not
    buy the error they should (``e sqrt(N)`` is constant where the error is the gradient's
    noise), the mark of a drift along a direction the mean-field step crosses slowly, which
    the first stage's error did not show (it asked under ``COUPLING_FACTOR`` times its draws).
    """
    if int(state.stage) != 1 or not bool(state.has_previous):
        return False
    before = float(state.previous_accuracy) * math.sqrt(max(int(state.previous_estimates), 0))
    return math.isfinite(error) and before > 0.0 and error >= ERROR_RISE * before


COUPLING_GAIN = 1.0  # the rerun's error for one estimate at most 1 / this of the first stage's


def _coupling_helped(uncoupled: float, coupled: float) -> bool:
    """Whether the coupled rerun of the first stage cut its Monte Carlo error for one gradient
    estimate (``e sqrt(N)``, the draws a stage needs go as its square) by at least
    ``COUPLING_GAIN`` (since the sixty-first session: any cut); where not, the run goes on
    uncoupled from the rerun's average. Judged where a gamma's log-mean is in the coupled block
    (``ControllerState.uncoupled_error``); a block of Gaussian locations alone is coupled as
    before this check (the thirty-fifth session's rule, measured on its own models).

    Where the posterior's ridge is what the draws could not average (an epidemic's
    transmission and recovery rates, a Lotka-Volterra system's), coupling cuts the error
    many-fold: 9.5 times on the SIR epidemic, 7.1 on Lotka-Volterra, 13 on the gamma-Poisson
    counts. On NumPyro's ``ucbadmit`` it cut it 1.5 times (most of its error is in a gamma
    scale's concentration, which the coupling does not move) and on the blockers
    meta-analysis 1.4 times: both dropped. The gain asked was 2 until the fifty-ninth session:
    on Kline's island tools (McElreath's scientific model, ``exp(a) P^b / g``: ``a`` and
    ``log g`` enter only as their difference) it cut the error 1.77 times and was dropped, and
    the uncoupled natural rule's stages then moved 0.011 sd from stage to stage at every
    doubling of the draws, to the draws cap (12,675 iterations, 27.5 s); kept at 1.6, it
    converges in 6,875 (13.9 s). At 1.6 the three models of the 199 benchmark models whose
    rerun cut the error 1.0-1.6-fold at seed 0 all did better coupled: Kline's Gaussian
    process (a 1.06-fold cut; uncoupled, its third stage slid along ``a / g`` to the draws cap,
    14,950 iterations, 54 s; kept, converged in 11,050, 15.7 s), ``ucbadmit`` (6,350 -> 5,450
    iterations) and the blockers (4,750 -> 3,850); over seeds 1-8 of ``ucbadmit`` 3 ended at
    the draws cap at 1.6 (9,650-9,850 iterations) and none at 1.0 (3,950-5,950). Where the
    rerun's error rose the coupling is still dropped: never dropped (a gain of 0), the factor
    model stopped ``drifting`` where it converges, and the spline and the mortality model moved."""
    return math.isfinite(coupled) and coupled * COUPLING_GAIN <= uncoupled


def _run_again(state: ControllerState, next_state, coupled: int) -> tuple[ControllerState, Any]:
    """The stage just ended runs again from ``next_state`` (its average, at its step and draws,
    coupled or with the control variate: ``coupled``), as a new stage that approaches first;
    the previous stage, if any, stays the one its bias is measured against."""
    state = state._replace(
        coupled=_i(coupled),
        stage=_i(int(state.stage) + 1),
        stage_settles=_i(0),
        phase=_i(APPROACH),
        best_elbo=_f(-np.inf),
        best_se=_f(np.nan),
        best_state=next_state,
    )
    return _new_stage_statistics(state), next_state


EXPANDED = 2  # ControllerState.coupled: a stage ran again with the quadratic control variate
EXPANSION_FACTOR = 16  # a stage that would raise the draws to this many times the first's tries it


def _expands(state: ControllerState, repeats: int) -> bool:
    """Whether a stage runs again with G-REP's quadratic control variate
    (:mod:`grepvi.estimators.quadratic_control_variate`) instead of raising its draws to
    ``repeats`` times the first stage's: at least ``EXPANSION_FACTOR`` times, its locations not
    coupled (:func:`_coupled_next`), on a model of few latent elements (the caller's
    ``expandable``: ``grepvi.inference.fitting.EXPANSION_ELEMENTS``, where the expansion's
    regression is well determined).

    A strongly correlated posterior makes the mean-field step's gradient noisy along the
    correlation: a gamma-Poisson (negative-binomial) likelihood's concentration and rate,
    whose first stage asked 62 times its 44 draws a step and whose second stage took 10 of
    the fit's 14 s at 2,728 draws a step; the quadratic control variate takes the
    correlation's linear part out of every draw, and the same fit with it from the start
    needed 88 draws a step. From the start it is no default: over the 42 textbook models of
    at most 4 elements the fits took 204.3 s against 204.6 in all, 15 of them more than 10%
    slower (its program compiles a second or more longer), 6 faster (``docs/performance.md``,
    forty-third session). Only the models it pays on compile it."""
    return int(state.coupled) in NOT_COUPLED and repeats >= EXPANSION_FACTOR


EXPAND_WHERE_CAPPED = "capped"  # update's expandable: only where the draws cap binds (_capped)


def _capped(state: ControllerState, rho: float, bias: float, settings, room: int) -> bool:
    """Whether the first stage of a model with the control variate's program (``update``'s
    ``expandable``: ``EXPAND_WHERE_CAPPED`` where its draws are cheap, this rule alone; ``True``
    where they are dear, beside :func:`_expands`) runs again with it: its locations not
    coupled (as :func:`_expands`), its rule's draws may be raised (``room >= 2``), and the draws
    cap (``room``) affords less than ``1 / EARLY_FACTOR`` of the draws it asks for, so that the
    next stage at the cap would average ``EARLY_FACTOR`` floors or more. Tried at the first
    stage only, as the coupling is (:func:`_coupled_next`): there the cap is the whole of
    ``max_repeats`` and the stage's error the plan of the run. ``EXPANSION_FACTOR`` is not asked
    for: below it more draws cost less than the control variate's program, but only where the
    cap affords them.

    Where the cap affords the draws, more of them cost less than the control variate's
    program (``grepvi.inference.fitting.EXPANSION_MIN_FLOPS``). Where it does not, the stage at
    the cap runs to its ``max_batches``: the BG/NBD customer-lifetime model (four gamma
    factors, 162,000 flops a draw) asked 60 times its first stage's 5 draws at a cap of 16,
    averaged 6,400 steps at 80 draws to 0.0053 sd, halved its step and averaged 6,400 more
    (15,100 steps, 75 s; NUTS 12 s); with the control variate its rerun's error for one
    estimate fell 3.2-fold and it converged after 3,800 steps (14 s). GARCH(1, 1), whose
    first stage asks 6-29 times its draws at a cap of 16 (seeds 0-3), keeps its draws (with the control
    variate it took 28 s against 16; at seed 2 its second stage asked 9 times its draws at a cap of
    2, and rerun with the control variate there it took 85 s against 51).

    Where draws are dear the cap is a draw's cost, and ``_expands`` sees the ask only up to it
    (``repeats x factor``, under ``EXPANSION_FACTOR`` at a cap under 16): since the
    seventy-second session this rule applies there too. A spatial autoregression
    (``benchmarks/stranger_models.py``'s ``sar_spatial``: a 100 x 100 ``slogdet`` a draw, draws
    capped at 3 times the first) halved its step four times, 70,550 iterations (72.5 s, NUTS
    14.0); rerun with the control variate, 12,750 (18.3 s). None of the 222 census models at
    seeds 0 and 1 changed."""
    if int(state.stage) != 0 or room < 2 or int(state.coupled) not in NOT_COUPLED:
        return False
    return _draws_factor(state, rho, bias, settings, 2**30) >= EARLY_FACTOR * room


def _provisional(
    state: ControllerState, accuracy: float, scale: float, settings, distance, num_elements
) -> bool:
    """Whether a stage whose average cannot be the answer may end before its tolerance: a model
    of at least ``EARLY_END_ELEMENTS`` latent elements, the stage's Monte Carlo error within
    ``EARLY_END_ACCURACY`` times the tolerance, and either no stage before it (the first
    stage's bias is unknown until a second is averaged, so it never ends the run) or a bias
    estimated against the stage before (``scale``: this stage's ``rho / D``) above the
    convergence rule's bound, ``2 x tolerance``: that stage will not end the run either.

    The stage then only serves the next one's bias estimate, where its error is removed from
    the change (:func:`systematic_change`); run to the tolerance it cost four times the
    iterates. On a 10,000-group gamma-Poisson hierarchy (natural steps, one draw a step, the
    step halved between stages) each of three stages averaged about 4,400 iterates to 0.02 sd."""
    tolerance = _tolerance(settings, state)
    if num_elements < EARLY_END_ELEMENTS or not accuracy <= EARLY_END_ACCURACY * tolerance:
        return False
    if not bool(state.has_previous):
        return True
    return _against_previous(state, accuracy, scale, distance)[2] > 2.0 * tolerance


def _near_miss(state: ControllerState, accuracy: float, scale: float, settings, distance) -> bool:
    """Whether a stage that reached ``max_batches`` averages on: its Monte Carlo error within
    ``NEAR_MISS_ACCURACY`` times the tolerance, fewer than ``NEAR_MISS_BATCHES x max_batches``
    batches, and its average one that would end the run once accurate (a previous stage, this
    stage's bias against it within ``2 x tolerance``, the previous stage settled, neither stage
    clipped above ``MAX_CLIPPED``).

    ``max_batches`` ends a stage whose step is too large for its noise, so that a smaller step
    shows its bias; where the bias is already known to be within the bound, ending it discards
    the stage for a near miss. A horseshoe regression's first stage at 58 draws a step ended
    at 64 batches with an error of 0.0061 sd against a tolerance of 0.005 (its bias 0.0042),
    and three stages of halved steps took 27 of the fit's 41-47 s; a Bayesian neural network
    (NumPyro's example, 2 x 5 units) ended its first at 0.0053, and its next three stages ran
    to the draws cap (``max_draws``, 64 s, unconverged)."""
    tolerance = _tolerance(settings, state)
    if not bool(state.has_previous) or not accuracy <= NEAR_MISS_ACCURACY * tolerance:
        return False
    if int(state.batches) >= NEAR_MISS_BATCHES * settings.max_batches:
        return False
    _, ratio, bias = _against_previous(state, accuracy, scale, distance)
    settled = stage_bias(float(state.previous_accuracy), ratio) <= 2.0 * tolerance
    linear_steps = max(_stage_clipped(state), float(state.previous_clipped)) <= MAX_CLIPPED
    return settled and linear_steps and bias <= 2.0 * tolerance


def _against_previous(state: ControllerState, accuracy: float, scale: float, distance):
    """``(change, ratio, bias)``: the stage's average against the previous stage's (Fisher
    metric, sd), its ``rho / D`` (``scale``) over the previous one's, and its bias estimated
    from the part of the change beyond the two averages' errors."""
    average = state.mean
    change = distance(average, jax.tree_util.tree_map(np.subtract, average, state.previous))
    ratio = scale / float(state.previous_scale)
    dof = sum(int(np.size(leaf)) for leaf in jax.tree_util.tree_leaves(average))
    bias = stage_bias(systematic_change(change, accuracy, float(state.previous_accuracy), dof), ratio)
    return change, ratio, bias


def _step_divisor(bias: float, settings, num_elements: int, state=None) -> float:
    """What the next stage divides the step by where it does not raise the draws: 2, or on
    models of at least ``EARLY_END_ELEMENTS`` elements whose stage bias is estimated, what
    brings that bias (proportional to the step) to ``STEP_AIM`` of the rule's bound
    ``2 x tolerance``, up to ``MAX_STEP_DIVISOR``. A smaller step lengthens the stage's batches
    (``10 / rho`` steps), but a large model's last stage averages more iterates than its
    batches' floor anyway: its Monte Carlo error, not the floor, sets its length."""
    if num_elements < EARLY_END_ELEMENTS or not math.isfinite(bias):
        return 2.0
    aim = STEP_AIM * 2.0 * _tolerance(settings, state)
    return float(min(max(2.0, bias / aim), MAX_STEP_DIVISOR))


def drifting(state: ControllerState, accuracy: float, estimates: int) -> bool:
    """Whether the stage's average drifts: its Monte Carlo error ``accuracy`` after
    ``estimates`` gradient estimates is over ``DRIFT_FACTOR`` times what the previous stage's
    error predicts for them, ``e' sqrt(N' / N)``, once ``N >= DRIFT_MIN_DRAWS N'``.

    A stationary average's error falls as one over the root of its draws whatever the step
    (Polyak-Ruppert averaging). A horseshoe regression (100 x 30), whose only identified
    products ``z lambda tau`` leave a ridge that mean-field q slides along, had an error of
    0.093 sd after 3,200 draws and 0.040 after 1.6 million (predicted 0.0041: ten times less),
    and spent 190 s averaging to the draws cap; on six textbook models that converged the
    ratio was at most 0.89-1.07."""
    previous, before = float(state.previous_accuracy), int(state.previous_estimates)
    if not bool(state.has_previous) or before <= 0 or not math.isfinite(previous) or previous <= 0.0:
        return False
    if estimates < DRIFT_MIN_DRAWS * before:
        return False
    return accuracy > DRIFT_FACTOR * previous * math.sqrt(before / estimates)


def systematic_change(
    change: float, accuracy: float, previous_accuracy: float, degrees_of_freedom: int = 0
) -> float:
    """The part of the change between two stage averages that is not their Monte Carlo error:
    ``sqrt(max(c^2 - q (e^2 + e_prev^2), 0))``.

    Two independent averages with errors ``e`` and ``e_prev`` (in the same metric) differ, in
    expectation, by ``|delta|^2 + e^2 + e_prev^2`` squared: the raw change overstates the
    systematic one by the errors. Near the convergence rule's bound (``2 x tolerance``; each
    error up to ``tolerance``) the raw change ran stages the bias did not need: Efron & Morris's
    baseball hierarchy estimated 0.0132 and 0.0115 sd from changes whose errors alone were
    0.0065, and converged after four stages (9,150 steps) instead of three (5,550).

    ``q`` is :func:`noise_quantile` of the ``degrees_of_freedom`` the squared change sums (the
    averages' parameters; 0: ``q = 1``, the errors' expectation). Without the errors' spread a
    model of few parameters ran stages for noise: the squared change of two noise-only averages
    is ``(e^2 + e_prev^2) chi^2_k / k``, whose 90th percentile is 1.77 times its mean at ``k =
    6`` (a Gaussian process's three log-normal hyperparameters), and such a model's stages
    crossed the bias bound by chance and each then doubled the draws: four seeds of the same fit
    took 6.6 to 21.6 s (``benchmarks/seed_spread.py``, ``gp_30_first``), the slowest after five
    stages whose changes (0.0196, 0.0145, 0.0190 sd) did not fall as the draws doubled, its
    answer within 0.0063 sd of the others' (with this ``q``: three stages, 7.2 s)."""
    noise = (accuracy**2 + previous_accuracy**2) * noise_quantile(degrees_of_freedom)
    if not math.isfinite(noise):
        return change
    return math.sqrt(max(change**2 - noise, 0.0))


NOISE_QUANTILE = 0.9  # the level of noise_quantile (None: the errors' expectation alone)


def noise_quantile(degrees_of_freedom: int, level: float | None = None) -> float:
    """``chi^2_k``'s ``level`` quantile over ``k``, by Wilson & Hilferty's (1931) cube-root
    approximation (within 1% of the exact quantile from ``k = 3``): how far, relative to its
    mean, the squared Fisher-metric change of two noise-only averages of ``k`` parameters
    reaches. ``level`` None reads ``NOISE_QUANTILE``; 1 where that is None too or ``k <= 0``
    (unknown). It falls to 1 as ``k`` grows (at 0.9: 1.77 at 6, 1.16 at 128, 1.04 at 2,048)."""
    level = NOISE_QUANTILE if level is None else level
    if level is None or degrees_of_freedom <= 0:
        return 1.0
    z = statistics.NormalDist().inv_cdf(float(level))
    h = 2.0 / (9.0 * float(degrees_of_freedom))
    return float(max(1.0, (1.0 - h + z * math.sqrt(h)) ** 3))


def stage_bias(change: float, ratio: float) -> float:
    """The bias of a stage's average estimated from its ``change`` from the previous stage's,
    where the stage's ``rho / D`` is ``ratio`` times the previous one's.

    To first order the bias is proportional to ``rho / D``: the previous stage's is
    ``b / ratio``, so ``change = b (1 / ratio - 1)`` and ``b = change ratio / (1 - ratio)``
    (``change`` itself when the step was halved). ``inf`` unless ``0 < ratio < 1``."""
    if not 0.0 < ratio < 1.0:
        return math.inf
    return change * ratio / (1.0 - ratio)


def _draws_factor(state: ControllerState, rho: float, bias: float, settings, room: int) -> int:
    """By how much the next stage multiplies the draws per step (1: it halves ``rho``).

    The stage just ended averaged ``batches`` batches to an MCSE of ``accuracy``; at the same
    draws, ``tolerance`` needs ``steps (accuracy / tolerance)^2`` steps. Where that is ``f``
    times a stage's floor (``MIN_APPROACH_WINDOWS`` windows and ``min_batches`` batches), ``f``
    times the draws cost no more and divide the bias by ``f``. Where the bias is estimated
    (a previous stage), the factor that brings it to ``2 tolerance`` (the convergence rule's
    bound on it) is taken if larger: aiming at ``tolerance`` took a third stage of 6-9 draws on
    a 1,000-group gamma-Poisson hierarchy where one halving at 3 draws converged (5.1-6.4 s
    against 4.9, warm; the simulated stages of ``tests/test_draws_as_state.py`` the same work
    and errors over 20 seeds). Only
    factors of 2 or more replace a halving of ``rho``; at most ``room``.
    """
    if room < 2:
        return 1
    window = settings.window
    batch = _batch_windows_needed(rho, window) * window
    steps = int(state.batches) * batch
    accuracy = float(state.accuracy)
    needed = steps * (accuracy / _tolerance(settings, state)) ** 2 if math.isfinite(accuracy) else 0.0
    floor = MIN_APPROACH_WINDOWS * window + settings.min_batches * batch
    factor = needed / floor
    if math.isfinite(bias):
        factor = max(factor, bias / (2.0 * _tolerance(settings, state)))
    factor = int(min(factor, room))
    return factor if factor >= 2 else 1


def _cast_like(tree, like):
    return jax.tree_util.tree_map(lambda value, ref: np.asarray(value, np.asarray(ref).dtype), tree, like)


def finish(state: ControllerState, reason: str) -> ControllerState:
    """``state`` stopped for ``reason`` (a cap or an interruption)."""
    if int(state.reason):
        return state
    return state._replace(reason=_i(REASONS.index(reason)))


def answer(state: ControllerState, loop_state, *, settings: AdaptiveSettings | None, distance=None):
    """The parameters to return (:func:`_answer_source`): a converged run's average (its state
    holds it), the current stage's average once ``min_batches`` batches are in, else the last
    stage's average, else the current stage's first batches, else the mean iterate of the
    stage's best window, else the last iterate."""
    source = _answer_source(state, settings)
    if source == "current":
        return _cast_like(state.mean, loop_state.params)
    if source == "previous":
        return _cast_like(state.previous, loop_state.params)
    if source == "window":
        return _cast_like(state.best_state.params, loop_state.params)
    return loop_state.params


def _answer_source(state: ControllerState, settings: AdaptiveSettings | None) -> str:
    """Where a stopped run's answer comes from: ``"converged"``, ``"current"`` (this stage's
    average), ``"previous"`` (the last stage's), ``"window"`` (the mean iterate of the
    stage's window with the best median ELBO) or ``"iterate"`` (in the trial, or before a
    stage's first window). A stage's first batches are not yet an answer where the last
    stage's average is one: Mendel stopped 200 steps into its second stage's average returned
    one batch's mean, 4.4 concentration units off (0.38 sd in the Fisher metric) against the
    first stage's 0.97. Nor is the last iterate where a window's mean is one: the iterate
    carries the step's noise, which the mean of a window's 100 iterates divides. On the
    Olivetti DEF stopped in its first approach (Adam 0.1; 200-draw ELBO, float64, log space)
    the last iterate scored -6.98e6 +- 2.7e4 at 30 s and -6.21e6 +- 7e4 at 120 s, the best
    window's mean -6.83e6 +- 8.5e3 and -6.11e6 +- 1.2e3: ahead by more than the lag of half
    a window costs, and the heavy left tail of the iterate's tiny gamma shapes averaged out."""
    if _converged(state):
        return "converged"
    batches = int(state.batches)
    trusted = settings.min_batches if settings else 2
    if int(state.phase) == AVERAGE and batches >= trusted:
        return "current"
    if bool(state.has_previous):
        return "previous"
    if int(state.phase) == AVERAGE and batches:
        return "current"
    if int(state.phase) in (APPROACH, AVERAGE) and math.isfinite(float(state.best_elbo)):
        return "window"
    return "iterate"


def _converged(state: ControllerState) -> bool:
    return REASONS[int(state.reason)] == "converged"


def convergence(
    state: ControllerState, candidates, settings: AdaptiveSettings | None, distance=None, base_draws: int = 1
) -> Convergence:
    """The :class:`Convergence` record of a finished (or stopped) run (``base_draws``:
    gradient estimates per repeat of the step)."""
    reason = REASONS[int(state.reason)] or "interrupted"
    iterations = int(state.iterations)
    if int(state.phase) == FIXED:
        return Convergence(
            converged=False,
            reason="fixed_schedule" if reason != "interrupted" else reason,
            num_iterations=iterations,
        )
    rho = float(state.step_size)
    window = settings.window if settings else 1
    batch = _batch_windows_needed(rho, window) * window
    source = _answer_source(state, settings)
    accuracy, averaged = math.nan, 0
    if source == "converged":
        accuracy, averaged = float(state.accuracy), int(state.batches) * batch
    elif source == "current":
        averaged = int(state.batches) * batch
        accuracy = distance(state.mean, _standard_error(state)) if int(state.batches) > 1 else math.nan
    elif source == "previous":
        accuracy, averaged = float(state.previous_accuracy), int(state.previous_iterations)
    elif source == "window":
        averaged = window
    monte_carlo = accuracy
    if source in ("current", "previous"):
        # A stage's average is biased by its step: the last stage's bias, estimated from the
        # change between the last two stages (stage_bias), is reported with the MCSE (rat
        # tumours stopped at 30 s: MCSE 0.0072 sd, 0.0109 sd from the converged answer).
        bias = _answer_bias(state, source, distance)
        known = accuracy if math.isfinite(accuracy) else 0.0
        accuracy = math.hypot(known, bias) if math.isfinite(bias) else math.nan
    labels = [c.label for c in candidates]
    scores = {
        label: float(s) for label, s in zip(labels, state.trial_scores, strict=False) if not np.isnan(s)
    }
    kept = labels[int(state.candidate)] if labels else ""
    chosen = int(state.handed_from) if int(state.handed_over) == 1 else int(state.candidate)
    won = labels[chosen] if labels else ""  # the trial's rule (before a handover)
    tie = (
        bool(labels)
        and candidates[chosen].preferred
        and any(score >= scores.get(won, -math.inf) for label, score in scores.items() if label != won)
    )
    nan_safe = lambda x: math.nan if math.isnan(x) else float(x)  # one nan: equal records compare equal
    error_latent, error_share = "", math.nan
    unconverged = reason not in ("converged", "interrupted") and source == "current"
    if unconverged and distance is not None and int(state.batches) > 1:
        shares = error_shares(state, distance)
        if shares:
            error_latent = max(shares, key=shares.get)
            error_share = shares[error_latent]
    change_latent, change_share = "", math.nan
    index = int(getattr(state, "change_latent", -1))
    if reason not in ("converged", "interrupted") and index >= 0:
        change_latent = sorted(state.previous)[index]
        change_share = float(state.change_share)
    return Convergence(
        converged=_converged(state),
        reason=reason,
        num_iterations=iterations,
        num_stages=int(state.stage) + 1,
        step_size=rho,
        accuracy=nan_safe(accuracy),
        stage_change=nan_safe(float(state.stage_change)),
        stage_bias=nan_safe(float(state.stage_bias)),
        averaged_iterations=averaged,
        restarts=int(state.restarts),
        direction=kept,
        draws=int(base_draws) * int(state.repeats),
        trial_elbos=scores,
        trial_note=_trial_note(state, labels, won, tie) + _handover_note(state, labels),
        monte_carlo_error=nan_safe(monte_carlo),
        climbs=int(state.climbs),
        coupled=int(getattr(state, "coupled", 0)) == 1,
        error_latent=error_latent,
        error_share=nan_safe(error_share),
        control_variate="quadratic" if int(getattr(state, "coupled", 0)) == EXPANDED else "",
        change_latent=change_latent,
        change_share=nan_safe(change_share),
        settles=int(getattr(state, "settles", 0)),
        narrowed=int(getattr(state, "narrowed", 0)),
        clipped=_answer_clipped(state, source) if source in ("current", "previous") else math.nan,
        tolerance=_tolerance(settings, state) if settings is not None else math.nan,
    )


def error_shares(state: ControllerState, distance) -> dict:
    """Each latent's share of the current stage average's squared Monte Carlo error, in the
    Fisher metric of ``distance`` (the error with every other latent's part set to 0, squared,
    over the whole error squared; the shares sum to 1). Empty where the stage has fewer than
    two batches or no error.

    A run that stops drifting names where: on NumPyro's ``ucbadmit`` example (a binomial GLMM,
    non-centred, an ``LKJCholesky`` prior) the gamma ``q`` of the department scales ``sigma``
    held most of it, its concentration near 850 moving by 7-34 between batches at any step
    and any draws."""
    if int(state.batches) < 2:
        return {}
    return _shares(state.mean, _standard_error(state), distance)


def change_shares(average: dict, previous: dict, distance) -> dict:
    """Each latent's share of the squared change from the previous stage's average to
    ``average``, in the Fisher metric of ``distance`` at ``average`` (as :func:`error_shares`;
    the shares sum to 1 where the metric is block-diagonal by latent, as mean-field ``q``'s
    Fisher information is). Empty where the averages are equal.

    Where a run stops unconverged because its stages' averages keep moving as the step
    shrinks, this says which ``q`` moves: on a centred random-effects model of 120 strata
    (BUGS "Oxford", ``benchmarks/bugs_models.py``) the run spent its draws with its last three
    stages' averages 0.047, 0.044 and 0.022 sd apart as the step halved, half of the last
    change in the group scale ``sigma``, whose ``q`` shrank towards 0 (mean 0.019 against
    NUTS's 0.082); the same model written non-centred converges in 4,950 iterations at
    0.013."""
    delta = jax.tree_util.tree_map(np.subtract, average, previous)
    return _shares(average, delta, distance)


def _shares(at: dict, delta: dict, distance) -> dict:
    total = distance(at, delta) ** 2
    if not math.isfinite(total) or total <= 0.0:
        return {}
    shares = {}
    for name in delta:
        alone = {key: value if key == name else _zeros_like_params(value) for key, value in delta.items()}
        shares[name] = float(distance(at, alone) ** 2 / total)
    return shares


def _largest_change(state: ControllerState, distance) -> dict:
    """``change_latent`` and ``change_share`` of the state at a stage's end: the latent whose
    ``q`` moved most from the previous stage's average (:func:`change_shares`)."""
    shares = change_shares(state.mean, state.previous, distance)
    if not shares:
        return {"change_latent": _i(-1), "change_share": _f(np.nan)}
    names = sorted(shares)
    largest = max(names, key=shares.get)
    return {"change_latent": _i(names.index(largest)), "change_share": _f(shares[largest])}


def _answer_bias(state: ControllerState, source: str, distance) -> float:
    """The bias of a stopped run's stage average, in posterior sd (nan: not measured): the
    last ended stage's estimate (:func:`stage_bias`), or, where there is none, this stage's
    average against the last one's (the estimate its end would make); a first stage's is
    unknown, and so is one measured across a stage that clipped more than ``MAX_CLIPPED`` of
    its elements' steps (:func:`_answer_clipped`)."""
    if _answer_clipped(state, source) > MAX_CLIPPED:
        return math.nan
    bias = float(state.stage_bias)
    if math.isfinite(bias) or source != "current" or not bool(state.has_previous) or distance is None:
        return bias
    change = distance(state.mean, jax.tree_util.tree_map(np.subtract, state.mean, state.previous))
    return stage_bias(change, float(state.step_size) / int(state.repeats) / float(state.previous_scale))


def _answer_clipped(state: ControllerState, source: str) -> float:
    """The largest fraction of elements' steps the trust region clipped in the stages a
    stopped run's bias would be measured across: the answer's stage (``"current"``) and the
    last ended one (0 where neither is a stage average). Above ``MAX_CLIPPED`` no bias is
    estimated (:data:`MAX_CLIPPED`): a 100-input Gaussian process clipped 86% and 69% of its
    steps at rho 0.1 and 0.05, and the change between those stages' averages, 0.011 sd, read
    as a bias where both were 0.075-0.08 sd from the converged answer."""
    if source == "current":
        return max(_stage_clipped(state), float(state.previous_clipped) if bool(state.has_previous) else 0.0)
    if source == "previous":
        return float(state.previous_clipped)
    return 0.0


def _trial_note(state: ControllerState, labels, kept: str, tie: bool = False) -> str:
    if len(labels) <= 1:
        return f"{kept}: the only rule"
    if bool(state.skipped_trial):
        return (
            f"{kept}: no trial (fewer than {MIN_TRIAL_STEPS} steps per rule fit the trial's "
            f"{TRIAL_FRACTION:.0%} of the time budget left after compilation); kept the fallback rule"
        )
    if int(state.trial_steps) <= 0:
        return f"{kept}: trial not run"
    steps = int(state.trial_steps)
    best = "within 2 SE of the best median ELBO (preferred on a tie)" if tie else "best median ELBO"
    leader = int(state.leader)
    if 0 <= leader < len(labels) and labels[leader] != kept:
        best = f"next best ({labels[leader]} led, and fell after the trial)"
    note = f"{kept}: {best} after {steps} steps of each of {len(labels)} rules"
    runs = list(zip(labels, state.trial_ran, state.trial_scores, strict=False))
    diverged = [
        f"{label} after {int(ran)}" for label, ran, score in runs if int(ran) > 0 and score == -np.inf
    ]
    stopped = [
        f"{label} after {int(ran)}" for label, ran, score in runs if 0 < int(ran) < steps and score != -np.inf
    ]
    if stopped:
        note += (
            f" ({', '.join(stopped)}: stopped where they trailed the leader by 2 SE, "
            f"by {TRIAL_WIDE_GAP:.0%} once or at two checks in a row)"
        )
    if diverged:
        note += f" ({', '.join(diverged)}: diverged, a window's median ELBO fell or its lower tail collapsed)"
    times = int(getattr(state, "narrowed", 0))
    if times:
        note += (
            f"; from a start {NARROWING**-times:g} times narrower than the families' (the trial "
            f"ran {times + 1} times: every rule failed from the wider start{'s' if times > 1 else ''})"
        )
    return note


def _handover_note(state: ControllerState, labels) -> str:
    """What :func:`_hand_over` did, for the trial note ("" where it did nothing)."""
    handed = int(state.handed_over)
    if handed == 0 or not labels:
        return ""
    natural = next((label for label in labels if label == "natural"), "the natural rule")
    at = int(state.handed_at)
    if handed == 1:
        return (
            f"; {labels[int(state.candidate)]} took over from iteration {at} on, where "
            f"{labels[int(state.handed_from)]}'s approach ended (its stages double the draws)"
        )
    resumed = labels[int(state.candidate)]
    return f"; {natural} took over at iteration {at}, fell in its first stage, and {resumed} resumed"


def check_settings(settings) -> AdaptiveSettings:
    if not isinstance(settings, AdaptiveSettings):
        raise ConfigError(f"settings: expected grepvi.AdaptiveSettings, got {type(settings).__name__}")
    return settings.validated()
