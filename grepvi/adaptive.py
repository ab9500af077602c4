"""The default optimization procedure: the better of two update rules, in stages, averaged,
stopped when the answer is known to the requested accuracy.

The design follows RAABBVI (Welandawe, Andersen, Vehtari & Huggins 2022) and FASO (Dhaka,
Catalina, Welandawe, Andersen, Huggins & Vehtari 2020), with Stan's step-size adaptation
(Kucukelbir et al. 2017) turned into a choice between update rules:

0. **Trial.** Each candidate rule (``grepvi.fitting.adaptive_candidates``: natural-gradient
   steps with a KL trust region where every family has a closed-form Fisher information, and
   Adam) runs ``trial_windows`` windows from the same start; the one with the higher median
   ELBO in its last window is kept (ties within two standard errors go to the first), and
   continues from where its trial ended.
1. **Approach.** Steps of size ``rho`` run in compiled windows of ``window`` iterations. After
   each window its median ELBO estimate is kept; the iterates are taken as stationary when a
   regression of the last (up to 8) window medians on their index shows no increase (t < 2).
   A window whose median ELBO falls far below the best so far (by 5% of its magnitude, 10
   standard errors and 2 nats), or where half the steps had a non-finite gradient, restores
   the mean iterate of the best window and halves ``rho`` (the tamed start); three windows
   in a row without one finite step raise :class:`~grepvi.errors.NumericalError`.
2. **Average.** Once stationary, the iterates are averaged (Polyak-Ruppert). Window means,
   grouped into batches of at least ``10 / rho`` iterations, give the Monte Carlo standard
   error (MCSE) of the average by batch means. Accuracy is measured in the Fisher metric of
   ``q``: ``sqrt(mean_i se_i^T F_i se_i)``, in posterior standard deviations (a shift of
   the Gaussian's location by ``d`` standard deviations scores ``d``).
3. **Stages.** When the MCSE is below ``tolerance``, the average is this stage's answer. If it
   agrees with the previous stage's (same metric, within ``2 * tolerance``), the run has
   converged; otherwise ``rho`` is halved and the next stage starts from the average (a
   constant step leaves a bias of order ``rho``; halving it until two stages agree bounds
   that bias by the tolerance).

The run also stops at ``max_steps`` or ``time_budget`` (wall time, compilation and trial
included); the parameters returned are then the current stage's average where one has begun,
else the last iterate, and :class:`Convergence` says why it stopped. The ELBO estimates that
drive all of this are the estimator's own (the draws of the gradient): monitoring adds no
model evaluations.
"""

import math
import time
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from grepvi.errors import ConfigError, NumericalError
from grepvi.natural_gradient import fisher_mean_quad

__all__ = [
    "AdaptiveSettings",
    "Candidate",
    "Convergence",
    "WindowReport",
    "run_trial",
    "set_step_size",
    "get_step_size",
    "run_adaptive",
    "elbo_trend_t",
]


TRIAL_FRACTION = 0.2  # of a time budget, at most, for the trial
MIN_TRIAL_STEPS = 20  # per candidate; where fewer fit the time limit, the fallback rule runs
PROBE_STEPS = 1  # timed steps that size the trial to its time limit (a NIPS BBVI step: 20 s)
STALL_WINDOWS = 3  # windows in a row without one finite step stop the run with NumericalError
FALL_NATS = 2.0  # a window's median ELBO this far below the best (and 5%, 10 SE) is a fall


class AdaptiveSettings(NamedTuple):
    """Knobs of the default procedure (all have defaults that need no tuning).

    Attributes:
      step_size: the first stage's ``rho`` (natural-gradient step; 1 is Newton's step at a
        conjugate optimum).
      max_kl: ``kappa``, the KL trust region of one step per latent element (nats).
      tolerance: target accuracy of the answer, in posterior standard deviations (Fisher
        metric); ``0.005`` puts means and variances of the conjugate test cases within 2%.
      window: iterations per compiled window (the unit of monitoring).
      min_batches: batch means needed before the MCSE is trusted.
      max_batches: batch means after which a stage ends (step halved) even when its average
        is not yet known to ``tolerance``.
      trial_windows: windows each candidate direction runs before the best is kept.
      adam_step_size: the first stage's learning rate of the Adam candidate.
    """

    step_size: float = 0.1
    max_kl: float = 0.5
    tolerance: float = 0.005
    window: int = 100
    min_batches: int = 8
    max_batches: int = 64
    trial_windows: int = 3
    adam_step_size: float = 0.1

    def validated(self) -> "AdaptiveSettings":
        for name in ("step_size", "max_kl", "tolerance", "adam_step_size"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ConfigError(f"{name} must be a positive number, got {value!r}")
        for name in ("window", "min_batches", "max_batches", "trial_windows"):
            value = getattr(self, name)
            if isinstance(value, bool) or int(value) != value or value < 2:
                raise ConfigError(f"{name} must be an integer of at least 2, got {value!r}")
        return self


class Convergence(NamedTuple):
    """How a run ended.

    Attributes:
      converged: the stopping rule was met (two consecutive stage averages agree and each is
        known to ``tolerance``).
      reason: ``"converged"``, ``"max_steps"``, ``"time_budget"``, ``"interrupted"`` or
        ``"fixed_schedule"`` (an explicit step size: no convergence rule ran).
      num_iterations: iterations run.
      num_stages: step-size stages begun.
      step_size: ``rho`` of the last stage.
      accuracy: estimated Monte Carlo error of the returned average, in posterior standard
        deviations (nan when no average was formed).
      stage_change: difference between the last two stage averages, same units (nan if fewer).
      averaged_iterations: iterations in the returned average (0: the last iterate).
      restarts: times a falling ELBO restored the best state and halved ``rho``.
      direction: the update rule kept by the trial (``"natural"`` or ``"adam-<learning rate>"``).
      trial_elbos: each candidate's median ELBO over its last trial window.
    """

    converged: bool
    reason: str
    num_iterations: int
    num_stages: int = 0
    step_size: float = math.nan
    accuracy: float = math.nan
    stage_change: float = math.nan
    averaged_iterations: int = 0
    restarts: int = 0
    direction: str = ""
    trial_elbos: dict = {}

    def summary(self) -> str:
        state = "converged" if self.converged else f"not converged ({self.reason})"
        return (
            f"{state} after {self.num_iterations} iterations, {self.num_stages} stage(s) of "
            f"{self.direction or 'fixed'} steps; "
            f"accuracy {self.accuracy:.2g} sd, stage change {self.stage_change:.2g} sd"
        )


class WindowReport(NamedTuple):
    """What the controller passes to ``callback`` after every window."""

    state: object
    elbo: np.ndarray  # the window's per-iteration ELBO estimates
    finite: np.ndarray
    nonfinite_latents: np.ndarray
    extras: dict
    iterations_done: int
    wall_time: float
    phase: str  # "approach" or "average"
    step_size: float
    accuracy: float


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
    dof = n - 2
    variance = float(np.dot(residual, residual)) / dof
    se = math.sqrt(variance / float(np.dot(x, x)))
    if se == 0.0:
        return math.inf if slope > 0 else (-math.inf if slope < 0 else 0.0)
    return slope / se


class _Welford:
    """Running mean and sum of squared deviations of pytrees (batch means), on the device."""

    def __init__(self):
        self.count = 0
        self.mean = None
        self.m2 = None

    def add(self, tree):
        self.count += 1
        if self.mean is None:
            self.mean = tree
            self.m2 = jax.tree_util.tree_map(jnp.zeros_like, tree)
            return
        self.mean, self.m2 = _welford_update(self.mean, self.m2, tree, jnp.float32(self.count))

    def standard_error(self):
        n = self.count
        return jax.tree_util.tree_map(lambda m2: jnp.sqrt(m2 / (n * (n - 1))), self.m2)


@jax.jit
def _welford_update(mean, m2, tree, count):
    delta = jax.tree_util.tree_map(lambda x, m: x - m, tree, mean)
    mean = jax.tree_util.tree_map(lambda m, d: m + d / count, mean, delta)
    m2 = jax.tree_util.tree_map(lambda s, x, m, d: s + d * (x - m), m2, tree, mean, delta)
    return mean, m2


def _metric(families):
    @jax.jit
    def distance(params, delta):
        return jnp.sqrt(jnp.maximum(fisher_mean_quad(families, params, delta), 0.0))

    return distance


def get_step_size(opt_state) -> float:
    """The step size held in an optimizer state (see :func:`set_step_size`)."""
    if hasattr(opt_state, "inner"):
        return get_step_size(opt_state.inner)
    if hasattr(opt_state, "step_size"):
        return float(np.asarray(opt_state.step_size))
    return float(np.asarray(opt_state.hyperparams["learning_rate"]))


def set_step_size(state, rho):
    """``state`` with the optimizer's step size set to ``rho`` (a ``NaturalGradientState``, or
    an ``optax.inject_hyperparams`` state with a ``learning_rate``)."""
    opt_state = state.opt_state
    if hasattr(opt_state, "inner"):  # positive_in_log_scale
        inner = set_step_size(state._replace(opt_state=opt_state.inner), rho).opt_state
        return state._replace(opt_state=opt_state._replace(inner=inner))
    value = jnp.asarray(rho, jnp.float32)
    if hasattr(opt_state, "step_size"):
        opt_state = opt_state._replace(step_size=value)
    elif hasattr(opt_state, "hyperparams") and "learning_rate" in opt_state.hyperparams:
        opt_state.hyperparams["learning_rate"] = value
    else:
        raise ConfigError("the default procedure needs an optimizer whose state holds its step size")
    return state._replace(opt_state=opt_state)


class Candidate(NamedTuple):
    """An update rule the trial may keep: its label, initial state and compiled window."""

    label: str
    state: object
    window_fn: Callable
    step_size: float


def _trim(outputs, active):
    """The per-iteration outputs of the ``active`` steps a window applied."""
    if active == np.asarray(outputs["elbo"]).shape[0]:
        return outputs
    trimmed = {key: value[:active] for key, value in outputs.items() if key not in ("extras", "active")}
    trimmed["extras"] = {key: value[:active] for key, value in outputs.get("extras", {}).items()}
    return trimmed


def _window_median(outputs) -> float:
    elbo = np.asarray(outputs["elbo"], np.float64)
    good = elbo[np.asarray(outputs["finite"], bool) & np.isfinite(elbo)]
    return float(np.median(good)) if good.size >= 0.5 * elbo.size else -math.inf


def _last_steps(outputs: list, count: int) -> dict:
    """The ``elbo`` and ``finite`` of the last ``count`` steps of a list of window outputs."""
    if not outputs:  # max_steps = 0
        return {"elbo": np.zeros(0), "finite": np.zeros(0, bool)}
    return {
        key: np.concatenate([np.asarray(out[key]) for out in outputs])[-count:] for key in ("elbo", "finite")
    }


def run_trial(
    candidates: list[Candidate],
    num_windows: int,
    max_steps: int | None = None,
    on_window: Callable[[str, int], None] | None = None,
    time_limit: float | None = None,
    clock: Callable[[], float] = time.perf_counter,
    fallback_label: str = "adam-0.1",
):
    """Runs every candidate ``num_windows`` windows from its initial state (Stan's ADVI adapts
    eta the same way, keeping the best of a grid after a few iterations each).

    Returns ``(index of the best, {label: median ELBO of its last window}, per-candidate
    (state, [outputs]), seconds per step of the probe or None)``; no candidate runs more than
    ``max_steps`` iterations. Ties within the noise (two standard errors of the medians) go to
    the earlier candidate.

    ``time_limit`` (seconds): the first candidate's window is compiled, then it runs
    ``PROBE_STEPS`` step(s) on the clock; from that time per step (and the compilation time,
    charged once for every other compiled window among the candidates) every candidate runs
    the same number of steps, as many as fit the limit (at least the probe's, at most
    ``num_windows`` windows), so that their last windows compare at the same iteration. Windows
    run only their active steps (:func:`grepvi.loop.make_window`), so a step of seconds (BBVI,
    30 draws, on MNIST) shortens the windows instead of overrunning the budget; a large model
    (Omniglot: 0.4 s per iteration) would otherwise spend most of a 10-minute budget choosing
    its update rule. Where fewer than ``MIN_TRIAL_STEPS`` steps per candidate fit, there is no
    trial: the candidate labelled ``fallback_label`` is returned with empty scores and
    outputs.
    """
    runs, scores, spreads = [], {}, {}
    per_step = None
    trial_start = clock()
    steps = num_windows * candidates[0].window_fn.length
    if max_steps is not None:
        steps = min(steps, max_steps)
    for index, candidate in enumerate(candidates):
        state, outputs, done = candidate.state, [], 0
        length = candidate.window_fn.length
        if index == 0 and time_limit is not None and steps > 0:
            compile_start = clock()
            if hasattr(candidate.window_fn, "warm_up"):
                candidate.window_fn.warm_up(state)
            compile_time = clock() - compile_start
            probe = min(PROBE_STEPS, steps)
            probe_start = clock()
            state, _, out = candidate.window_fn(state, probe)
            out = _trim(out, probe)  # waits for the result: the clock below is the probe's
            per_step = max((clock() - probe_start) / probe, 1e-9)
            done = probe
            outputs.append(out)
            if on_window is not None:
                on_window(candidate.label, done)
            others = {id(c.window_fn) for c in candidates[1:]} - {id(candidate.window_fn)}
            room = time_limit - (clock() - trial_start) - compile_time * len(others)
            fits = math.floor((room + probe * per_step) / (per_step * len(candidates)))
            if fits < min(MIN_TRIAL_STEPS, steps):
                # Too few steps to tell the rules apart (after one step every candidate reports
                # the ELBO of the same start): keep the rule that won every trial on the
                # paper's models (MNIST BBVI, 6 s a step, 600 s: natural steps then diverged).
                fallback = next((i for i, c in enumerate(candidates) if c.label == fallback_label), 0)
                untried = [(c.state, []) for c in candidates]
                untried[0] = (state, outputs)
                return fallback, {}, untried, per_step
            steps = min(steps, fits)
        while done < steps:
            active = min(length, steps - done)
            state, _, out = candidate.window_fn(state, active)
            out = _trim(out, active)
            done += active
            if on_window is not None:
                on_window(candidate.label, done)
            outputs.append(out)
            if not math.isfinite(_window_median(out)):
                break
        runs.append((state, outputs))
        last = _last_steps(outputs, min(length, steps))
        scores[candidate.label] = _window_median(last) if last["elbo"].size else -math.inf
        elbo = np.asarray(last["elbo"], np.float64)
        good = elbo[np.isfinite(elbo)]
        spreads[candidate.label] = (
            1.4826 * float(np.median(np.abs(good - np.median(good)))) / math.sqrt(good.size)
            if good.size
            else 0.0
        )
    best = 0
    for index, candidate in enumerate(candidates[1:], start=1):
        leader = candidates[best].label
        margin = 2.0 * math.hypot(spreads[leader], spreads[candidate.label])
        if scores[candidate.label] > scores[leader] + margin:
            best = index
    return best, scores, runs, per_step


def run_adaptive(
    candidates: list[Candidate],
    families: dict,
    settings: AdaptiveSettings,
    *,
    max_steps: int | None,
    time_budget: float | None,
    callback: Callable[[WindowReport], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    on_trial_window: Callable[[str, int], None] | None = None,
):
    """Runs the procedure: a trial of the ``candidates``, then stages of the best one.

    Args:
      candidates: update rules to try (:class:`Candidate`); each ``window_fn`` is
        ``state -> (state, window_mean_params, outputs)`` running ``settings.window`` steps,
        ``outputs`` holding per-iteration ``elbo``, ``finite``, ``nonfinite_latents`` and
        ``extras``. One candidate skips the trial.
      max_steps, time_budget: the caps (either may be None, not both).
      callback: called with a :class:`WindowReport` after every window (the kept candidate's
        trial windows are reported once the trial is over).
      should_stop: polled after every window (e.g. SIGINT).
      on_trial_window: ``(label, iterations done by that candidate)`` after each trial window
        (for a progress display).

    Returns:
      ``(state, params, Convergence)``: the last state, the answer (the average where one was
      formed) and the diagnostics.
    """
    if max_steps is None and time_budget is None:
        raise ConfigError("give max_steps or time_budget (or both)")
    distance = _metric(families)
    start = time.perf_counter()
    done = 0
    trial_scores = {}
    if len(candidates) > 1:
        trial_limit = None if time_budget is None else TRIAL_FRACTION * time_budget
        index, trial_scores, runs, per_step = run_trial(
            candidates,
            settings.trial_windows,
            max_steps,
            on_trial_window,
            time_limit=trial_limit,
            fallback_label=f"adam-{settings.adam_step_size:g}",  # the labels of fitting's rules
        )
        chosen = candidates[index]
        state, outputs = runs[index]
        elapsed = time.perf_counter() - start
        for number, out in enumerate(outputs, start=1):
            done += np.asarray(out["elbo"]).size
            if callback is not None:
                report = _report(state, out, done, start, "trial", chosen.step_size, math.nan)
                callback(report._replace(wall_time=elapsed * number / len(outputs)))
    else:
        chosen = candidates[0]
        state = chosen.state
        per_step = None
    rho = float(chosen.step_size)
    state = set_step_size(state, rho)
    stage = 0
    restarts = 0
    phase = "approach"
    elbo_means, elbo_ses = [], []
    best = (-math.inf, state)
    welford = _Welford()
    batch_sum, batch_windows = None, 0
    previous_average = None
    accuracy = math.nan
    stage_change = math.nan
    reason = None
    stalled = 0

    def batch_size():
        return max(1, math.ceil(10.0 / rho / settings.window))

    while True:
        if max_steps is not None and done >= max_steps:
            reason = "max_steps"
            break
        if time_budget is not None and time.perf_counter() - start >= time_budget and done > 0:
            reason = "time_budget"
            break
        if should_stop is not None and should_stop():
            reason = "interrupted"
            break
        active = settings.window if max_steps is None else min(settings.window, max_steps - done)
        if time_budget is not None and per_step is not None:
            # the last window runs only the steps that fit (a window of BBVI steps on a large
            # data set lasts minutes)
            fits = math.floor((time_budget - (time.perf_counter() - start)) / per_step)
            if fits < 1 and done > 0:
                reason = "time_budget"
                break
            fits = max(fits, 1)  # a run does at least one step of the rule it keeps
            active = min(active, fits)
        window_start = time.perf_counter()
        state, window_mean, outputs = chosen.window_fn(state, active)
        outputs = _trim(outputs, active)
        per_step = (time.perf_counter() - window_start) / active
        elbo = np.asarray(outputs["elbo"], np.float64)
        finite = np.asarray(outputs["finite"], bool)
        done += elbo.size
        good = elbo[finite & np.isfinite(elbo)]
        # Window summaries robust to the heavy tails of one-draw ELBO estimates (small gamma
        # shapes): the median, and a standard error from the median absolute deviation.
        mean_elbo = float(np.median(good)) if good.size else -math.inf
        se_elbo = (
            float(1.4826 * np.median(np.abs(good - mean_elbo)) / math.sqrt(good.size))
            if good.size > 1
            else math.inf
        )

        stalled = stalled + 1 if good.size == 0 else 0
        if stalled >= STALL_WINDOWS:
            bad = np.asarray(outputs["nonfinite_latents"], bool).reshape(elbo.size, -1).any(0)
            latents = [name for name, flag in zip(sorted(families), bad, strict=False) if flag]
            raise NumericalError(
                f"{stalled} windows in a row ({stalled * elbo.size} steps, up to iteration {done}) "
                f"had a non-finite gradient at every step for latent(s) {latents}, with the step size "
                f"halved to {rho:.3g}; the run has stalled. Check the model at the current parameters."
            )
        fell = good.size < 0.5 * elbo.size or (
            math.isfinite(best[0])
            and mean_elbo < best[0] - max(0.05 * abs(best[0]), 10.0 * se_elbo, FALL_NATS)
        )
        if fell and rho > chosen.step_size * 2.0**-12:
            rho /= 2.0
            restarts += 1
            state = set_step_size(best[1], rho)._replace(rng_key=state.rng_key)
            phase, elbo_means, elbo_ses = "approach", [], []
            welford, batch_sum, batch_windows = _Welford(), None, 0
        elif phase == "approach":
            if mean_elbo > best[0]:
                # The window's mean iterate, not its last: an instability that starts at the
                # end of the best window (seen on the Olivetti DEF with Adam) must not be what
                # a fall restores.
                best = (mean_elbo, state._replace(params=window_mean))
            elbo_means.append(mean_elbo)
            elbo_ses.append(se_elbo)
            t = elbo_trend_t(elbo_means[-8:])
            if len(elbo_means) >= 4 and t < 2.0:
                phase = "average"
                welford, batch_sum, batch_windows = _Welford(), None, 0
        else:
            if mean_elbo > best[0]:
                # The window's mean iterate, not its last: an instability that starts at the
                # end of the best window (seen on the Olivetti DEF with Adam) must not be what
                # a fall restores.
                best = (mean_elbo, state._replace(params=window_mean))
            batch_sum = (
                window_mean if batch_sum is None else jax.tree_util.tree_map(jnp.add, batch_sum, window_mean)
            )
            batch_windows += 1
            if batch_windows >= batch_size():
                welford.add(jax.tree_util.tree_map(lambda s, k=batch_windows: s / k, batch_sum))
                batch_sum, batch_windows = None, 0
                if welford.count >= settings.min_batches:
                    accuracy = float(distance(welford.mean, welford.standard_error()))
                    accurate = accuracy <= settings.tolerance
                    if accurate or welford.count >= settings.max_batches:
                        # A stage ends when its average is known to the tolerance, or after
                        # max_batches batches: a step too large for the noise (Adam's iterates
                        # wander by about its learning rate) is halved rather than averaged
                        # for ever; only an accurate stage can end the run.
                        average = welford.mean
                        if previous_average is not None:
                            stage_change = float(
                                distance(
                                    average, jax.tree_util.tree_map(jnp.subtract, average, previous_average)
                                )
                            )
                        if (
                            accurate
                            and previous_average is not None
                            and stage_change <= 2.0 * settings.tolerance
                        ):
                            state = state._replace(params=average)
                            reason = "converged"
                            if callback is not None:
                                callback(_report(state, outputs, done, start, phase, rho, accuracy))
                            break
                        previous_average = average
                        stage += 1
                        rho /= 2.0
                        state = set_step_size(state._replace(params=average), rho)
                        phase, elbo_means, elbo_ses = "approach", [], []
                        best = (-math.inf, state)
                        welford = _Welford()
        if callback is not None:
            callback(_report(state, outputs, done, start, phase, rho, accuracy))

    averaged = 0
    params = state.params
    if reason != "converged" and phase == "average" and welford.count:
        params = welford.mean
        averaged = welford.count * settings.window * batch_size()
        accuracy = float(distance(welford.mean, welford.standard_error())) if welford.count > 1 else math.nan
    elif reason == "converged":
        averaged = welford.count * settings.window * batch_size()
    convergence = Convergence(
        converged=reason == "converged",
        reason=reason,
        num_iterations=done,
        num_stages=stage + 1,
        step_size=rho,
        accuracy=accuracy,
        stage_change=stage_change,
        averaged_iterations=averaged,
        restarts=restarts,
        direction=chosen.label,
        trial_elbos=trial_scores,
    )
    return state._replace(params=params), params, convergence


def _report(state, outputs, done, start, phase, rho, accuracy):
    return WindowReport(
        state=state,
        elbo=np.asarray(outputs["elbo"]),
        finite=np.asarray(outputs["finite"]),
        nonfinite_latents=np.asarray(outputs["nonfinite_latents"]),
        extras={k: np.asarray(v) for k, v in outputs.get("extras", {}).items()},
        iterations_done=done,
        wall_time=time.perf_counter() - start,
        phase=phase,
        step_size=rho,
        accuracy=accuracy,
    )
