"""NUTS and NumPyro AutoNormal references of the NumPyro model zoo (``grepvi.interop.numpyro_zoo``).

Writes ``tests/data/zoo_references.json`` (what ``tests/test_numpyro_zoo.py`` reads): per model,
NUTS posterior means and standard deviations of every latent site (2 chains x 4,000 draws after
2,000 warmup; eight schools' NUTS run non-centered by ``LocScaleReparam``, the same posterior
without the funnel's divergences), and AutoNormal's ELBO (SVI, Adam 0.01, 20,000 steps; the
ELBO by ``grepvi.interop.numpyro_zoo.elbo_estimate``, 20,000 draws). With ``--table`` it also fits
grepvi's defaults (``from_numpyro(model, *data).fit()``) and prints the docs' table.

    PYTHONPATH=. python scripts/make_zoo_references.py [--table]
"""

import argparse
import json
import pathlib
import time
import warnings

import jax
import numpy as np

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "zoo_references.json"


def nuts(model, data, name):
    import numpyro
    from numpyro.infer import MCMC, NUTS
    from numpyro.infer.reparam import LocScaleReparam

    if name == "eight_schools":
        model = numpyro.handlers.reparam(model, config={"theta": LocScaleReparam(0)})
    mcmc = MCMC(
        NUTS(model),
        num_warmup=2000,
        num_samples=4000,
        num_chains=2,
        progress_bar=False,
        chain_method="sequential",
    )
    start = time.perf_counter()
    mcmc.run(jax.random.key(0), *data)
    seconds = time.perf_counter() - start
    samples = {k: np.asarray(v) for k, v in mcmc.get_samples().items() if not k.endswith("_decentered")}
    return {k: {"mean": v.mean(0).tolist(), "sd": v.std(0).tolist()} for k, v in samples.items()}, seconds


def autonormal(model, data):
    import numpyro
    from numpyro.infer import SVI, Trace_ELBO
    from numpyro.infer.autoguide import AutoNormal

    from grepvi.interop.numpyro_zoo import elbo_estimate

    guide = AutoNormal(model)
    svi = SVI(model, guide, numpyro.optim.Adam(0.01), Trace_ELBO())
    start = time.perf_counter()
    result = svi.run(jax.random.key(0), 20_000, *data, progress_bar=False)
    seconds = time.perf_counter() - start
    elbo, se = elbo_estimate(model, guide, result.params, data)
    means = guide.median(result.params)
    return {
        "elbo": elbo,
        "elbo_se": se,
        "seconds": seconds,
        "median": {k: np.asarray(v).tolist() for k, v in means.items()},
    }


def grepvi_fit(model, data):
    from grepvi.interop.numpyro_model import from_numpyro
    from grepvi.interop.numpyro_svi import GrepGuide
    from grepvi.interop.numpyro_zoo import elbo_estimate, grepvi_param_map

    start = time.perf_counter()
    result = from_numpyro(model, *data).fit(progress=False)
    seconds = time.perf_counter() - start
    guide = GrepGuide(model)
    guide.setup(*data)
    elbo, se = elbo_estimate(model, guide, grepvi_param_map(result.params), data)
    means = {k: np.asarray(p.mean()).tolist() for k, p in result.posterior.items()}
    return {
        "elbo": elbo,
        "elbo_se": se,
        "seconds": seconds,
        "mean": means,
        "converged": bool(result.converged),
    }


def _short(values):
    values = np.atleast_1d(np.asarray(values, np.float64)).ravel()
    text = ", ".join(f"{v:.3g}" for v in values[:3])
    return text + (", ..." if values.size > 3 else "")


def main():
    from grepvi.interop.numpyro_zoo import ZOO

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--table", action="store_true")
    parser.add_argument("--only", nargs="*")
    args = parser.parse_args()
    references = json.loads(OUT.read_text()) if OUT.exists() else {}
    rows = []
    for name, (model, data) in ZOO.items():
        if args.only and name not in args.only:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if name not in references:
                posterior, nuts_seconds = nuts(model, data, name)
                references[name] = {
                    "nuts": posterior,
                    "nuts_seconds": nuts_seconds,
                    "autonormal": autonormal(model, data),
                }
                OUT.write_text(json.dumps(references, indent=1))
                print(name, "references written", flush=True)
            if args.table:
                ours = grepvi_fit(model, data)
                ref = references[name]
                for site, moments in ref["nuts"].items():
                    rows.append(
                        f"| {name} | {site} | {_short(ours['mean'][site])} | {_short(moments['mean'])} "
                        f"| {_short(moments['sd'])} | {_short(ref['autonormal']['median'][site])} |"
                    )
                rows.append(
                    f"| {name} | **ELBO** | **{ours['elbo']:.2f}** ({ours['seconds']:.1f} s"
                    f"{'' if ours['converged'] else ', not converged'}) | NUTS {ref['nuts_seconds']:.1f} s | "
                    f"| **{ref['autonormal']['elbo']:.2f}** ({ref['autonormal']['seconds']:.1f} s) |"
                )
                print(rows[-1], flush=True)
    if args.table:
        print("| model | site | grepvi mean | NUTS mean | NUTS sd | AutoNormal median |")
        print("|---|---|---|---|---|---|")
        print("\n".join(rows))


if __name__ == "__main__":
    main()
