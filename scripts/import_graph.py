"""The import graph of the ``grepvi`` package: levels, cycles, private names across modules.

    python scripts/import_graph.py          # prints import levels, cycles, private imports

Every ``import`` and ``from ... import`` of a ``grepvi`` module counts, at module level or
inside a function. The package root (``grepvi/__init__.py``, the public facade that imports
everything) is left out of the graph. ``tests/test_layout.py`` asserts the layers on it.
"""

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "grepvi"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def imports(path: Path, known: dict) -> list[tuple[str, str | None]]:
    """``(module imported, name imported from it or None)`` for every grepvi import in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names if alias.name.startswith("grepvi")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("grepvi"):
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                found.append((child, None) if child in known else (node.module, alias.name))
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    edges = {name: set() for name in known if name != "grepvi"}
    for name, path in known.items():
        if name == "grepvi":
            continue
        for target, _ in imports(path, known):
            if target != "grepvi" and target != name and target in known:
                edges[name].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in edges:
        if v not in index:
            visit(v)
    return out


def levels(edges: dict[str, set[str]]) -> dict[str, int]:
    """Each module's level: 0 for a module importing no grepvi module, else 1 + the highest
    level it imports (modules in a cycle share the cycle's level)."""
    memo: dict[str, int] = {}

    def level(v, path=()):
        if v in memo:
            return memo[v]
        if v in path:
            return 0
        value = 1 + max((level(w, path + (v,)) for w in edges[v]), default=-1)
        memo[v] = value
        return value

    return {v: level(v) for v in edges}


def private_imports() -> list[str]:
    """``module: from other import _name`` and imports of private modules (``grepvi._x``)."""
    known = modules()
    found = []
    for name, path in known.items():
        for target, imported in imports(path, known):
            private_module = any(part.startswith("_") and part != "__init__" for part in target.split("."))
            private_name = imported is not None and imported.startswith("_")
            if (private_module or private_name) and target != name:
                found.append(f"{name}: {target}{'' if imported is None else ' import ' + imported}")
    return found


def main() -> None:
    edges = graph()
    level = levels(edges)
    print(f"{len(edges)} modules, {max(level.values()) + 1} import levels")
    for depth in range(max(level.values()) + 1):
        print(f"  level {depth}: {', '.join(sorted(m for m, d in level.items() if d == depth))}")
    found = cycles(edges)
    print(f"cycles: {len(found)}")
    for component in found:
        print("  " + " <-> ".join(component))
    private = private_imports()
    print(f"private names imported across modules: {len(private)}")
    for line in private:
        print("  " + line)


if __name__ == "__main__":
    main()
