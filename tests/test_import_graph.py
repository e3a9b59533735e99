"""The import graph of src/, read from the source with ast (nothing is imported to build it).

Every import counts, also those inside functions (a lazy import still ties two modules together).
An import names the most specific module it reaches: `from src.models import nfnet` is an edge to
src.models.nfnet, `from src.models import create_model` one to src.models (its __init__).
"""
import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _modules():
    """{module name: path} of every .py file under src/."""
    found = {}
    for directory, _, files in os.walk(os.path.join(ROOT, "src")):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                parts = os.path.relpath(path, ROOT)[:-3].split(os.sep)
                found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _imports(module, path):
    """[(imported module, [names imported from it])] of every import statement in the file."""
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            target = f"{base}.{node.module}" if node.level and node.module else (base if node.level else node.module)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.append((sub, []) if sub in MODULES else (target, [alias.name]))
    return found


def _graph():
    graph = {}
    for module, path in MODULES.items():
        targets = set()
        for target, _ in _imports(module, path):
            while target and target not in MODULES:  # `import src.a.b.c` where only src.a.b is a file
                target = target.rpartition(".")[0]
            if target and target != module:
                targets.add(target)
        graph[module] = targets
    return graph


def _cycles(graph):
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def _is_package_and_child(component):
    """A package __init__ that re-exports its own submodules, which import siblings through it: not a
    circle between concerns (Python imports the package first in any case)."""
    packages = [m for m in component if MODULES[m].endswith("__init__.py")]
    return len(packages) == 1 and all(m == packages[0] or m.startswith(packages[0] + ".") for m in component)


def test_src_has_no_import_circle():
    circles = [c for c in _cycles(_graph()) if not _is_package_and_child(c)]
    assert circles == []


def test_the_mindrecord_converter_is_a_leaf():
    """Nothing in src/ imports src/data/to_mindrecord.py: the on-disk names it writes live in folder.py."""
    assert [m for m, targets in _graph().items() if "src.data.to_mindrecord" in targets] == []


def test_no_module_imports_the_config_only_for_an_error_type():
    """The error types and the CLI runner live in src/errors.py, which every layer may import."""
    import src.config

    def is_error(name):
        value = getattr(src.config, name, None)
        return isinstance(value, type) and issubclass(value, Exception)

    only_errors = []
    for module, path in MODULES.items():
        names = [n for target, imported in _imports(module, path) if target == "src.config" for n in imported]
        if names and all(is_error(n) for n in names):
            only_errors.append((module, names))
    assert only_errors == []


@pytest.mark.parametrize("module", ["src.errors", "src.atomic", "src.variants", "src.accuracy"])
def test_the_ground_floor_imports_nothing_of_the_project(module):
    assert _graph()[module] == set()


def _layer(module):
    parts = module.split(".")
    return "src.models" if parts[:2] == ["src", "models"] else ".".join(parts[:2])


GROUND = {"src.errors", "src.atomic", "src.variants", "src.accuracy"}
# What each layer of src/ may import besides itself (docs/architecture.md): nothing runs back up.
MAY_IMPORT = {
    "src.errors": set(), "src.atomic": set(), "src.variants": set(), "src.accuracy": set(),
    "src.config": GROUND,
    "src.checkpoint_file": GROUND,
    "src.models": GROUND | {"src.checkpoint_file"},
    "src.data": GROUND | {"src.checkpoint_file"},
    "src.trainers": GROUND | {"src.checkpoint_file", "src.models"},
    "src.optim": GROUND | {"src.models"},
    "src.run": GROUND | {"src.config", "src.checkpoint_file", "src.models", "src.data", "src.trainers", "src.optim"},
    "src.builders": GROUND | {"src.config", "src.checkpoint_file", "src.models", "src.data", "src.trainers",
                              "src.optim", "src.run"},
    "src.deploy": GROUND | {"src.config", "src.checkpoint_file", "src.models", "src.data", "src.trainers",
                            "src.optim", "src.run", "src.builders"},
    "src": set(),
}


def test_each_layer_imports_only_the_layers_below_it():
    upward = sorted((m, t) for m, targets in _graph().items() for t in targets
                    if _layer(t) != _layer(m) and _layer(t) not in MAY_IMPORT[_layer(m)])
    assert upward == []


def test_the_runtime_never_imports_the_maintenance_tools():
    """tools/ (generators, weight conversion) are commands run by hand or by tests; src/ runs without them."""
    assert sorted((m, t) for m, path in MODULES.items() for t, _ in _imports(m, path)
                  if t == "tools" or t.startswith("tools.")) == []


# The CPU backend's C++ kernels are chosen at one seam (docs/architecture.md): the kernels' own module,
# layers/config.py that hands them out (active_forms, fused_update_kernel, set_kernel_threads) and
# fast_forms.py that swaps the layers' fused forms in. The optimizer, EMA, update cells and the device
# context ask config.py.
KERNEL_SEAM = {"src/models/layers/cpu_kernels.py", "src/models/layers/config.py", "src/models/layers/fast_forms.py"}
ENTRY_POINTS = ["train.py", "eval.py", "export.py", "predict.py", "preprocess.py", "postprocess.py"]


def test_only_the_backend_seam_names_the_cpu_kernels():
    paths = list(MODULES.values()) + [os.path.join(ROOT, name) for name in ENTRY_POINTS]
    naming = {os.path.relpath(p, ROOT) for p in paths if "cpu_kernels" in open(p, encoding="utf-8").read()}
    assert naming == KERNEL_SEAM
