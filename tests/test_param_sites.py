"""``numpyro.param`` sites in a model: held at their initial values, with a warning that says
so (NumPyro's SVI would optimize them; its MCMC holds them)."""

import numpy as np
import pytest

from grepvi.errors import ParamSiteWarning

numpyro = pytest.importorskip("numpyro")


def _known_scale_model(y):
    import numpyro.distributions as dist

    scale = numpyro.param("scale", 2.0, constraint=dist.constraints.positive)
    mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
    with numpyro.plate("n", y.shape[0]):
        numpyro.sample("y", dist.Normal(mu, scale), obs=y)


def test_a_param_site_is_held_at_its_initial_value_with_a_warning():
    """The warning names the site; the fit is the conjugate normal posterior of ``mu`` with the
    scale at its initial 2.0 (the data's own sd is about 1: an optimized scale would narrow it)."""
    from grepvi.interop.numpyro_model import from_numpyro

    y = np.random.default_rng(0).normal(1.0, 1.0, 40).astype(np.float32)
    with pytest.warns(ParamSiteWarning, match=r"\['scale'\].*initial values"):
        adapted = from_numpyro(_known_scale_model, y)
    result = adapted.fit(progress=False, seed=0)
    precision = 1 / 5.0**2 + y.size / 2.0**2
    mean, sd = (y.sum() / 2.0**2) / precision, precision**-0.5
    fitted = result.posterior["mu"]
    assert abs(float(np.asarray(fitted.mean())) - mean) < 0.05 * sd
    assert abs(float(np.sqrt(np.asarray(fitted.variance()))) / sd - 1) < 0.05
