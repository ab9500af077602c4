"""Every estimator recovers the exact posterior of the conjugate models through ``grepvi.fit``.

Each conjugate model of ``grepvi.testing`` is fitted from the families' default initial values
(shape 1, mean 1; ``mu = 0``, ``sigma = 1``) and the fitted posterior's mean and variance must
lie within 2% of the exact posterior's, component by component.

Optimizer (any optax one is allowed; this choice is what makes 2% reachable): Adam at 0.05 for
the first 40% of 8,000 steps, then linearly down to 5e-4, with 64 draws per gradient
(BBVI: 256 + 64). The reported parameters are the average of the iterates over the last 20%
(Polyak-Ruppert averaging), kept by :func:`average_iterates`, a pass-through optax
transformation whose state :func:`_fit` reads back from ``FitResult.state``. Why: the gamma's
shape is a very flat direction (at the posterior shape 13.1 the ELBO gradient changes by about
0.003 per unit of shape), so the last iterate of a noisy run wanders by several percent, and at
a constant step Adam settles about 5% low in shape (its stationary distribution is skewed: the
gradient noise falls as the shape grows). Decaying the step, 64 draws and averaging bring the
error below 1% (measured over seeds 1-3 for G-REP on gamma-Poisson: at most 0.6%).

ADVI's family contains the posterior only for ``lognormal_normal``; elsewhere the test records
its gap (ADVI's log-normal, logit-normal or stick-breaking normal against the exact gamma,
beta, Dirichlet), and so does the biased zero-correction beta variant of G-REP. The measured
numbers are in ``docs/estimators.md``.

All fits with a gamma, beta or Dirichlet sampler are marked slow (about 10 to 40 s each on
2 cores); the fast ones use the log-normal model.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import grepvi
from grepvi import testing
from grepvi.estimators.base import EstimateInfo, Estimator, register_estimator

NUM_STEPS = 8_000
TOLERANCE = 0.02

MODELS = {
    "gamma-poisson": testing.gamma_poisson,
    "beta-bernoulli": testing.beta_bernoulli,
    "dirichlet-multinomial": testing.dirichlet_multinomial,
    "lognormal-normal": testing.lognormal_normal,
}

ESTIMATOR_OPTIONS = {
    "grep": {"num_samples": 64},
    "grep-closed-form": {"num_samples": 64},
    "implicit": {"num_samples": 64},
    "rsvi": {"num_samples": 64},
    "advi": {"num_samples": 64, "num_elbo_samples": 0},
    "bbvi": {"num_samples": 256, "num_control_samples": 64},
}


class AverageState(NamedTuple):
    count: jax.Array
    average: optax.Params


def average_iterates(start: int) -> optax.GradientTransformation:
    """Leaves the updates alone; keeps the running mean of the parameters seen from update
    number ``start`` on (Polyak-Ruppert averaging of the last iterates)."""

    def init(params):
        return AverageState(jnp.zeros([], jnp.int32), jax.tree_util.tree_map(jnp.zeros_like, params))

    def update(updates, state, params=None):
        count = state.count + 1
        seen = jnp.maximum(count - start, 0).astype(jnp.float32)
        weight = jnp.where(seen > 0, 1.0 / jnp.maximum(seen, 1.0), 0.0)
        average = jax.tree_util.tree_map(
            lambda mean, value: mean + weight.astype(mean.dtype) * (value - mean), state.average, params
        )
        return updates, AverageState(count, average)

    return optax.GradientTransformation(init, update)


def _optimizer(num_steps):
    decay_start = int(0.4 * num_steps)
    schedule = optax.join_schedules(
        [optax.constant_schedule(0.05), optax.linear_schedule(0.05, 5e-4, num_steps - decay_start)],
        [decay_start],
    )
    return optax.chain(average_iterates(int(0.8 * num_steps)), optax.adam(schedule))


def _fit(model, estimator, options, num_steps=NUM_STEPS, seed=0):
    """Fits ``model``; returns ``{latent: (relative mean error, relative variance error)}``."""
    result = grepvi.fit(
        model.logdensity_fn,
        model.families,
        estimator,
        num_steps=num_steps,
        optimizer=_optimizer(num_steps),
        local_logdensity_fn=model.local_logdensity_fn,
        estimator_options=options,
        seed=seed,
        progress=False,
    )
    averaged = result.state.opt_state[0].average
    errors = {}
    for name, family in result.families.items():
        mean = np.asarray(family.mean(averaged[name]), np.float64)
        variance = np.asarray(family.variance(averaged[name]), np.float64)
        errors[name] = (
            mean / model.posterior_mean[name] - 1.0,
            variance / model.posterior_variance[name] - 1.0,
        )
    assert np.all(np.isfinite(result.trace.elbo))
    return errors


def _assert_recovered(errors, label):
    for name, (mean_error, variance_error) in errors.items():
        print(
            f"{label} {name}: mean error {np.round(mean_error, 4)},",
            f"variance error {np.round(variance_error, 4)}",
        )
        assert np.all(np.abs(mean_error) < TOLERANCE), (label, name, mean_error)
        assert np.all(np.abs(variance_error) < TOLERANCE), (label, name, variance_error)


CASES = [
    pytest.param(estimator, model, marks=() if model == "lognormal-normal" else pytest.mark.slow)
    for estimator in ("grep", "implicit", "rsvi", "bbvi")
    for model in MODELS
] + [
    pytest.param("grep-closed-form", "gamma-poisson", marks=pytest.mark.slow),
    pytest.param("grep-closed-form", "lognormal-normal"),
    pytest.param("advi", "lognormal-normal"),
]


# G-REP's "full" Dirichlet standardization has about 13 times the per-draw variance of the
# implicit gradient on the posterior's small component (alpha = 0.5); with 64 draws it lands 1.5%
# off there, so it gets 256.
CASE_OPTIONS = {("grep", "dirichlet-multinomial"): {"num_samples": 256}}


@pytest.mark.parametrize("estimator, model_name", CASES)
def test_recovers_exact_posterior(estimator, model_name):
    options = {**ESTIMATOR_OPTIONS[estimator], **CASE_OPTIONS.get((estimator, model_name), {})}
    errors = _fit(MODELS[model_name](), estimator, options)
    _assert_recovered(errors, f"{estimator} on {model_name}")


@pytest.mark.slow
@pytest.mark.parametrize("model_name", ["gamma-poisson", "beta-bernoulli", "dirichlet-multinomial"])
def test_advi_gap_where_its_family_differs(model_name):
    """ADVI's Gaussian on the unconstrained space cannot equal a gamma, beta or Dirichlet
    posterior; the test records the gap and checks only that the means are close (5%)."""
    errors = _fit(MODELS[model_name](), "advi", ESTIMATOR_OPTIONS["advi"])
    for name, (mean_error, variance_error) in errors.items():
        print(
            f"advi gap on {model_name} {name}: mean {np.round(mean_error, 4)},",
            f"variance {np.round(variance_error, 4)}",
        )
        assert np.all(np.abs(mean_error) < 0.05)


@pytest.mark.slow
def test_zero_correction_beta_lands_off():
    """G-REP with the biased zero-correction beta standardization (closed form, as in the
    paper's experiments): records where it lands; asserts only a loose 10% on the mean."""
    model = testing.beta_bernoulli(standardization="zero-correction")
    errors = _fit(model, "grep-closed-form", ESTIMATOR_OPTIONS["grep-closed-form"])
    ((mean_error, variance_error),) = errors.values()
    print(f"zero-correction beta: mean error {mean_error:.4f}, variance error {variance_error:.4f}")
    assert abs(mean_error) < 0.1


# --- a user's own estimator, registered by name and run through fit ------------------------------


@register_estimator("test-user-pathwise")
def _user_pathwise(num_samples: int = 1, compute_variance: bool = False) -> Estimator:
    """A user's estimator: the plain reparameterization gradient ``grad f(T(eps; v)) + grad H``
    for families whose standardized variable is parameter-free (log-normal, normal)."""

    def estimate(rng_key, params, target):
        keys = jax.random.split(rng_key, len(target.families))
        eps = {
            name: family.sample_standardized(params[name], key, (num_samples,))
            for key, (name, family) in zip(keys, sorted(target.families.items()), strict=True)
        }

        def objective(p):
            latents = jax.vmap(
                lambda e: {
                    name: family.transform(p[name], e[name]) for name, family in target.families.items()
                }
            )(eps)
            entropy = sum(jnp.sum(family.entropy(p[name])) for name, family in target.families.items())
            return jnp.mean(jax.vmap(target.logdensity_fn)(latents)) + entropy

        elbo, grad = jax.value_and_grad(objective)(params)
        return grad, EstimateInfo(elbo=elbo, extras={})

    return Estimator(name="test-user-pathwise", estimate=estimate, options={"num_samples": num_samples})


def test_user_registered_estimator_runs_through_fit():
    assert "test-user-pathwise" in grepvi.estimator_names()
    errors = _fit(testing.lognormal_normal(), "test-user-pathwise", {"num_samples": 64})
    _assert_recovered(errors, "user estimator on lognormal-normal")
