"""Time to the answer on NumPyro models: grepvi against SVI and NUTS.

One command; every contender runs in a fresh Python process (imports, tracing and XLA
compilation included, no cache shared), one after another::

    python benchmarks/time_to_answer.py                       # all models, all contenders
    python benchmarks/time_to_answer.py --models pumps mendel --contenders grepvi nuts
    python benchmarks/time_to_answer.py --models claims_10k hierarchical_logistic   # two larger ones
    python benchmarks/time_to_answer.py --fresh               # the ten of fresh_models.py
    python benchmarks/time_to_answer.py --unseen              # the six of unseen_models.py
    python benchmarks/time_to_answer.py --corners             # the twenty-three of corner_models.py
    python benchmarks/time_to_answer.py --edges               # the ten of edge_models.py
    python benchmarks/time_to_answer.py --frontier            # the twelve of frontier_models.py
    python benchmarks/time_to_answer.py --outliers            # the twelve of outlier_models.py
    python benchmarks/time_to_answer.py --user                # the ten of user_models.py
    python benchmarks/time_to_answer.py --probe               # the ten of probe_models.py
    python benchmarks/time_to_answer.py --classic             # the nine of classic_models.py
    python benchmarks/time_to_answer.py --held-out            # the twelve of held_out_models.py
    python benchmarks/time_to_answer.py --examples            # the eight of example_models.py
    python benchmarks/time_to_answer.py --supports            # the eleven of support_models.py
    python benchmarks/time_to_answer.py --blind               # the thirteen of blind_models.py
    python benchmarks/time_to_answer.py --bugs                # the seven of bugs_models.py
    python benchmarks/time_to_answer.py --tutorials           # the nine of tutorial_models.py
    python benchmarks/time_to_answer.py --applied             # the ten of applied_models.py
    python benchmarks/time_to_answer.py --rethinking          # the eight of rethinking_models.py
    python benchmarks/time_to_answer.py --ridges              # the six of ridge_models.py
    python benchmarks/time_to_answer.py --scales              # the six of scale_models.py
    python benchmarks/time_to_answer.py --medium              # the ten of medium_models.py
    python benchmarks/time_to_answer.py --moving              # the five of moving_support_models.py
    python benchmarks/time_to_answer.py --same-process --contenders nuts svi grepvi

``--same-process`` runs a model's contenders one after another in one process (in the order
of ``--contenders``), as a user comparing them in one script does: a later contender finds
JAX's backend up and NumPyro's eager operations compiled (``process`` is then the time since
the process started, cumulative). With ``--fresh-caches`` too, JAX's in-memory caches
(``jax.clear_caches()``: the jitted functions' and the eager operations' compiled programs)
are emptied before each contender: the same process, each contender starting as in a process
of its own (seventy-seventh session: Mendel's SVI 1.18-1.51 s after NUTS, 4.80-5.28 s run
first or after the caches are emptied; grepvi 2.14-2.28 s in any order, its programs its own).

``--warm-cache`` measures a user's second run of the same script: each worker process runs
twice with one persistent compilation cache (``jax_compilation_cache_dir``, turned on at the
process's start for every contender, NumPyro's programs too, and grepvi's minimum compile time
for an entry), the first run untimed; the second is reported.

Contenders (the models are :mod:`textbook_models`: from the literature, and simulated):

* ``grepvi``: ``from_numpyro(model, *data).fit()``, the defaults (the time includes the
  adapter).
* ``svi``: NumPyro SVI, ``AutoNormal`` guide, ``Adam(0.01)``, ``Trace_ELBO``, 10,000 steps.
* ``nuts``: NumPyro NUTS, one chain, 1,000 warmup + 1,000 draws.
* A/B, run only when named: ``grepvi-unstacked`` (every latent its own array in the step, as
  before the thirty-first session), ``grepvi-fusion-emitters`` (small models' step programs
  compiled with XLA's fusion emitters: ``docs/performance.md``, thirty-third session),
  ``grepvi-quadratic-cv`` (G-REP with ``control_variate="quadratic"``, the opt-in quadratic
  control variate: ``docs/performance.md``, thirty-fourth session), ``grepvi-uncoupled`` (the
  real-valued latents' locations never coupled: ``docs/performance.md``, thirty-fifth session),
  ``grepvi-unbatched`` (a step's special functions one call each, not in batches:
  ``docs/performance.md``, fifty-first session), ``grepvi-simplex-normal`` (a simplex latent's
  ``q`` the stick-breaking normal: fifty-second session), ``grepvi-generalized-dirichlet`` (a
  simplex latent's ``q`` the generalized Dirichlet's beta sticks: the same session),
  ``grepvi-loops-per-fusion`` (a model's ``scan`` run a kernel call per fusion a trip, XLA's
  default, as before the seventy-fifth session: ``compilation_cache.SMALL_LOOP_BYTES``).

grepvi's note gives when its first window of steps ended (the adapter, the step's tracing and
its compilation before it). ``time`` is the wall time from the model and data in hand
(imports done: NumPyro, its
distributions and handlers for every contender, as a NumPyro user has them; until the
seventeenth session grepvi's clock counted NumPyro's first import, 0.5-0.7 s, which the peers'
did not) to the answer (compilation included); ``process`` the whole subprocess (interpreter
start and imports too).
Accuracy, computed after the clock stops: ``max |d mean| / sd`` is the largest distance of a
latent element's posterior mean from NUTS's, in NUTS posterior standard deviations (a NUTS
reference is run untimed when ``nuts`` is not among the contenders); ``ELBO`` is one shared
estimator for every variational answer, ``E_q[log p(x, z) - log q(z)]`` in the constrained
space over 20,000 draws of ``q`` in float64 (its Monte Carlo standard error alongside). On
``mendel`` the exact log evidence is printed for comparison (a conjugate model: the best
ELBO equals it).
"""

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONTENDERS = ("grepvi", "svi", "nuts")
# A/B contenders, run only when named: the defaults with one part of the library changed
EXTRA_CONTENDERS = (
    "grepvi-unstacked",
    "grepvi-fusion-emitters",
    "grepvi-quadratic-cv",
    "grepvi-uncoupled",
    "grepvi-unbatched",
    "grepvi-simplex-normal",
    "grepvi-generalized-dirichlet",
    "grepvi-loops-per-fusion",
)
ELBO_DRAWS = 20_000


def _worker(
    contenders: str,
    model_name: str,
    out: str,
    seed: int,
    fresh_caches: bool = False,
    warm_cache: bool = False,
) -> None:
    """Runs the contenders (comma-separated) one after another in this process, then scores
    each answer (after every clock has stopped: the scoring turns on float64).
    ``fresh_caches``: JAX's in-memory caches emptied before each contender; ``warm_cache``: the
    persistent compilation cache on for every contender from the start."""
    start_process = float(os.environ.get("TIME_TO_ANSWER_T0", time.time()))
    import jax

    if warm_cache:  # for the peers too: a NumPyro user can turn JAX's cache on as well
        from grepvi.inference.compilation_cache import enable_persistent_cache

        enable_persistent_cache()

    sys.path.insert(0, str(HERE))
    from textbook_models import ALL_MODELS

    entry = ALL_MODELS[model_name]
    fitted = []
    for contender in contenders.split(","):
        if fresh_caches:  # before the clock: the next contender compiles what it runs
            jax.clear_caches()
        try:
            record, answer = _fit(contender, entry, model_name, seed)
        except Exception as error:  # noqa: BLE001 - one contender's failure, not the others'
            fitted.append(({"contender": contender, "model": model_name, "error": _error(error)}, None))
            continue
        record["process"] = time.time() - start_process
        fitted.append((record, answer))
    jax.config.update("jax_enable_x64", True)
    records = [
        record if answer is None else _scored_or_error(record, answer, entry, seed)
        for record, answer in fitted
    ]
    Path(out).write_text(json.dumps(records))


def _error(error: Exception) -> str:
    text = str(error).splitlines()[0][:120] if str(error) else ""
    return f"{type(error).__name__}: {text}"


def _scored_or_error(record, answer, entry, seed):
    """:func:`_score`, or the record with the scoring's error (an SVI answer at NaN locations:
    the model cannot be run there), its time kept."""
    try:
        return _score(record, answer, entry, seed)
    except Exception as error:  # noqa: BLE001 - one contender's failure, not the others'
        return {**record, "error": f"its answer: {_error(error)}"}


def _fit(contender: str, entry, model_name: str, seed: int):
    """``(record, answer)``: one contender's fit of ``entry``, timed from the model and data in
    hand to the answer."""
    import warnings

    import jax

    args = tuple(jax.numpy.asarray(a) for a in entry.args)
    record = {"contender": contender, "model": model_name}
    if contender.startswith("grepvi"):
        import numpy as np
        import numpyro  # noqa: F401 - imported before the clock, as the peers' (a NumPyro user's model needs it)
        import numpyro.distributions  # noqa: F401
        from numpyro import handlers  # noqa: F401

        from grepvi.interop.numpyro_model import from_numpyro

        if contender == "grepvi-unstacked":  # every latent its own array in the step (before 31)
            from grepvi.inference import stacking

            stacking.plan = lambda families: None
        if contender == "grepvi-fusion-emitters":  # small models' steps with XLA's fusion emitters
            from grepvi.inference import compilation_cache

            compilation_cache.SMALL_MODEL_COMPILER_OPTIONS["xla_cpu_use_fusion_emitters"] = True
        if contender == "grepvi-unbatched":  # special functions one call each (before the 51st session)
            from grepvi.inference import special_batches

            special_batches.batched_special_functions = lambda function: function
        if contender == "grepvi-simplex-normal":  # a simplex latent's q: the stick-breaking normal
            from numpyro.distributions import constraints

            from grepvi.interop import numpyro_model

            numpyro_model.Dirichlet = lambda shape: numpyro_model.TransformedNormal(
                shape=shape, constraint=constraints.simplex
            )
        if contender == "grepvi-generalized-dirichlet":  # a simplex latent's q: beta sticks
            from grepvi.interop import numpyro_model

            numpyro_model.Dirichlet = numpyro_model.GeneralizedDirichlet
        if contender == "grepvi-loops-per-fusion":  # a model's scan a kernel per fusion (before 75)
            from grepvi.inference import compilation_cache

            compilation_cache.SMALL_LOOP_MIN_TRIPS = 2**62
        if contender == "grepvi-uncoupled":  # locations never coupled (before the 35th session)
            from grepvi.inference import fitting

            fitting.location_coupler = lambda target, data: None
        options = {}
        if contender == "grepvi-quadratic-cv":  # the opt-in quadratic control variate
            options = {"estimator_options": {"control_variate": "quadratic"}}
        windows = []  # when each window ended: the first one's end is setup, tracing and compilation
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            adapted = from_numpyro(entry.model, *args)
            on_window = lambda event: windows.append((time.perf_counter(), event.window_seconds))  # noqa: E731
            result = adapted.fit(progress=False, seed=seed, callback=on_window, **options)
            jax.block_until_ready(result.params)
        record["time"] = time.perf_counter() - start
        record["first_window"] = (windows[0][0] - start) if windows else record["time"]
        record["converged"] = bool(result.converged)
        record["iterations"] = int(result.convergence.num_iterations)
        record["climbs"] = int(result.convergence.climbs)
        record["coupled"] = bool(result.convergence.coupled)
        record["control_variate"] = result.convergence.control_variate
        extras = result.trace.extras
        # the largest share of a step's draws left out of its average, and the steps skipped
        record["most_unusable"] = float(np.max(extras.get("unusable_draws", 0.0), initial=0.0))
        record["skipped"] = int(np.sum(extras.get("skipped", 0.0)))
        # the longest wait between two windows beyond the later one's own run (a 64-draw window of
        # Kline's GP runs 0.9 s): a second program compiled mid-run shows here
        ends = [end for end, _ in windows]
        runs = [seconds for _, seconds in windows]
        gaps = zip(ends[:-1], ends[1:], runs[1:], strict=True)
        pauses = [later - earlier - run for earlier, later, run in gaps]
        record["longest_pause"] = max(pauses, default=0.0)
        record["warnings"] = sorted({type(w.message).__name__ for w in caught})
        answer = ("grepvi", (result, adapted.moving))
    elif contender == "svi":
        import numpyro
        from numpyro.infer import SVI, Trace_ELBO
        from numpyro.infer.autoguide import AutoNormal

        discrete, _ = _discrete_latents(entry.model, args)  # before the clock: the user knows them
        start = time.perf_counter()
        if discrete:  # as NumPyro documents it: the discrete sites hidden from the guide, enumerated
            from numpyro import handlers
            from numpyro.contrib.funsor import config_enumerate
            from numpyro.infer import TraceEnum_ELBO

            model = config_enumerate(entry.model)
            guide = AutoNormal(handlers.block(model, hide=discrete))
            svi = SVI(model, guide, numpyro.optim.Adam(0.01), TraceEnum_ELBO())
        else:
            guide = AutoNormal(entry.model)
            svi = SVI(entry.model, guide, numpyro.optim.Adam(0.01), Trace_ELBO())
        svi_result = svi.run(jax.random.key(seed), 10_000, *args, progress_bar=False)
        jax.block_until_ready(svi_result.params)
        record["time"] = time.perf_counter() - start
        answer = ("svi", svi_result.params)
    elif contender == "nuts":
        from numpyro.infer import MCMC, NUTS

        start = time.perf_counter()
        mcmc = MCMC(NUTS(entry.model), num_warmup=1000, num_samples=1000, progress_bar=False)
        mcmc.run(jax.random.key(seed), *args)
        samples = mcmc.get_samples()
        jax.block_until_ready(samples)
        record["time"] = time.perf_counter() - start
        answer = ("nuts", samples)
    else:
        raise SystemExit(f"unknown contender {contender!r}")
    return record, answer


def _score(record, answer, entry, seed: int) -> dict:
    """``record`` with the answer's posterior means (NUTS: and sd) and, for a variational
    answer, the shared ELBO estimate (float64, after every clock)."""
    import jax
    import numpy as np

    widen = lambda a: np.asarray(a, np.float64) if np.issubdtype(np.asarray(a).dtype, np.floating) else a  # noqa: E731
    args64 = tuple(jax.numpy.asarray(widen(a)) for a in entry.args)  # index arrays stay integers
    kind, value = answer
    if kind == "nuts":
        record["mean"] = {k: np.asarray(v, np.float64).mean(0).ravel().tolist() for k, v in value.items()}
        record["sd"] = {k: np.asarray(v, np.float64).std(0).ravel().tolist() for k, v in value.items()}
    else:
        draws, log_q, means = _q_draws(kind, value, entry, args64, jax.random.key(seed + 1))
        record["mean"] = {k: np.asarray(v).ravel().tolist() for k, v in means.items()}
        record["elbo"], record["elbo_se"] = _shared_elbo(entry.model, args64, draws, log_q)
    return record


def _q_draws(kind, value, entry, args, rng_key):
    """``(draws, log q(draws), means)`` of a variational answer, constrained space, float64."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    if kind == "grepvi":
        from grepvi.families.base import Posterior

        value, moving = value
        draws, log_q, means = {}, 0.0, {}
        keys = jax.random.split(rng_key, len(value.posterior))
        for key, (name, posterior) in zip(keys, sorted(value.posterior.items()), strict=True):
            to64 = lambda p: jnp.asarray(np.asarray(p, np.float64))  # noqa: E731
            params = jax.tree_util.tree_map(to64, posterior.params)
            posterior = Posterior(posterior.family, params)
            z = posterior.sample(key, ELBO_DRAWS)
            per_element = posterior.log_prob(z)
            log_q = log_q + per_element.reshape(ELBO_DRAWS, -1).sum(-1)
            draws[name] = z
            means[name] = posterior.mean()
        if moving:  # q of u: the sites' values at each draw, q's density there by the Jacobian
            values, log_det = _moving_values(entry.model, args, draws, moving)
            draws.update(values)
            log_q = log_q - log_det
            means.update({name: values[name].mean(0) for name in moving})
        return draws, log_q, means

    from numpyro import handlers
    from numpyro.distributions.transforms import biject_to

    def at_loc(site):  # the guide's location, not a prior draw (an ImproperUniform has none)
        loc = value.get(f"{site['name']}_auto_loc")
        return (
            None if loc is None else biject_to(site["fn"].support)(jnp.asarray(np.asarray(loc, np.float64)))
        )

    trace = handlers.trace(
        handlers.substitute(handlers.seed(entry.model, 0), substitute_fn=at_loc)
    ).get_trace(*args)
    draws, log_q, means = {}, 0.0, {}
    latent = [
        n
        for n, s in trace.items()
        if s["type"] == "sample" and not s["is_observed"] and not s["fn"].support.is_discrete
    ]
    keys = jax.random.split(rng_key, len(latent))
    for key, name in zip(keys, latent, strict=True):
        loc = jnp.asarray(np.asarray(value[f"{name}_auto_loc"], np.float64))
        scale = jnp.asarray(np.asarray(value[f"{name}_auto_scale"], np.float64))
        transform = biject_to(trace[name]["fn"].support)
        normal = jax.random.normal(key, (ELBO_DRAWS,) + loc.shape, jnp.float64)
        u = loc + scale * normal
        z = transform(u)
        log_normal = -0.5 * normal**2 - jnp.log(scale) - 0.5 * np.log(2 * np.pi)
        log_det = transform.log_abs_det_jacobian(u, z)
        log_q = log_q + log_normal.reshape(ELBO_DRAWS, -1).sum(-1) - log_det.reshape(ELBO_DRAWS, -1).sum(-1)
        draws[name] = z
        means[name] = z.mean(0)
    return draws, log_q, means


def _moving_values(model, args, draws, moving):
    """``(values, log |dz/du|)`` at each draw of a moving latent site (a support bounded by
    other latents, fitted by grepvi on ``u``): ``z = biject_to(support)(u)`` on the support of
    the draw's other latents."""
    import jax
    import jax.numpy as jnp
    from numpyro import handlers
    from numpyro.distributions.transforms import biject_to

    def one(z):
        def place(site):
            name = site["name"]
            if name in moving and site["type"] == "sample":
                return biject_to(site["fn"].support)(z[name])
            return z.get(name)

        run = handlers.substitute(handlers.seed(model, 0), substitute_fn=place)
        trace = handlers.trace(run).get_trace(*args)
        log_det = sum(
            jnp.sum(biject_to(trace[n]["fn"].support).log_abs_det_jacobian(z[n], trace[n]["value"]))
            for n in moving
        )
        return {n: trace[n]["value"] for n in moving}, log_det

    return jax.lax.map(one, draws, batch_size=256)


def _discrete_latents(model, args) -> tuple[list, int]:
    """The model's discrete latent sites (NumPyro's NUTS enumerates them) and its plates'
    nesting, from one abstract trace (nothing compiles)."""
    import jax
    from numpyro import handlers

    from grepvi.interop.enumeration import discrete_sites, max_plate_nesting

    captured = {}

    def capture():
        captured["trace"] = handlers.trace(handlers.seed(model, 0)).get_trace(*args)

    try:
        jax.eval_shape(capture)
    except Exception:  # noqa: BLE001 - a model that cannot be traced abstractly: eagerly
        capture()
    return discrete_sites(captured["trace"]), max_plate_nesting(captured["trace"])


def _enumerated_log_density(model, args):
    """``log_density`` of ``model``: with its discrete latent sites summed out (funsor), where
    it has any."""
    from numpyro.infer.util import log_density

    discrete, nesting = _discrete_latents(model, args)
    if not discrete:
        return log_density
    from numpyro.contrib.funsor import config_enumerate, enum
    from numpyro.contrib.funsor import log_density as enumerated_density

    enumerated = enum(config_enumerate(model), -nesting - 1)
    return lambda _, *rest: enumerated_density(enumerated, *rest)


def _shared_elbo(model, args, draws, log_q):
    import jax
    import numpy as np

    log_density = _enumerated_log_density(model, args)

    # in chunks of draws: 20,000 draws of a 100,000-row model's log density at once would hold
    # 2e9 floats
    rows = max((int(np.size(a)) for a in jax.tree_util.tree_leaves(args)), default=1)  # no data: 1
    chunk = max(1, min(ELBO_DRAWS, 2**26 // max(rows, 1)))
    log_p = jax.lax.map(lambda z: log_density(model, args, {}, z)[0], draws, batch_size=chunk)
    values = np.asarray(log_p - log_q, np.float64)
    return float(values.mean()), float(values.std(ddof=1) / np.sqrt(values.size))


# A worker that has not finished by then is stopped and run again, once more at most. In the
# fiftieth session 3 of about 10 workers of `wishart_precision` hung with no CPU used while
# scoring SVI's answer: jaxlib's batched float64 triangular solve (`lapack_dtrsm_ffi`, 20,000
# draws, `ParallelBatchMap`) waited on tasks of XLA's thread pool that never ran (gdb: every
# pool worker idle); not seen in grepvi's fits of the model (8 of 8, float32, a few draws).
WORKER_TIMEOUT = 600
WORKER_ATTEMPTS = 2


def _run(contender, model, seed, fresh_caches=False, warm_cache=False):
    """One subprocess for ``contender`` (or several, comma-separated: one process, run in
    that order); its records (a list for several). ``warm_cache``: the subprocess run twice
    with one compilation cache, the second run's records."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "record.json"
        # a fresh, empty compilation cache for each contender: every program is compiled
        env = {**os.environ, "GREPVI_COMPILATION_CACHE": str(Path(folder) / "jax-cache")}
        command = [sys.executable, __file__, "--worker", contender, model, str(out), "--seed", str(seed)]
        if fresh_caches:
            command.append("--fresh-caches")
        if warm_cache:
            command.append("--warm-cache")
            warming = subprocess.run(
                command,
                env={**env, "TIME_TO_ANSWER_T0": repr(time.time())},
                capture_output=True,
                timeout=WORKER_TIMEOUT,
            )
            if warming.returncode != 0:
                print(f"{model}: the warming run failed (exit {warming.returncode})", file=sys.stderr)
        env["TIME_TO_ANSWER_T0"] = repr(time.time())
        for attempt in range(WORKER_ATTEMPTS):
            try:
                completed = subprocess.run(
                    command, env=env, capture_output=True, text=True, timeout=WORKER_TIMEOUT
                )
                break
            except subprocess.TimeoutExpired:
                print(f"{model}: the worker hung (attempt {attempt + 1}); run again", file=sys.stderr)
                completed = subprocess.CompletedProcess(command, 124, "", "timed out")
        if completed.returncode != 0:
            print(completed.stderr[-3000:], file=sys.stderr)
            code = completed.returncode
            failed = [{"contender": c, "model": model, "error": code} for c in contender.split(",")]
            return failed if "," in contender else failed[0]
        records = json.loads(out.read_text())
        return records if "," in contender else records[0]


def _distance(record, reference):
    import numpy as np

    worst = 0.0
    for name, mean in record["mean"].items():
        sd = np.asarray(reference["sd"][name])
        d = np.abs(np.asarray(mean) - np.asarray(reference["mean"][name]))
        # elements NUTS holds fixed (a correlation matrix's unit diagonal, sd 0) are left out;
        # before, their 0 / 0 made the site's maximum NaN, which max() passed over whole
        fixed = sd == 0.0
        d = np.where(fixed, 0.0, d / np.where(fixed, 1.0, sd))
        worst = max(worst, float(d.max()))
    return worst


# the benchmark sets beside the textbook twelve: flag -> (module, its dict, help)
MODEL_SETS = {
    "fresh": ("fresh_models", "FRESH_MODELS", "the ten of fresh_models.py"),
    "unseen": ("unseen_models", "UNSEEN_MODELS", "the six of unseen_models.py"),
    "corners": ("corner_models", "CORNER_MODELS", "the twenty-three of corner_models.py"),
    "edges": ("edge_models", "EDGE_MODELS", "the ten of edge_models.py"),
    "frontier": ("frontier_models", "FRONTIER_MODELS", "the twelve of frontier_models.py"),
    "outliers": ("outlier_models", "OUTLIER_MODELS", "the twelve of outlier_models.py"),
    "user": ("user_models", "USER_MODELS", "the ten of user_models.py"),
    "probe": ("probe_models", "PROBE_MODELS", "the ten of probe_models.py"),
    "classic": ("classic_models", "CLASSIC_MODELS", "the nine of classic_models.py"),
    "held-out": ("held_out_models", "HELD_OUT_MODELS", "the twelve of held_out_models.py"),
    "examples": ("example_models", "EXAMPLE_MODELS", "the eight of example_models.py"),
    "supports": ("support_models", "SUPPORT_MODELS", "the eleven of support_models.py"),
    "blind": ("blind_models", "BLIND_MODELS", "the thirteen of blind_models.py"),
    "bugs": ("bugs_models", "BUGS_MODELS", "the seven of bugs_models.py"),
    "tutorials": ("tutorial_models", "TUTORIAL_MODELS", "the nine of tutorial_models.py"),
    "applied": ("applied_models", "APPLIED_MODELS", "the ten of applied_models.py"),
    "rethinking": ("rethinking_models", "RETHINKING_MODELS", "the eight of rethinking_models.py"),
    "ridges": ("ridge_models", "RIDGE_MODELS", "the six of ridge_models.py"),
    "scales": ("scale_models", "SCALE_MODELS", "the six of scale_models.py"),
    "medium": ("medium_models", "MEDIUM_MODELS", "the ten of medium_models.py"),
    "moving": ("moving_support_models", "MOVING_MODELS", "the five of moving_support_models.py"),
    "reviewer": ("reviewer_models", "REVIEWER_MODELS", "the ten of reviewer_models.py"),
    "outsider": ("outsider_models", "OUTSIDER_MODELS", "the ten of outsider_models.py"),
    "stranger": ("stranger_models", "STRANGER_MODELS", "the ten of stranger_models.py"),
    "discrete": ("discrete_models", "DISCRETE_MODELS", "the four of discrete_models.py"),
}


def main(argv=None):
    sys.path.insert(0, str(HERE))
    from textbook_models import ALL_MODELS, MODELS, mendel_log_evidence

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", choices=list(ALL_MODELS), help="default: the textbook twelve")
    parser.add_argument(
        "--contenders", nargs="+", default=list(CONTENDERS), choices=CONTENDERS + EXTRA_CONTENDERS
    )
    for flag, (_, _, help_text) in MODEL_SETS.items():
        parser.add_argument(f"--{flag}", action="store_true", help=f"{help_text} (without --models)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write every record to this file")
    parser.add_argument("--worker", nargs=3, metavar=("CONTENDER", "MODEL", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--same-process",
        action="store_true",
        help="every contender of a model in one process, in the order of --contenders",
    )
    parser.add_argument(
        "--fresh-caches",
        action="store_true",
        help="with --same-process: JAX's in-memory caches emptied before each contender",
    )
    parser.add_argument(
        "--warm-cache",
        action="store_true",
        help="a second run of each process, the first one having filled one persistent compilation cache",
    )
    args = parser.parse_args(argv)
    if args.worker:
        _worker(*args.worker, seed=args.seed, fresh_caches=args.fresh_caches, warm_cache=args.warm_cache)
        return
    if args.models is None:
        chosen = [flag for flag in MODEL_SETS if getattr(args, flag.replace("-", "_"))]
        if chosen:
            module, name, _ = MODEL_SETS[chosen[0]]
            args.models = list(getattr(importlib.import_module(module), name))
        else:
            args.models = list(MODELS)

    records = []
    for model in args.models:
        if args.same_process:  # one process, the contenders one after another in the order given
            together = _run(",".join(args.contenders), model, args.seed, args.fresh_caches, args.warm_cache)
            if isinstance(together, dict):  # one contender: its record alone
                together = [together]
            results = {record["contender"]: record for record in together}
        else:
            results = {c: _run(c, model, args.seed, warm_cache=args.warm_cache) for c in args.contenders}
        reference = results.get("nuts") or _run("nuts", model, args.seed)
        records.extend(results.values())
        print(f"\n{model}: {ALL_MODELS[model].description}")
        columns = f"{'time s':>7} {'process s':>9} {'max|dmean|/sd':>14} {'ELBO':>16}"
        header = f"  {'contender':<16} {columns}  note"
        print(header)
        for contender, record in results.items():
            if "error" in record:
                error = record["error"]
                print(f"  {contender:<16} failed ({f'exit {error}' if isinstance(error, int) else error})")
                continue
            distance = ""
            if contender != "nuts" and "error" not in reference:
                distance = f"{_distance(record, reference):.3f}"
            elbo = f"{record['elbo']:.2f} +- {record['elbo_se']:.2f}" if "elbo" in record else ""
            note = ""
            if contender.startswith("grepvi"):
                note = f"{'converged' if record['converged'] else 'NOT converged'}, {record['iterations']} it"
                note += f", first window at {record['first_window']:.2f} s"
                if record.get("coupled"):
                    note += ", coupled"
                if record.get("control_variate"):
                    note += f", {record['control_variate']} control variate"
                if record.get("longest_pause", 0.0) > 0.5:
                    note += f", a {record['longest_pause']:.2f} s pause between windows"
            times = f"{record['time']:>7.2f} {record['process']:>9.2f}"
            print(f"  {contender:<16} {times} {distance:>14} {elbo:>16}  {note}")
        ok = {c: r for c, r in results.items() if "error" not in r}
        if "grepvi" in ok:
            mine = ok["grepvi"]["time"]
            ratios = [f"grepvi/{c.upper()} = {mine / ok[c]['time']:.2f}" for c in ok if c != "grepvi"]
            if ratios:
                print("  time ratios: " + ", ".join(ratios))
        if model == "mendel":
            print(f"  exact log evidence: {mendel_log_evidence():.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
