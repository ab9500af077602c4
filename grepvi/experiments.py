"""The paper's experiments: a model, a data set and an estimator wired into a resumable run.

Ruiz, Titsias & Blei (2016), Section 5: the sparse gamma DEF on Olivetti faces and NIPS 2011,
beta-gamma matrix factorization on binarized MNIST and Omniglot; G-REP, BBVI and ADVI with the
step-size sequence of Eq. 9, ``eta`` chosen from {0.1, 0.5, 1, 5} by the best final ELBO.

* :class:`RunConfig`: every option of one run (what ``config.json`` records).
* :func:`fit_run`: one run into a folder (checkpoints, resume, trace, metrics, figures).

Several runs (the eta search, comparisons, the samples sweep, the demo) are in
:mod:`grepvi.studies`; the options in :mod:`grepvi.config`.
"""

import dataclasses
import io
import math
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from grepvi import controller, driver, evaluation, fitting
from grepvi.config import ESTIMATORS, MODELS, SYNTHETIC, RunConfig
from grepvi.controller import AdaptiveSettings
from grepvi.errors import DataError, NumericalError
from grepvi.estimators.base import get_estimator
from grepvi.fitting import DEFAULT_MAX_STEPS
from grepvi.models.registry import get_model_spec
from grepvi.paper import ETA_GRID, PAPER_ETA
from grepvi.run_files import (
    METRICS_FILE,
    PARAMS_FILE,
    RECONSTRUCTION_FILE,
    RunDirectory,
    TraceRecorder,
    atomic_write_bytes,
    environment_versions,
    read_json,
    save_params,
    write_json,
)
from grepvi.runs import (
    CheckpointObserver,
    RunInterrupted,
    RunRecorder,
    SignalCatcher,
    median_time_per_iteration,
)

__all__ = [
    "MODELS",
    "ESTIMATORS",
    "ETA_GRID",
    "PAPER_ETA",
    "RunConfig",
    "load_data",
    "build_model",
    "make_estimator",
    "fit_run",
]


def _builder(config: RunConfig):
    spec = get_model_spec(config.model)
    return lambda data: spec.build(data, config)


def _synthetic(config: RunConfig):
    """Train/test rows simulated from the model's prior (``Model.sample``), shared weights."""
    from grepvi.data import Dataset

    spec = get_model_spec(config.model)
    num_train, num_test, num_columns = config.synthetic_size
    zeros = np.zeros((num_train + num_test, num_columns), np.float32)
    model = spec.build(zeros, config, spec.synthetic_hyperparameters)
    data, _ = model.sample(jax.random.fold_in(jax.random.key(config.seed), 2016))
    data = np.asarray(data, np.float32)
    side = int(round(math.sqrt(num_columns)))
    return Dataset(
        name=SYNTHETIC,
        train=data[:num_train],
        test=data[num_train:],
        likelihood=spec.likelihood,
        image_shape=(side, side) if side * side == num_columns else None,
        heldout_entries=False,
        info={
            "source": f"simulated from the {config.model} (Model.sample), seed {config.seed}",
            "generating_hyperparameters": dict(model.hyperparameters),
            "num_train": num_train,
            "num_test": num_test,
            "num_columns": num_columns,
        },
    )


def load_data(config: RunConfig):
    """The :class:`~grepvi.data.Dataset` of ``config`` (loaded, or simulated for "synthetic")."""
    if str(config.dataset).lower() == SYNTHETIC:
        return _synthetic(config)
    from grepvi.data import DATASET_NAMES, load_dataset

    expected = get_model_spec(config.model).likelihood
    # A file's values are checked against the model's likelihood, not one inferred from them.
    options = {} if str(config.dataset).lower() in DATASET_NAMES else {"likelihood": expected}
    dataset = load_dataset(config.dataset, config.data_dir, seed=config.seed, **options)
    if dataset.likelihood != expected:
        raise DataError(
            f"dataset {config.dataset}: the {config.model} model needs {expected} data, found "
            f"{dataset.likelihood} data (use the "
            f"{'beta-gamma-mf' if expected == 'poisson' else 'sparse-gamma-def'} model)"
        )
    return dataset


def build_model(config: RunConfig, data):
    return _builder(config)(data)


def make_estimator(config: RunConfig):
    """The estimator of the run; ADVI's own ELBO draws are off (the loop evaluates the ELBO)."""
    options = {}
    if config.num_samples is not None:
        options["num_samples"] = config.num_samples
    if config.compute_variance:
        options["compute_variance"] = True
    if config.estimator == "advi":
        options["num_elbo_samples"] = 0
    return get_estimator(config.estimator, **options)


# --- one run --------------------------------------------------------------------------------------


def _say(message: str, quiet: bool) -> None:
    if not quiet:
        print(message, file=sys.stderr, flush=True)


def fit_run(
    config: RunConfig, out, *, resume: bool = False, overwrite: bool = False, quiet: bool = False
) -> dict:
    """Runs one experiment into the folder ``out`` and returns its metrics.

    Everything that can be refused (options, data, the folder's contents, the checkpoint) is
    checked before the folder is touched. SIGINT writes a checkpoint and the metrics so far and
    raises :class:`~grepvi.runs.RunInterrupted`.
    """
    config = config.validate()
    identity = config.identity()
    directory = RunDirectory(out)
    mode = directory.check(identity, resume=resume, overwrite=overwrite)
    if mode == "resume" and directory.file(METRICS_FILE).exists():
        metrics = read_json(directory.file(METRICS_FILE))
        if metrics.get("finished"):
            _say(f"{out}: the run is already finished; nothing to do", quiet)
            return metrics

    dataset = load_data(config)
    model = build_model(config, dataset.train)
    estimator = make_estimator(config)
    families = estimator.adapt_families(model.latents())
    target = model.target(families)
    adaptive = config.step_size is None
    settings = None
    if adaptive:
        settings = AdaptiveSettings(**({"tolerance": config.tolerance} if config.tolerance else {}))
        if config.num_steps is None and config.time_budget is None:
            config = dataclasses.replace(config, num_steps=DEFAULT_MAX_STEPS)
    keep_params = config.elbo_samples is not None and config.elbo_every == 1
    prepared = fitting.setup(
        target,
        estimator,
        seed=config.seed,
        data=model.data,
        step_size=config.step_size,
        settings=settings,
        chunk_size=config.window(),
        max_steps=config.num_steps,
        time_budget=config.time_budget,
        keep_params=keep_params,
        batch_size=config.batch_size,
        model=model,
        parallel=config.parallel,
    )
    run_state = prepared.initial
    trace = TraceRecorder()
    if mode == "resume":
        restored = directory.load_checkpoint(prepared.initial, identity)
        if restored is not None:
            run_state, trace, _ = restored
            run_state = driver.resumable(run_state)
            _say(
                f"resuming {out} at iteration {int(run_state.controller.iterations)} "
                f"({float(run_state.wall_time):.1f} s)",
                quiet,
            )
    else:
        directory.clear()
    directory.prepare()
    if mode == "fresh" or not directory.file("config.json").exists():
        write_json(
            directory.file("config.json"),
            {
                "identity": identity,
                "options": config.options(),
                "seed": config.seed,
                "versions": environment_versions(),
                "dataset": {
                    "name": dataset.name,
                    "likelihood": dataset.likelihood,
                    "train_shape": list(dataset.train.shape),
                    "test_shape": list(dataset.test.shape),
                    "image_shape": None if dataset.image_shape is None else list(dataset.image_shape),
                    "heldout_entries": dataset.heldout_entries,
                    "info": dataset.info,
                },
                "estimator_options": estimator.options,
                "latent_shapes": {name: list(shape) for name, shape in model.latent_shapes.items()},
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            },
        )

    recorder = RunRecorder(
        trace,
        names=tuple(sorted(target.families)),
        wall_time=float(run_state.wall_time),
        elbo_fn=_elbo_evaluator(config, target, model.data),
        elbo_every=config.elbo_every,
        window_eval_fn=_perplexity_evaluator(config, dataset, model, target),
    )
    checkpoints = CheckpointObserver(
        lambda state, rows: directory.save_checkpoint(state, rows, identity, {}),
        trace,
        every=config.checkpoint_every,
        seconds=config.checkpoint_seconds,
    )
    observers = [recorder, checkpoints]
    if not quiet:
        observers.append(
            driver.ProgressObserver(
                config.num_steps, f"{config.estimator} {dataset.name}", int(run_state.controller.iterations)
            )
        )
    with SignalCatcher() as signals:
        observers.append(signals)
        try:
            final = driver.run(
                prepared.window,
                run_state,
                prepared.plan,
                data=prepared.data,
                max_steps=config.num_steps,
                time_budget=config.time_budget,
                observers=observers,
            )
        except NumericalError:
            checkpoints.write_last()  # the run stalled: keep what it did, then say so
            raise
    directory.save_checkpoint(final, trace, identity, {})
    plan = prepared.plan
    convergence = controller.convergence(final.controller, plan.candidates, plan.settings, plan.distance)
    params = controller.answer(final.controller, final.loop, settings=plan.settings)
    interrupted = convergence.reason == "interrupted"
    arrays = trace.as_arrays()
    elbo = arrays.get("elbo", np.zeros(0))
    metrics = {
        "estimator": config.estimator,
        "model": config.model,
        "dataset": dataset.name,
        "eta": config.step_size,
        "procedure": "default" if adaptive else "eq9",
        "iterations": convergence.num_iterations,
        "training_time_s": float(final.wall_time),
        "time_per_iteration_s": median_time_per_iteration(arrays),
        "final_elbo": evaluation.best_final_elbo(elbo),
        "last_elbo": float(elbo[~np.isnan(elbo)][-1]) if np.any(~np.isnan(elbo)) else None,
        "skipped_steps": recorder.skipped,
        "finished": False,
        "interrupted": interrupted,
    }
    if adaptive:
        metrics["convergence"] = convergence._asdict()
        metrics["eta"] = convergence.step_size
    if "perplexity" in arrays:
        finite = arrays["perplexity"][np.isfinite(arrays["perplexity"])]
        metrics["perplexity_last"] = float(finite[-1]) if finite.size else math.nan
    if interrupted:
        write_json(directory.file(METRICS_FILE), metrics)
        raise RunInterrupted(
            f"interrupted at iteration {metrics['iterations']}; checkpoint and metrics so far written to "
            f"{out}; continue with the same call and resume=True"
        )

    save_params(directory.file(PARAMS_FILE), params)
    _say(f"evaluating {config.estimator} on the test set ({config.eval_samples} posterior draws)", quiet)
    metrics.update(_evaluate(config, dataset, model, estimator, target.families, params, directory))
    metrics["finished"] = True
    write_json(directory.file(METRICS_FILE), metrics)
    from grepvi import report

    report.run_figures(directory.path)
    return metrics


def _elbo_evaluator(config: RunConfig, target, data):
    """``(iterations, params per iteration) -> ELBOs`` of ``config.elbo_samples`` draws (the
    evaluation-only ELBO of ``--elbo-samples``), or None."""
    if config.elbo_samples is None:
        return None
    num = config.elbo_samples
    eval_key = jax.random.fold_in(jax.random.key(config.seed), 1_000_003)

    @jax.jit
    def elbo_program(iterations, params_per_iteration, data):
        def one(args):
            iteration, params = args
            key = jax.random.fold_in(eval_key, iteration)
            return evaluation.elbo_estimate(key, params, target, num, data)

        return jax.lax.map(one, (jnp.asarray(iterations, jnp.int32), params_per_iteration))

    return lambda iterations, params: elbo_program(iterations, params, data)


def _perplexity_evaluator(config: RunConfig, dataset, model, target):
    """``(loop state) -> {"perplexity": value}`` after each window, for data sets with held-out
    entries (NIPS), or None."""
    if not dataset.heldout_entries:
        return None
    eval_key = jax.random.fold_in(jax.random.key(config.seed), 1_000_003)
    heldout = jnp.asarray(dataset.test, jnp.float32)

    @jax.jit
    def perplexity_one(params, iteration, heldout):
        key = jax.random.fold_in(jax.random.fold_in(eval_key, 7), iteration)
        latents = evaluation.sample_latents(key, target.families, params)
        return evaluation.perplexity_from_rates(model.mean_observation(latents), heldout)

    return lambda state, iteration: {"perplexity": perplexity_one(state.params, iteration, heldout)}


def _refit_estimator(config):
    same = config.refit_estimator == config.estimator
    return make_estimator(
        dataclasses.replace(
            config,
            estimator=config.refit_estimator,
            num_samples=config.num_samples if same else None,
            compute_variance=False,
        )
    )


def _evaluate(config, dataset, model, estimator, families, params, directory) -> dict:
    key = jax.random.fold_in(jax.random.key(config.seed), 2_000_003)
    test_key, perplexity_key, reconstruction_key = jax.random.split(key, 3)
    out = {}
    start = time.perf_counter()
    if dataset.heldout_entries:
        # Held-out entries of the training rows: no refit.
        heldout = model.prepare_data(dataset.test)
        x = heldout["x"]
        log_space = bool(model.log_space)
        loglik = evaluation.predictive_loglik(
            test_key,
            model.log_space_observation_loglik if log_space else model.observation_loglik,
            families,
            params,
            config.eval_samples,
            data=heldout,
            log_space=log_space,
        )
        perplexities = evaluation.heldout_perplexity(
            perplexity_key, model, families, params, x, config.eval_samples
        )
        out["perplexity"] = float(np.mean(perplexities))
        out["perplexity_std"] = float(np.std(perplexities, ddof=1)) if perplexities.size > 1 else 0.0
        out["refit_steps"] = 0
    else:
        loglik = evaluation.heldout_loglik(
            test_key,
            model,
            families,
            params,
            dataset.test,
            _refit_estimator(config),
            num_samples=config.eval_samples,
            refit_steps=config.refit_steps,
            step_size=config.refit_step_size,
        )
        out["refit_steps"] = config.refit_steps
        out["refit_estimator"] = config.refit_estimator
        out["refit_final_elbo"] = evaluation.best_final_elbo(loglik.refit_elbo)
    out["test_loglik_per_entry"] = loglik.as_dict()
    out["test_loglik_logmeanexp"] = loglik.logmeanexp
    out["eval_samples"] = config.eval_samples
    out["evaluation_time_s"] = time.perf_counter() - start
    if dataset.image_shape is not None:
        # Supplement E.2: one posterior draw, then the mean of the observations given it.
        count = min(10, dataset.train.shape[0])
        latents = evaluation.sample_latents(reconstruction_key, families, params)
        buffer = io.BytesIO()
        np.savez(
            buffer,
            true=np.asarray(dataset.train[:count], np.float32),
            reconstruction=np.asarray(model.mean_observation(latents), np.float32)[:count],
            image_shape=np.asarray(dataset.image_shape),
        )
        atomic_write_bytes(directory.file(RECONSTRUCTION_FILE), buffer.getvalue())
    return out
