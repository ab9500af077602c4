"""The architecture as a test (``python scripts/import_graph.py`` prints the same facts).

Layers: the library below ``grepvi.experiments`` never imports it; ``grepvi.models`` does not
import ``grepvi.estimators`` (both import ``grepvi.target``); the inference layer does not
import diagnostics, interop or experiments; no import cycle; no private name (``_x``) or
private module imported from another module.
"""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "import_graph.py"


@pytest.fixture(scope="module")
def graph_module():
    spec = importlib.util.spec_from_file_location("import_graph", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def edges(graph_module):
    return graph_module.graph()


def _imports_of(edges, prefix):
    return {(a, b) for a, targets in edges.items() if a.startswith(prefix) for b in targets}


def test_no_import_cycle(graph_module, edges):
    assert graph_module.cycles(edges) == []


def test_no_private_names_across_modules(graph_module):
    assert graph_module.private_imports() == []


def test_the_library_below_experiments_never_imports_it(edges):
    offenders = {
        (a, b)
        for a, targets in edges.items()
        for b in targets
        if b.startswith("grepvi.experiments") and not a.startswith(("grepvi.experiments", "grepvi.cli"))
    }
    assert offenders == set()


def test_models_do_not_import_estimators(edges):
    assert {
        (a, b) for a, b in _imports_of(edges, "grepvi.models") if b.startswith("grepvi.estimators")
    } == set()


@pytest.mark.parametrize("upper", ["grepvi.diagnostics", "grepvi.interop", "grepvi.experiments"])
def test_inference_does_not_import_the_layers_above_it(edges, upper):
    assert {(a, b) for a, b in _imports_of(edges, "grepvi.inference") if b.startswith(upper)} == set()


def test_families_and_math_are_the_bottom(edges):
    low = (
        "grepvi.families",
        "grepvi.numerics",
        "grepvi.errors",
        "grepvi.fusion_boundary",
        "grepvi.sampling",
        "grepvi.threefry",
        "grepvi.validation",
    )
    bad = {
        (a, b) for a, targets in edges.items() if a.startswith(low) for b in targets if not b.startswith(low)
    }
    assert bad == set()
