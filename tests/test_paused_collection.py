"""The cyclic garbage collector paused while a fit traces and lowers
(:mod:`grepvi.inference.paused_collection`): restored exactly, across nesting, errors and
threads, and in force where the model's Python runs under ``from_numpyro`` and ``fit``."""

import gc
import threading

import jax.numpy as jnp
import numpy as np
import pytest

import grepvi
from grepvi.inference.paused_collection import paused_collection


@pytest.fixture(autouse=True)
def collector_enabled():
    gc.enable()
    yield
    gc.enable()


def test_paused_inside_and_enabled_after():
    with paused_collection():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_nested_blocks_enable_only_at_the_outermost_end():
    with paused_collection():
        with paused_collection():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner end does not enable it under the outer block
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled():
    gc.disable()
    with paused_collection():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_an_error_inside_restores_the_collector():
    with pytest.raises(ValueError, match="inside"):
        with paused_collection():
            raise ValueError("inside")
    assert gc.isenabled()


def test_as_a_decorator():
    @paused_collection()
    def inside():
        return gc.isenabled()

    assert inside() is False
    assert gc.isenabled()


def test_overlapping_blocks_on_two_threads():
    """Thread A enters, B enters, A leaves (B still inside: paused), B leaves (enabled)."""
    a_entered, b_entered, a_left, b_may_leave = (threading.Event() for _ in range(4))
    seen = {}

    def a():
        with paused_collection():
            a_entered.set()
            b_entered.wait(5)
        a_left.set()

    def b():
        a_entered.wait(5)
        with paused_collection():
            b_entered.set()
            a_left.wait(5)
            seen["after_a_left"] = gc.isenabled()
            b_may_leave.wait(5)

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for thread in threads:
        thread.start()
    a_left.wait(5)
    seen["main_while_b_inside"] = gc.isenabled()
    b_may_leave.set()
    for thread in threads:
        thread.join(5)
    assert seen == {"after_a_left": False, "main_while_b_inside": False}
    assert gc.isenabled()


def test_cycles_made_inside_are_collected_after():
    class Node:
        pass

    with paused_collection():
        for _ in range(100):
            node = Node()
            node.self = node
        del node
        assert not gc.isenabled()
    assert gc.collect() >= 100


def test_a_fit_traces_with_the_collector_paused_and_restores_it():
    """The model's Python runs while ``fit`` traces its step: the collector is off there, and
    on again when ``fit`` returns (its answer is the default fit's: a gamma-Poisson posterior)."""
    seen = []
    counts = np.array([3.0, 5.0, 4.0, 6.0])

    def logdensity(z):
        seen.append(gc.isenabled())
        rate = z["rate"]
        return jnp.sum(counts * jnp.log(rate) - rate) + jnp.log(rate) - rate  # Gamma(2, 1) prior

    result = grepvi.fit(logdensity, {"rate": grepvi.Gamma()}, progress=False)
    assert seen and not any(seen)
    assert gc.isenabled()
    # Gamma(2 + 18, 1 + 4) posterior: mean 4
    assert abs(float(result.posterior["rate"].mean()) - 4.0) < 0.05


def test_from_numpyro_reads_the_model_with_the_collector_paused():
    numpyro = pytest.importorskip("numpyro")
    import numpyro.distributions as dist

    from grepvi.interop.numpyro_model import from_numpyro

    seen = []

    def model(y):
        seen.append(gc.isenabled())
        mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
        numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    from_numpyro(model, jnp.array([0.5, 1.5, 1.0]))
    assert seen and not any(seen)
    assert gc.isenabled()


def test_a_fit_stopped_while_its_hessian_compiles_returns_with_the_collector_on():
    """The coupling's Hessian is traced on a thread of its own, which may outlive a fit
    stopped early: that thread does not pause the collector, so the caller gets it back on
    (it was left off until the thread ended, seventy-fifth session)."""
    from test_coupling import _ridge

    from grepvi import Normal
    from grepvi.inference import paused_collection as module

    seen_alive = []

    def stop_when_preparing(event):
        alive = any(thread.name == "grepvi-hessian" and thread.is_alive() for thread in threading.enumerate())
        seen_alive.append(alive)
        return alive

    grepvi.fit(
        _ridge, {"ab": Normal(shape=(2,))}, progress=False, num_steps=8000, callback=stop_when_preparing
    )
    if not any(seen_alive):
        pytest.skip("the Hessian's thread ended before a window did: nothing to check")
    assert gc.isenabled() and module._depth == 0
    for thread in threading.enumerate():  # the Hessian's thread ends on its own
        if thread.name == "grepvi-hessian":
            thread.join(timeout=120)
    assert gc.isenabled()
