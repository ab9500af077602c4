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
import signal
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from grepvi import evaluation
from grepvi.adaptive import AdaptiveSettings, Convergence, get_step_size
from grepvi.config import ESTIMATORS, MODELS, SYNTHETIC, RunConfig
from grepvi.errors import ConfigError, DataError
from grepvi.estimators.base import get_estimator
from grepvi.fitting import DEFAULT_MAX_STEPS, adaptive_candidates
from grepvi.inference import _check_target, init
from grepvi.models.registry import get_model_spec
from grepvi.optim import advi_stepsize
from grepvi.paper import ETA_GRID, PAPER_ETA
from grepvi.run_files import RunFolderError, iterations_done
from grepvi.runs import (
    METRICS_FILE,
    PARAMS_FILE,
    RECONSTRUCTION_FILE,
    RunDirectory,
    RunInterrupted,
    TraceRecorder,
    TrainResult,
    atomic_write_bytes,
    environment_versions,
    median_time_per_iteration,
    read_json,
    remaining_steps,
    save_params,
    stop_signal,
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

    Everything that can be refused (options, the folder's contents and writability, its lock,
    the checkpoint, the data) is checked before the folder is changed; the folder must be new,
    empty or a grepvi run (:class:`~grepvi.run_files.RunDirectory`), and the run holds its lock
    until it returns. SIGINT or SIGTERM writes a checkpoint and the metrics so far and raises
    :class:`~grepvi.runs.RunInterrupted`; a failed write raises
    :class:`~grepvi.run_files.RunFolderError` with the first error and the resume hint.
    """
    config = config.validate()
    identity = config.identity()
    directory = RunDirectory(out)
    if resume and overwrite:
        raise ConfigError("resume=True and overwrite=True exclude each other; pass one of them")
    if not directory.holds_run():  # a file, or a folder that is not a run: refused before the lock
        directory.check(identity, resume=resume, overwrite=overwrite)
    directory.check_writable()
    with directory:  # the run's lock, held until it returns
        if directory.stale_lock and directory.stale_lock.get("pid"):
            _say(
                f"{out}: taking over the lock left by pid {directory.stale_lock['pid']} "
                "(that process has ended)",
                quiet,
            )
        mode = directory.check(identity, resume=resume, overwrite=overwrite)
        return _fit_locked(config, identity, directory, mode, out, quiet)


def _fit_locked(config, identity, directory, mode, out, quiet) -> dict:
    so_far = {}
    if mode == "resume" and directory.file(METRICS_FILE).exists():
        so_far = read_json(directory.file(METRICS_FILE))
        if so_far.get("finished"):
            _say(f"{out}: the run is already finished; nothing to do", quiet)
            return so_far
    checkpoint = directory.read_checkpoint() if mode == "resume" else None  # verified: before loading
    if checkpoint is not None:
        directory.check_identity(checkpoint, identity)

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
    done = 0
    if checkpoint is not None and adaptive:
        direction = checkpoint.meta.get("direction")
        chosen = [c for c in candidates if c.label == direction][:1]
        if not chosen:
            raise ConfigError(
                f"{checkpoint.path}: the checkpoint continues the update rule {direction!r}, which this "
                f"configuration does not have ({', '.join(c.label for c in candidates)}); pass "
                "--overwrite to start again"
            )
        state, trace, meta = directory.restore(checkpoint, chosen[0].state, identity)
        wall_time = float(meta.get("wall_time", 0.0))
        candidates = [
            chosen[0]._replace(state=state, step_size=float(meta.get("step_size", chosen[0].step_size)))
        ]
        done = checkpoint.iterations_done
        _say(f"resuming {out} at iteration {done} ({direction} steps)", quiet)
    elif checkpoint is not None:
        state, trace, meta = directory.restore(checkpoint, state, identity)
        wall_time = float(meta.get("wall_time", 0.0))
        done = checkpoint.iterations_done
        _say(f"resuming {out} at iteration {done} ({wall_time:.1f} s of training)", quiet)
    elif mode == "resume":
        _say(f"{out}: the run stopped before its first checkpoint; starting from iteration 0", quiet)
    else:
        directory.clear()
    try:
        return _write_run(
            config, identity, directory, mode, out, quiet, dataset, model, estimator, target, adaptive,
            candidates if adaptive else None, settings if adaptive else None,
            None if adaptive else optimizer, state, trace, wall_time, done, so_far,
        )  # fmt: skip
    except OSError as error:
        raise RunFolderError(
            f"{out}: writing the run's files failed: {error}. The files written before it are kept "
            f"(the last checkpoint: {_last_checkpoint(directory)}); fix the cause (space, permissions), "
            "then continue with the same call and resume=True"
        ) from error


def _last_checkpoint(directory) -> str:
    try:
        checkpoint = directory.read_checkpoint()
    except ConfigError:
        return "unreadable"
    return "none" if checkpoint is None else f"iteration {checkpoint.iterations_done}"


def _write_run(
    config, identity, directory, mode, out, quiet, dataset, model, estimator, target, adaptive,
    candidates, settings, optimizer, state, trace, wall_time, done, so_far,
):  # fmt: skip
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
    remaining = remaining_steps(config.num_steps, done)  # counted by the run's trace
    budget_spent = config.time_budget is not None and done and wall_time >= config.time_budget
    training_done = bool(so_far.get("training_finished")) or remaining == 0 or budget_spent
    if training_done:  # e.g. interrupted during the evaluation: evaluate again, train no more
        _say(f"{out}: training already reached its end at iteration {done}; evaluating", quiet)
        result = TrainResult(state, trace, wall_time, [], False, True)
        if so_far.get("convergence"):
            stored = so_far["convergence"]
            convergence = Convergence(
                **{k: math.nan if stored.get(k) is None else stored[k] for k in Convergence._fields}
            )
    elif adaptive:

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
            num_steps=remaining,
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
        "iterations": max(int(result.state.iteration), iterations_done(result.trace.as_arrays())),
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
        metrics["iterations"] = max(convergence.num_iterations, iterations_done(arrays))
    if "perplexity" in arrays:
        finite = arrays["perplexity"][np.isfinite(arrays["perplexity"])]
        metrics["perplexity_last"] = float(finite[-1]) if finite.size else math.nan
    if result.interrupted:
        write_json(directory.file(METRICS_FILE), metrics)
        number = stop_signal() or signal.SIGINT
        raise RunInterrupted(
            f"interrupted at iteration {metrics['iterations']} by {signal.Signals(number).name}; checkpoint "
            f"and metrics so far written to {out}; continue with the same call and resume=True",
            number,
        )

    metrics["training_finished"] = True  # an interrupted evaluation resumes without training more
    write_json(directory.file(METRICS_FILE), metrics)
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
        if config.refit_steps == 0:
            out["refit_final_elbo"] = None
            out["refit_final_elbo_note"] = "not computed: --refit-steps 0"
        else:
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
