"""A latent the model's gradient cannot see (piecewise constant in it) is named at the fit's check."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import grepvi
from grepvi.errors import FlatLatentWarning
from grepvi.inference.state import check_target, initial_params, make_target

COUNTS = jnp.asarray([4.0, 5.0, 4.0, 1.0, 0.0, 1.0, 0.0, 1.0])


def switch_point(latents):
    """Counts with rate ``early`` before ``tau`` and ``late`` after: ``t < tau`` has no
    gradient in ``tau`` (the coal-mining change point as a user writes it)."""
    t = jnp.arange(COUNTS.shape[0])
    rate = jnp.where(t < latents["tau"], latents["early"], latents["late"])
    prior = -latents["early"] - latents["late"]
    return prior + jnp.sum(COUNTS * jnp.log(rate) - rate)


def smooth_switch_point(latents):
    t = jnp.arange(COUNTS.shape[0])
    weight = 1.0 / (1.0 + jnp.exp(-(latents["tau"] - t) * 4.0))
    rate = weight * latents["early"] + (1.0 - weight) * latents["late"]
    prior = -latents["early"] - latents["late"]
    return prior + jnp.sum(COUNTS * jnp.log(rate) - rate)


FAMILIES = {"early": grepvi.Gamma(), "late": grepvi.Gamma(), "tau": grepvi.Gamma(init_mean=4.0)}


def _check(logdensity_fn):
    target = make_target(logdensity_fn, FAMILIES)
    check_target(target, initial_params(jax.random.key(0), FAMILIES))


def test_a_latent_the_gradient_cannot_see_is_named():
    with pytest.warns(FlatLatentWarning, match=r"\['tau'\]"):
        _check(switch_point)


def test_a_smooth_model_and_a_symmetric_prior_at_its_mean_are_not_flagged():
    # the gradient of a Normal(0, 1) prior vanishes at its mean, not at a draw of q
    families = {"z": grepvi.Normal(), "rate": grepvi.Gamma()}

    def logdensity_fn(latents):
        return -0.5 * latents["z"] ** 2 + jnp.sum(COUNTS * jnp.log(latents["rate"]) - latents["rate"])

    with warnings.catch_warnings():
        warnings.simplefilter("error", FlatLatentWarning)
        _check(smooth_switch_point)
        target = make_target(logdensity_fn, families)
        params = initial_params(jax.random.key(0), families)
        assert np.all(np.asarray(params["z"]["loc"]) == 0.0)
        check_target(target, params)
