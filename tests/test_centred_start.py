"""A real-valued latent of a NumPyro model starts at its prior's centre given the sites before
it (:func:`grepvi.interop.numpyro_model._centred_start`), where the model's log joint there is
higher than at 0 (:func:`grepvi.interop.numpyro_model._better_starts`); stacked latents keep
each member's start (:func:`grepvi.inference.stacking.plan`)."""

import numpy as np
import pytest

pytest.importorskip("numpyro")

import numpyro  # noqa: E402
import numpyro.distributions as dist  # noqa: E402

import grepvi  # noqa: E402
from grepvi.inference import stacking  # noqa: E402
from grepvi.interop.numpyro_model import from_numpyro  # noqa: E402

_RNG = np.random.default_rng(11)
LEVELS = (240.0 + 15.0 * _RNG.normal(size=8)).astype(np.float32)
WEIGHTS = (LEVELS[:, None] + 5.0 * _RNG.normal(size=(8, 4))).astype(np.float32)


def _levels(y):
    """Groups around a common level far from 0 (a growth curve's weights in grams)."""
    theta = numpyro.sample("theta", dist.Normal(250.0, 100.0))
    tail = numpyro.sample("tail", dist.Cauchy(-3.0, 1.0))  # no mean: its median
    with numpyro.plate("groups", y.shape[0]):
        level = numpyro.sample("level", dist.Normal(theta, 20.0))  # centred on theta's centre
        numpyro.sample("y", dist.Normal(level[:, None] + 0.0 * tail, 5.0).to_event(1), obs=y)


def _at_zero(y):
    """The same prior centre, but data at 0: the log joint prefers the unconstrained 0."""
    theta = numpyro.sample("theta", dist.Normal(250.0, 100.0))
    with numpyro.plate("obs", y.shape[0]):
        numpyro.sample("y", dist.Normal(theta, 1.0), obs=y)


def test_a_real_valued_latent_starts_at_its_prior_centre_given_the_sites_before_it():
    """``theta``: its prior's mean, 250; ``level``: the mean of ``Normal(theta, 20)`` at theta's
    centre, 250 in every group (not at theta's placeholder draw); ``tail``: a Cauchy's
    median, -3. A family the user names keeps its start (0)."""
    families = from_numpyro(_levels, WEIGHTS).latents()
    assert float(families["theta"].init_loc) == 250.0
    np.testing.assert_array_equal(np.asarray(families["level"].init_loc), np.full(8, 250.0, np.float32))
    assert float(families["tail"].init_loc) == -3.0
    named = from_numpyro(_levels, WEIGHTS, families={"theta": grepvi.Normal()}).latents()
    assert float(named["theta"].init_loc) == 0.0


def test_the_start_the_model_prefers_is_kept():
    """Data at 0 under a ``Normal(250, 100)`` prior: the log joint at 250 is far below the one
    at 0 (1,000 points 250 sd from their mean), so 0 is kept."""
    assert float(from_numpyro(_at_zero, np.zeros(1000, np.float32)).latents()["theta"].init_loc) == 0.0
    at_250 = from_numpyro(_at_zero, np.full(1000, 250.0, np.float32)).latents()["theta"]
    assert float(at_250.init_loc) == 250.0


def test_stacked_normals_keep_each_members_start():
    """Three Normals started apart stack into one latent (as before, when they all started at
    0) whose start is theirs, element by element, in the members' order."""
    families = {
        "a": grepvi.Normal(init_loc=np.float32(250.0)),
        "b": grepvi.Normal(shape=(2,), init_loc=np.array([1.0, -2.0], np.float32)),
        "c": grepvi.Normal(),
    }
    plan = stacking.plan(families)
    assert plan is not None and len(plan.groups) == 1
    (stacked,) = plan.stacked_families.values()
    np.testing.assert_array_equal(np.asarray(stacked.init_params()["loc"]), [250.0, 1.0, -2.0, 0.0])


def test_the_growth_curve_model_converges_from_its_prior_centre():
    """Groups near 240 with an intercept prior ``Normal(250, 100)`` and their scales unknown:
    the fit by the defaults converges, and the level's mean lands on the data's (the exact
    posterior mean of a Gaussian model's location is what mean-field Gaussian VI finds; the
    scales are near their posterior modes here, so within 3 posterior sd: about 6 g). From
    its prior's centre it took 5,350 iterations; from 0, 13,050 (the same answer)."""
    result = from_numpyro(_growth, WEIGHTS).fit(progress=False)
    assert result.converged
    assert result.convergence.num_iterations < 9_000, result.convergence.num_iterations
    theta = float(result.params["theta"]["loc"])
    assert abs(theta - float(WEIGHTS.mean())) < 18.0, theta


def _growth(y):
    theta = numpyro.sample("theta", dist.Normal(250.0, 100.0))
    spread = numpyro.sample("spread", dist.HalfNormal(50.0))
    noise = numpyro.sample("noise", dist.HalfNormal(20.0))
    with numpyro.plate("groups", y.shape[0]):
        raw = numpyro.sample("raw", dist.Normal(0.0, 1.0))
        level = theta + spread * raw
        numpyro.sample("y", dist.Normal(level[:, None], noise).to_event(1), obs=y)
