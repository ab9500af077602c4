"""The paper's experiments: a model, a data set and an estimator wired into a resumable run.

Ruiz, Titsias & Blei (2016), Section 5: the sparse gamma DEF on Olivetti faces and NIPS 2011,
beta-gamma matrix factorization on binarized MNIST and Omniglot; G-REP, BBVI and ADVI with the
step-size sequence of Eq. 9, ``eta`` chosen from {0.1, 0.5, 1, 5} by the best final ELBO.

* :class:`RunConfig`: every option of one run (what ``config.json`` records).
* :func:`fit_run`: one run into a folder (checkpoints, resume, trace, metrics, figures).

Several runs (the eta search, comparisons, the samples sweep, the demo) are in
:mod:`grepvi.experiments.studies`; the options in :mod:`grepvi.experiments.config`.
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

from grepvi.diagnostics import evaluation
from grepvi.errors import ConfigError, DataError, NumericalError
from grepvi.estimators.base import get_estimator
from grepvi.experiments.config import ESTIMATORS, MODELS, SYNTHETIC, RunConfig
from grepvi.experiments.observers import (
    CheckpointObserver,
    RunInterrupted,
    RunRecorder,
    SignalCatcher,
    median_time_per_iteration,
    stop_signal,
)
from grepvi.experiments.paper import ETA_GRID, PAPER_ETA
from grepvi.experiments.run_files import (
    METRICS_FILE,
    PARAMS_FILE,
    RECONSTRUCTION_FILE,
    RunDirectory,
    RunFolderError,
    TraceRecorder,
    atomic_write_bytes,
    environment_versions,
    read_json,
    remaining_steps,
    save_params,
    write_json,
)
from grepvi.inference import controller, driver, fitting
from grepvi.inference.batch_size import resolve_batch_size
from grepvi.inference.compilation_cache import once_compiler_options
from grepvi.inference.controller import AdaptiveSettings
from grepvi.inference.fitting import DEFAULT_MAX_STEPS
from grepvi.models.registry import get_model_spec

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
    if config.alphabets is not None:  # omniglot (RunConfig.validate)
        names = config.alphabets
        options["alphabets"] = names if names.lower() == "all" else [n.strip() for n in names.split(",")]
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


def say(message: str, quiet: bool) -> None:
    if not quiet:
        print(message, file=sys.stderr, flush=True)


def fit_run(
    config: RunConfig, out, *, resume: bool = False, overwrite: bool = False, quiet: bool = False
) -> dict:
    """Runs one experiment into the folder ``out`` and returns its metrics.

    Everything that can be refused (options, the folder's contents and writability, its lock,
    the checkpoint, the data) is checked before the folder is changed; the folder must be new,
    empty or a grepvi run (:class:`~grepvi.experiments.run_files.RunDirectory`), and the run
    holds its lock until it returns. The run goes through the one loop
    (:func:`grepvi.inference.driver.run`); its checkpoints hold the whole
    :class:`~grepvi.inference.driver.RunState`, so a resumed run continues exactly (bitwise,
    when no time budget sizes its windows). SIGINT or SIGTERM writes a checkpoint and the
    metrics so far and raises :class:`~grepvi.experiments.observers.RunInterrupted`; a failed
    write raises :class:`~grepvi.experiments.run_files.RunFolderError` with the first error and
    the resume hint.
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
            say(
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
            say(f"{out}: the run is already finished; nothing to do", quiet)
            return so_far
    checkpoint = directory.read_checkpoint() if mode == "resume" else None  # verified: before loading
    if checkpoint is not None:
        directory.check_identity(checkpoint, identity)

    dataset = load_data(config)
    started = time.perf_counter()  # a time budget counts the model, setup and compilation
    model = build_model(config, dataset.train)
    estimator = make_estimator(config)
    families = estimator.adapt_families(model.latents())
    target = model.target(families)
    settings = None
    if config.step_size is None:
        settings = AdaptiveSettings(**({"tolerance": config.tolerance} if config.tolerance else {}))
        if config.num_steps is None and config.time_budget is None:
            config = dataclasses.replace(config, num_steps=DEFAULT_MAX_STEPS)
    batch_size = resolve_batch_size(config.batch_size, model, families, estimator, config.parallel)
    if config.batch_size == "auto" and batch_size is not None:
        say(f"minibatch VI: {batch_size} of {model.num_observations} rows a step (--batch-size auto)", quiet)
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
        keep_params=config.elbo_samples is not None and config.elbo_every == 1,
        batch_size=batch_size,
        model=model,
        parallel=config.parallel,
    )
    run_state, trace = prepared.initial, TraceRecorder()
    if checkpoint is not None:
        run_state, trace, _ = directory.restore(checkpoint, prepared.initial, identity)
        run_state = driver.resumable(run_state)
        say(
            f"resuming {out} at iteration {int(run_state.controller.iterations)} "
            f"({float(run_state.wall_time):.1f} s)",
            quiet,
        )
    elif mode == "resume":
        say(f"{out}: the run stopped before its first checkpoint; starting from iteration 0", quiet)
    else:
        directory.clear()
    if checkpoint is None and config.time_budget is not None:  # the setup's seconds are spent
        run_state = run_state._replace(wall_time=np.float64(time.perf_counter() - started))
    try:
        return _write_run(
            config, identity, directory, mode, out, quiet, dataset, model, estimator, target,
            prepared, run_state, trace, so_far,
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


def _training_end(config, run_state, so_far) -> str | None:
    """Why training had already ended before this call (e.g. interrupted during the
    evaluation), or None: a converged run, the cap on iterations (counted by the run), the
    time budget spent."""
    state = run_state.controller
    done = int(state.iterations)
    if controller.REASONS[int(state.reason)] == "converged":
        return "converged"
    if remaining_steps(config.num_steps, done) == 0:
        return "max_steps"
    if config.time_budget is not None and done and float(run_state.wall_time) >= config.time_budget:
        return "time_budget"
    if so_far.get("training_finished"):
        return (so_far.get("convergence") or {}).get("reason") or "max_steps"
    return None


def _write_run(
    config, identity, directory, mode, out, quiet, dataset, model, estimator, target,
    prepared, run_state, trace, so_far,
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
    final = run_state
    ended = _training_end(config, run_state, so_far)
    if ended:
        final = run_state._replace(controller=controller.finish(run_state.controller, ended))
        say(f"{out}: training already reached its end at iteration {int(run_state.controller.iterations)}; "
             "evaluating", quiet)  # fmt: skip
    else:
        observers = [recorder, checkpoints]
        if not quiet:
            observers.append(
                driver.ProgressObserver(
                    config.num_steps,
                    f"{config.estimator} {dataset.name}",
                    int(run_state.controller.iterations),
                )
            )
        with SignalCatcher() as signals:
            observers.append(signals)
            try:
                final = prepared.run(
                    run_state, max_steps=config.num_steps, time_budget=config.time_budget, observers=observers
                )
            except NumericalError:
                checkpoints.write_last()  # the run stalled: keep what it did, then say so
                raise
        directory.save_checkpoint(final, trace, identity, {})
    plan = prepared.plan
    convergence = controller.convergence(
        final.controller, plan.candidates, plan.settings, plan.distance, plan.base_draws
    )
    params = controller.answer(final.controller, final.loop, settings=plan.settings)
    interrupted = convergence.reason == "interrupted"
    adaptive = config.step_size is None
    arrays = trace.as_arrays()
    elbo = arrays.get("elbo", np.zeros(0))
    metrics = {
        "estimator": config.estimator,
        "model": config.model,
        "dataset": dataset.name,
        "eta": config.step_size,
        "procedure": "default" if adaptive else "eq9",
        "batch_size": prepared.batch_size,
        "iterations": convergence.num_iterations,
        "training_time_s": float(final.wall_time),
        "time_per_iteration_s": median_time_per_iteration(arrays),
        "final_elbo": evaluation.best_final_elbo(elbo),
        "last_elbo": float(elbo[~np.isnan(elbo)][-1]) if np.any(~np.isnan(elbo)) else None,
        "skipped_steps": int(np.nansum(trace.as_arrays().get("skipped", np.zeros(0)))),
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
        number = stop_signal() or signal.SIGINT
        raise RunInterrupted(
            f"interrupted at iteration {metrics['iterations']} by {signal.Signals(number).name}; checkpoint "
            f"and metrics so far written to {out}; continue with the same call and resume=True",
            number,
        )

    metrics["training_finished"] = True  # an interrupted evaluation resumes without training more
    write_json(directory.file(METRICS_FILE), metrics)

    save_params(directory.file(PARAMS_FILE), params)
    say(f"evaluating {config.estimator} on the test set ({config.eval_samples} posterior draws)", quiet)
    metrics.update(_evaluate(config, dataset, model, estimator, target.families, params, directory))
    metrics["finished"] = True
    write_json(directory.file(METRICS_FILE), metrics)
    from grepvi.experiments import report

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
        if config.refit_steps == 0:
            out["refit_final_elbo"] = None
            out["refit_final_elbo_note"] = "not computed: --refit-steps 0"
        else:
            out["refit_final_elbo"] = evaluation.best_final_elbo(loglik.refit_elbo)
            out["refit_final_elbo_note"] = (
                "the refit's objective E[log p(x*, z*, W)] + H[q(z*)] with W ~ q(W): it holds log p(W) "
                "but not H[q(W)], so it is no bound on log p(x*) (and can be positive)"
            )
    out["test_loglik_per_entry"] = loglik.as_dict()
    out["test_loglik_logmeanexp"] = loglik.logmeanexp
    out["eval_samples"] = config.eval_samples
    out["evaluation_time_s"] = time.perf_counter() - start
    if dataset.image_shape is not None:
        # Supplement E.2: one posterior draw, then the mean of the observations given it.
        count = min(10, dataset.train.shape[0])

        def reconstruct(key, params):
            return model.mean_observation(evaluation.sample_latents(key, families, params))[:count]

        # one program, compiled for compile time: run eagerly, each primitive of the draw
        # compiled on its own (the demo's DEF: about 60 of them, 3-4 s)
        program = jax.jit(reconstruct, compiler_options=once_compiler_options())
        buffer = io.BytesIO()
        np.savez(
            buffer,
            true=np.asarray(dataset.train[:count], np.float32),
            reconstruction=np.asarray(program(reconstruction_key, params), np.float32),
            image_shape=np.asarray(dataset.image_shape),
        )
        atomic_write_bytes(directory.file(RECONSTRUCTION_FILE), buffer.getvalue())
    return out
