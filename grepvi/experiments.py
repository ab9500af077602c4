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

from grepvi import evaluation
from grepvi.adaptive import AdaptiveSettings, get_step_size
from grepvi.config import ESTIMATORS, MODELS, SYNTHETIC, RunConfig
from grepvi.errors import DataError
from grepvi.estimators.base import get_estimator
from grepvi.fitting import DEFAULT_MAX_STEPS, adaptive_candidates
from grepvi.inference import _check_target, init
from grepvi.models.registry import get_model_spec
from grepvi.optim import advi_stepsize
from grepvi.paper import ETA_GRID, PAPER_ETA
from grepvi.runs import (
    METRICS_FILE,
    PARAMS_FILE,
    RECONSTRUCTION_FILE,
    RunDirectory,
    RunInterrupted,
    TraceRecorder,
    atomic_write_bytes,
    environment_versions,
    median_time_per_iteration,
    read_json,
    save_params,
    train,
    train_adaptive,
    write_json,
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
    if adaptive:
        settings = AdaptiveSettings(**({"tolerance": config.tolerance} if config.tolerance else {}))
        if config.num_steps is None and config.time_budget is None:
            config = dataclasses.replace(config, num_steps=DEFAULT_MAX_STEPS)
        candidates = adaptive_candidates(
            jax.random.key(config.seed), target, estimator, settings, data=model.data
        )
        state = candidates[0].state
    else:
        optimizer = advi_stepsize(config.step_size)
        state = init(jax.random.key(config.seed), target, optimizer)
        _check_target(target, state.params, model.data)

    trace = TraceRecorder()
    wall_time = 0.0
    if mode == "resume" and adaptive:
        checkpoint_meta = directory.checkpoint_meta()
        direction = checkpoint_meta.get("direction")
        chosen = [c for c in candidates if c.label == direction]
        chosen = chosen[:1]
        if checkpoint_meta and not chosen:  # refuses a checkpoint of another configuration
            directory.load_checkpoint(candidates[0].state, identity)
        if chosen:
            restored = directory.load_checkpoint(chosen[0].state, identity)
            if restored is not None:
                state, trace, meta = restored
                wall_time = float(meta.get("wall_time", 0.0))
                candidates = [
                    chosen[0]._replace(
                        state=state, step_size=float(meta.get("step_size", chosen[0].step_size))
                    )
                ]
                _say(f"resuming {out} at iteration {int(state.iteration)} ({direction} steps)", quiet)
    elif mode == "resume":
        restored = directory.load_checkpoint(state, identity)
        if restored is not None:
            state, trace, meta = restored
            wall_time = float(meta.get("wall_time", 0.0))
            _say(f"resuming {out} at iteration {int(state.iteration)} ({wall_time:.1f} s of training)", quiet)
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

    eval_key = jax.random.fold_in(jax.random.key(config.seed), 1_000_003)
    elbo_fn = None
    if config.elbo_samples is not None:
        num = config.elbo_samples

        @jax.jit
        def elbo_program(iterations, params_per_iteration, data):
            def one(args):
                iteration, params = args
                key = jax.random.fold_in(eval_key, iteration)
                return evaluation.elbo_estimate(key, params, target, num, data)

            return jax.lax.map(one, (jnp.asarray(iterations, jnp.int32), params_per_iteration))

        def elbo_fn(iterations, params_per_iteration):
            return elbo_program(iterations, params_per_iteration, model.data)

    chunk_eval_fn = None
    if dataset.heldout_entries:
        heldout = jnp.asarray(dataset.test, jnp.float32)

        @jax.jit
        def perplexity_one(params, iteration, heldout):
            key = jax.random.fold_in(jax.random.fold_in(eval_key, 7), iteration)
            latents = evaluation.sample_latents(key, target.families, params)
            return evaluation.perplexity_from_rates(model.mean_observation(latents), heldout)

        def chunk_eval_fn(current):
            return {"perplexity": perplexity_one(current.params, current.iteration, heldout)}

    def checkpoint_fn(current, current_trace, current_wall_time):
        directory.save_checkpoint(current, current_trace, identity, {"wall_time": current_wall_time})

    convergence = None
    if adaptive:

        def adaptive_checkpoint(current, current_trace, current_wall_time):
            rho = get_step_size(current.opt_state)
            label = "natural" if hasattr(current.opt_state, "step_size") else "adam"
            label = next((c.label for c in candidates if c.label.startswith(label)), label)
            directory.save_checkpoint(
                current,
                current_trace,
                identity,
                {"wall_time": wall_time + current_wall_time, "direction": label, "step_size": rho},
            )

        result, convergence = train_adaptive(
            candidates,
            target.families,
            settings,
            num_steps=None if config.num_steps is None else config.num_steps - int(state.iteration),
            time_budget=None if config.time_budget is None else max(config.time_budget - wall_time, 1e-3),
            trace=trace,
            chunk_eval_fn=chunk_eval_fn,
            checkpoint_fn=adaptive_checkpoint,
            checkpoint_seconds=config.checkpoint_seconds,
            progress=not quiet,
            description=f"{config.estimator} {dataset.name}",
        )
        result = result._replace(wall_time=wall_time + result.wall_time)
    else:
        result = _train_fixed(
            state,
            target,
            estimator,
            optimizer,
            config,
            trace,
            wall_time,
            elbo_fn,
            chunk_eval_fn,
            checkpoint_fn,
            quiet,
            dataset,
            model.data,
        )
    arrays = result.trace.as_arrays()
    elbo = arrays.get("elbo", np.zeros(0))
    metrics = {
        "estimator": config.estimator,
        "model": config.model,
        "dataset": dataset.name,
        "eta": config.step_size,
        "procedure": "default" if adaptive else "eq9",
        "iterations": int(result.state.iteration),
        "training_time_s": result.wall_time,
        "time_per_iteration_s": median_time_per_iteration(arrays),
        "final_elbo": evaluation.best_final_elbo(elbo),
        "last_elbo": float(elbo[~np.isnan(elbo)][-1]) if np.any(~np.isnan(elbo)) else None,
        "skipped_steps": int(result.state.num_skipped),
        "finished": False,
        "interrupted": result.interrupted,
    }
    if convergence is not None:
        metrics["convergence"] = convergence._asdict()
        metrics["eta"] = convergence.step_size
        metrics["iterations"] = convergence.num_iterations
    if "perplexity" in arrays:
        finite = arrays["perplexity"][np.isfinite(arrays["perplexity"])]
        metrics["perplexity_last"] = float(finite[-1]) if finite.size else math.nan
    if result.interrupted:
        write_json(directory.file(METRICS_FILE), metrics)
        raise RunInterrupted(
            f"interrupted at iteration {metrics['iterations']}; checkpoint and metrics so far written to "
            f"{out}; continue with the same call and resume=True"
        )

    save_params(directory.file(PARAMS_FILE), result.state.params)
    _say(f"evaluating {config.estimator} on the test set ({config.eval_samples} posterior draws)", quiet)
    metrics.update(
        _evaluate(config, dataset, model, estimator, target.families, result.state.params, directory)
    )
    metrics["finished"] = True
    write_json(directory.file(METRICS_FILE), metrics)
    from grepvi import report

    report.run_figures(directory.path)
    return metrics


def _train_fixed(
    state,
    target,
    estimator,
    optimizer,
    config,
    trace,
    wall_time,
    elbo_fn,
    chunk_eval_fn,
    checkpoint_fn,
    quiet,
    dataset,
    data,
):
    """The paper's schedule (Eq. 9 with ``config.step_size``) for ``config``'s caps."""
    return train(
        state,
        target,
        estimator,
        optimizer,
        num_steps=config.num_steps,
        time_budget=config.time_budget,
        chunk_size=config.chunk_size,
        trace=trace,
        wall_time=wall_time,
        elbo_fn=elbo_fn,
        elbo_every=config.elbo_every,
        chunk_eval_fn=chunk_eval_fn,
        checkpoint_fn=checkpoint_fn,
        checkpoint_every=config.checkpoint_every,
        checkpoint_seconds=config.checkpoint_seconds,
        progress=not quiet,
        description=f"{config.estimator} {dataset.name}",
        data=data,
    )


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
