"""The model zoo (``grepvi.interop.numpyro_zoo``): textbook models as NumPyro users write them, fitted by
grepvi's defaults, ``from_numpyro(model, *data).fit()``, against cached references
(``tests/data/zoo_references.json``, made once by ``scripts/make_zoo_references.py``): NUTS's
posterior means and standard deviations, and NumPyro AutoNormal's ELBO.

* The fit converges (``result.converged``).
* Every posterior mean lies within 0.5 NUTS standard deviations of NUTS's mean (the
  references' own Monte Carlo error is about 0.02 sd: 8,000 draws). Exempt: the funnel scale
  of a centered hierarchical model (eight schools' ``tau``): a mean-field ``q`` cannot follow
  the funnel (the dependence of the ``theta_j``'s spread on ``tau``), so every mean-field method
  misplaces ``tau``; that is the family's limit, not the optimizer's.
* The ELBO (one estimator for both: ``grepvi.interop.numpyro_zoo.elbo_estimate``, 20,000 draws of
  ``log p - log q`` through NumPyro's ``Trace_ELBO``) is not below AutoNormal's by more than
  1 nat (plus 4 standard errors of the two estimates).

The fast tier runs two models; the rest are slow (a default fit takes 10-60 s on 2 cores).
"""

import json
import pathlib

import numpy as np
import pytest

pytest.importorskip("numpyro")

from grepvi.interop.numpyro_model import from_numpyro  # noqa: E402
from grepvi.interop.numpyro_svi import GrepGuide  # noqa: E402
from grepvi.interop.numpyro_zoo import FUNNEL_SCALES, ZOO, elbo_estimate, grepvi_param_map  # noqa: E402

REFERENCES = json.loads((pathlib.Path(__file__).parent / "data" / "zoo_references.json").read_text())
FAST = ("poll", "bioassay")


@pytest.mark.parametrize(
    "name", [pytest.param(name, marks=() if name in FAST else pytest.mark.slow) for name in ZOO]
)
def test_defaults_match_nuts_and_beat_autonormal(name):
    model, data = ZOO[name]
    reference = REFERENCES[name]
    result = from_numpyro(model, *data).fit(progress=False)
    assert result.converged, result.convergence
    for site, moments in reference["nuts"].items():
        if site in FUNNEL_SCALES.get(name, ()):
            continue
        mean = np.asarray(result.posterior[site].mean(), np.float64)
        nuts_mean, nuts_sd = np.asarray(moments["mean"]), np.asarray(moments["sd"])
        distance = np.abs(mean - nuts_mean) / nuts_sd
        assert np.all(distance <= 0.5), f"{name}.{site}: {np.round(distance, 2)} NUTS sd off"
    guide = GrepGuide(model)
    guide.setup(*data)
    elbo, error = elbo_estimate(model, guide, grepvi_param_map(result.params), data)
    theirs = reference["autonormal"]
    slack = 1.0 + 4.0 * np.hypot(error, theirs["elbo_se"])
    assert elbo >= theirs["elbo"] - slack, f"{name}: ELBO {elbo:.2f} vs AutoNormal {theirs['elbo']:.2f}"
