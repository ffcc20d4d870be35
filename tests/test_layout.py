"""The rules of the package layout (README, "Architecture"), checked on the source with ``ast``.

- imports point one way: a module imports only its own layer or lower ones, never a cycle;
- the runtime path (store .. training) never imports the offline tools of ``prep``: what both
  share (the on-disk format, dtypes, mask names) is the ``format`` layer below them;
- imports sit at the top of a module, except ones deferred on purpose (marked ``# deferred:``);
- no module reads another object's private (``_name``) attributes;
- functions of the runtime path (graph, sampling, loading, training) stay short.
"""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "hpcgnn"

#: lowest first; a module may import its own layer and the ones before it
LAYERS = ("runtime", "format", "prep", "store", "graph", "sampling", "loading", "nn", "tasks", "training", "cli",
          "testing")
#: the layers a training job runs; none imports ``prep`` (the layers below them cannot, by the
#: layer order, so no import chain from them reaches ``prep`` either)
RUNTIME_PATH = ("store", "graph", "sampling", "loading", "nn", "tasks", "training")
TOP = len(LAYERS)  # the package facade and the command entry points
SHORT_FUNCTION_LAYERS = ("graph", "sampling", "loading", "training")
MAX_FUNCTION_LINES = 60
#: compiled kernels (cython/): below every layer, importable by all
KERNELS = {"hpcgnn._csr", "hpcgnn._sample", "hpcgnn._layerwise", "hpcgnn._dense", "hpcgnn._rows", "hpcgnn._progress",
           "hpcgnn._spmm", "hpcgnn._attention", "hpcgnn._partition", "hpcgnn._metis"}
#: underscore names that are part of a library's contract: ``os._exit`` (exit without unwinding),
#: and the reconstructors that pickled numpy arrays name (the Planetoid reader allow-lists them)
#: underscore names that are a library's documented interface: os._exit, pickle's reconstructors, and the
#: ``_metadata`` (module versions) torch attaches to a state dict and reads back when loading it
PUBLIC_UNDERSCORE = {("os", "_exit"), ("_multiarray", "_reconstruct"), ("copyreg", "_reconstructor"),
                     ("moved", "_metadata")}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> int:
    if module in KERNELS:
        return -1
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else TOP


def sources():
    return {module_name(p): (p, ast.parse(p.read_text(), filename=str(p))) for p in sorted(ROOT.rglob("*.py"))}


def is_module(name, modules) -> bool:
    return name in modules or name in KERNELS


def imported_modules(node, importer, modules):
    """The hpcgnn modules one import statement loads (a ``from pkg import name`` of a submodule
    counts as that submodule)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "hpcgnn"]
    base = node.module or ""
    if node.level:  # relative: resolved against the importer's package
        package = importer.split(".")
        if not (ROOT / Path(*package[1:]) / "__init__.py").exists() or len(package) == 1:
            package = package[:-1]
        base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
    if base.split(".")[0] != "hpcgnn":
        return []
    if base == "hpcgnn" and [a.name for a in node.names] == ["__version__"]:
        return []  # a constant of the package facade, which imports nothing when loaded
    return [f"{base}.{a.name}" if is_module(f"{base}.{a.name}", modules) else base for a in node.names]


def import_graph():
    modules = sources()
    edges = {}
    for name, (_, tree) in modules.items():
        edges[name] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges[name].update(imported_modules(node, name, modules))
    return edges


def find_cycle(edges):
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_import_graph_is_acyclic():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_imports_point_down_the_layers():
    wrong = []
    for importer, targets in import_graph().items():
        for target in targets:
            if layer_of(target) > layer_of(importer):
                wrong.append(f"{importer} ({layer_name(importer)}) imports {target} ({layer_name(target)})")
            if target.startswith("hpcgnn.testing") and not importer.startswith("hpcgnn.testing"):
                wrong.append(f"{importer} imports the test helpers {target}")
    assert not wrong, "\n".join(wrong)


def test_the_runtime_path_never_imports_prep():
    wrong = []
    for importer, targets in import_graph().items():
        parts = importer.split(".")
        if len(parts) > 1 and parts[1] in RUNTIME_PATH:
            wrong += [f"{importer} imports {t}" for t in sorted(targets) if t.split(".")[:2] == ["hpcgnn", "prep"]]
    assert not wrong, "the runtime path imports the offline tools (move what it needs to hpcgnn.format):\n" + \
        "\n".join(wrong)


def layer_name(module):
    index = layer_of(module)
    return "kernels" if index < 0 else LAYERS[index] if index < TOP else "top level"


def test_function_level_imports_are_deferred_on_purpose():
    undeclared = []
    for path, tree in sources().values():
        lines = path.read_text().splitlines()
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                line = lines[node.lineno - 1]
                if "# deferred:" not in line:
                    undeclared.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: {line.strip()}")
    assert not undeclared, "imports inside functions need a '# deferred: why' comment:\n" + "\n".join(undeclared)


def test_no_module_reads_private_attributes_of_another():
    found = []
    for path, tree in sources().values():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and is_private(node.attr):
                owner = node.value.id if isinstance(node.value, ast.Name) else None
                if owner in ("self", "cls") or (owner, node.attr) in PUBLIC_UNDERSCORE:
                    continue
                found.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: .{node.attr}")
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hpcgnn"):
                for alias in node.names:
                    if is_private(alias.name) and f"{node.module}.{alias.name}" not in KERNELS:
                        found.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: import {alias.name}")
    assert not found, "private names read from outside their owner:\n" + "\n".join(found)


def is_private(name):
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_runtime_path_functions_stay_short():
    long = []
    for name, (path, tree) in sources().items():
        parts = name.split(".")
        if len(parts) < 2 or parts[1] not in SHORT_FUNCTION_LAYERS:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: {node.name} ({length} lines)")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)


def registered_names():
    """``name -> the module that registers it`` of every built-in sampler and task."""
    from hpcgnn.sampling import SAMPLERS
    from hpcgnn.tasks import TASKS

    owners = {name: spec.build.__module__ for name, spec in SAMPLERS.items()}
    owners.update({name: type(task).__module__ for name, task in TASKS.items()})
    return owners


def choice_comparisons(tree, names):
    """``(line, name)`` of every comparison of a sampler or task setting with a registered name
    (``config.sampler.name == "vr"``, ``args.task in ("link",)``, ``name.startswith("saint-")``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if not any(word in ast.unparse(o) for o in operands for word in ("sampler", "task")):
                continue
            for operand in operands:
                elements = operand.elts if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) else [operand]
                found += [(node.lineno, e.value) for e in elements if isinstance(e, ast.Constant) and e.value in names]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "startswith" and \
                "sampler" in ast.unparse(node.func.value):
            found += [(node.lineno, a.value) for a in node.args if isinstance(a, ast.Constant)
                      and any(str(n).startswith(str(a.value)) for n in names)]
    return found


def test_no_module_names_a_sampler_or_task_but_its_own():
    """A sampler or task is one module and its registration: nothing else branches on its name."""
    owners = registered_names()
    wrong = []
    for module, (path, tree) in sources().items():
        for line, name in choice_comparisons(tree, owners):
            if owners.get(name) != module:
                wrong.append(f"{path.relative_to(ROOT.parent)}:{line}: compares with {name!r} "
                             f"(registered by {owners.get(name, 'its own module')})")
    assert not wrong, "\n".join(wrong)


def test_the_name_check_sees_a_branch_on_a_sampler():
    tree = ast.parse('if config.sampler.name == "vr":\n    pass\nif args.task in ("link", "x"):\n    pass\n'
                     'if args.sampler.startswith("saint-"):\n    pass\nif norm == "layer":\n    pass\n')
    assert choice_comparisons(tree, registered_names()) == [(1, "vr"), (3, "link"), (5, "saint-")]


@pytest.mark.parametrize("bad", ["upward", "cycle", "prep"])
def test_the_checks_catch_a_violation(bad, tmp_path, monkeypatch):
    """The graph checks see what they claim to: plant one violation in a copy of the package."""
    import shutil

    copy = tmp_path / "hpcgnn"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    victim = copy / "runtime" / "rng.py"
    if bad == "upward":
        victim.write_text(victim.read_text() + "\nfrom hpcgnn.training import loop  # noqa\n")
    elif bad == "cycle":
        (copy / "runtime" / "files.py").write_text((copy / "runtime" / "files.py").read_text()
                                                   + "\nfrom hpcgnn.runtime import rng  # noqa\n")
        victim.write_text(victim.read_text() + "\nfrom hpcgnn.runtime import files  # noqa\n")
    else:  # a layer above prep by the order, so only the runtime-path rule refuses it
        victim = copy / "graph" / "split.py"
        victim.write_text(victim.read_text() + "\nfrom hpcgnn.prep.graph import Graph  # noqa\n")
    monkeypatch.setattr(f"{__name__}.ROOT", copy)
    if bad == "upward":
        with pytest.raises(AssertionError, match="imports hpcgnn.training.loop"):
            test_imports_point_down_the_layers()
    elif bad == "cycle":
        with pytest.raises(AssertionError, match="import cycle"):
            test_the_import_graph_is_acyclic()
    else:
        test_imports_point_down_the_layers()
        with pytest.raises(AssertionError, match="hpcgnn.graph.split imports hpcgnn.prep.graph"):
            test_the_runtime_path_never_imports_prep()


def test_every_directory_of_modules_is_a_package():
    """A directory of modules without ``__init__.py`` is no package: ``find_packages`` leaves it out of a
    wheel, and only an editable install, which imports from the source tree, still finds its modules."""
    loose = sorted({str(p.parent.relative_to(ROOT.parent)) for p in ROOT.rglob("*.py")
                    if not (p.parent / "__init__.py").is_file()})
    assert not loose, "directories of modules without __init__.py (a wheel leaves them out):\n" + "\n".join(loose)
