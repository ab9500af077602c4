"""The default tolerance widened by the first stage's noise (``controller.sized_tolerance``).

A model whose gradient draws are ``c`` times noisier than the textbook models' (the first
stage's squared Monte Carlo error times its gradient estimates, ``c``, over 1) gets a
tolerance ``sqrt(c)`` times the size-based default, up to 0.02 sd, from 16 latent elements on;
its answer must still be within what the coarser tolerance claims.
"""

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np

import grepvi
from grepvi import numerics
from grepvi.errors import NotConvergedWarning
from grepvi.inference import controller
from grepvi.optim.natural_gradient import fisher_mean_quad

PRIOR_SHAPE, PRIOR_RATE = 0.1, 1.0
# one Poisson count per rate: the zeros leave posterior gamma shapes of 0.1, whose G-REP
# gradients are heavy-tailed (the first stage's error constant far above 1)
COUNTS = np.array([0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 0, 0, 5, 0, 8, 0, 0, 1, 13, 0], np.float64)


def _logdensity(z):
    rate = z["rate"]
    return jnp.sum((PRIOR_SHAPE - 1.0 + COUNTS) * jnp.log(rate) - (PRIOR_RATE + 1.0) * rate)


def _exact_params():
    """The exact posterior ``Gamma(0.1 + x_i, 2)`` in the family's parameters."""
    family = grepvi.Gamma(shape=COUNTS.shape)
    shape = PRIOR_SHAPE + COUNTS
    mean = shape / (PRIOR_RATE + 1.0)
    return {
        "concentration": numerics.inverse_softplus(
            jnp.asarray(shape - family.min_concentration, jnp.float32)
        ),
        "mean": numerics.inverse_softplus(jnp.asarray(mean - family.min_mean, jnp.float32)),
    }


def test_the_tolerance_is_the_settings_where_the_noise_is_nominal_and_widens_as_its_root():
    assert controller.sized_tolerance(0.005, 0.02, accuracy=0.02, estimates=800) == 0.005  # c = 0.32
    widened = controller.sized_tolerance(0.005, 0.02, accuracy=0.1, estimates=400)  # c = 4
    assert math.isclose(widened, 0.01, rel_tol=1e-9)
    assert controller.sized_tolerance(0.005, 0.02, accuracy=0.4, estimates=800) == 0.02  # c = 128: capped
    assert controller.sized_tolerance(0.005, 0.02, accuracy=math.nan, estimates=800) == 0.005
    # a coarsest finer than the tolerance never narrows it
    assert controller.sized_tolerance(0.01, 0.005, accuracy=0.4, estimates=800) == 0.01


def test_a_noisy_model_of_twenty_rates_converges_at_its_widened_tolerance_to_the_exact_posterior():
    families = {"rate": grepvi.Gamma(shape=COUNTS.shape)}
    with warnings.catch_warnings():
        warnings.simplefilter("error", NotConvergedWarning)
        result = grepvi.fit(_logdensity, families, seed=0, progress=False)
    record = result.convergence
    base = controller.default_tolerance(COUNTS.size)
    assert record.converged, record.summary()
    assert record.tolerance > 1.5 * base, record.summary()  # widened by the first stage's noise
    assert record.tolerance <= controller.LARGE_MODEL_TOLERANCE
    fitted = {"rate": jax.tree_util.tree_map(jnp.asarray, result.params["rate"])}
    exact = {"rate": _exact_params()}
    delta = jax.tree_util.tree_map(jnp.subtract, fitted, exact)
    distance = math.sqrt(float(fisher_mean_quad(families, fitted, delta)))
    # the rule's claim: a Monte Carlo error within the tolerance and a bias within twice it
    assert distance <= 3.0 * record.tolerance, (distance, record.summary())


def test_a_model_of_fewer_elements_keeps_the_size_based_tolerance():
    few = COUNTS[:3]

    def logdensity(z):
        return jnp.sum((PRIOR_SHAPE - 1.0 + few) * jnp.log(z["rate"]) - (PRIOR_RATE + 1.0) * z["rate"])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotConvergedWarning)
        result = grepvi.fit(
            logdensity, {"rate": grepvi.Gamma(shape=few.shape)}, seed=0, progress=False, num_steps=20_000
        )
    assert result.convergence.tolerance == controller.default_tolerance(3)
