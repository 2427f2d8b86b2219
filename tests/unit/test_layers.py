"""The architecture as a test: ``framework/`` is five layer packages, imports point down the
layers only, no module imports itself back through others, and the lower layers stay free of
what they must not know (docs/design.md#layers).

Every import counts: module level, inside functions and under ``TYPE_CHECKING``, since each is a
dependency a reader has to follow."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "framework"
LAYERS = ("definition", "execution", "storage", "operations", "orchestration")
BASE = {"framework.errors"}  # the exception types every layer raises
PUBLIC = {"framework", "framework.__main__", "framework.airflow", "framework.batchjob", "framework.downstream"}
FORBIDDEN = {  # third-party packages a layer must not import
    "definition": {"pyspark", "delta", "py4j", "pandas", "pyarrow", "great_expectations", "airflow"},
    "execution": {"delta", "great_expectations", "airflow"},
    "storage": {"great_expectations", "airflow"},
    "operations": {"airflow"},
}


def _name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Absolute names of the modules ``path`` imports (``from .x import y`` gives ``...x.y`` if
    that is a module of the framework, else ``...x``)."""
    name, found = _name(path), set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
    return found


MODULES = {_name(p): p for p in ROOT.rglob("*.py")}
GRAPH = {name: {i for i in _imports(path) if i in MODULES and i != name} for name, path in MODULES.items()}


def _layer(module: str) -> int:
    """The rank of a module's layer: the base below the layers, the public modules above them."""
    if module in BASE:
        return -1
    if module in PUBLIC:
        return len(LAYERS)
    return LAYERS.index(module.split(".")[1])


def test_every_module_lives_in_a_layer_package():
    for module in MODULES:
        assert module in BASE | PUBLIC or module.split(".")[1] in LAYERS, module
    assert {p.name for p in ROOT.iterdir() if p.is_dir() and p.name != "__pycache__"} == set(LAYERS)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down_the_layers(module):
    upward = [i for i in GRAPH[module] if _layer(i) > _layer(module)]
    assert not upward, f"{module} imports from a higher layer: {upward}"
    if module in BASE | PUBLIC:
        return
    layer = module.split(".")[1]
    third_party = {i.split(".")[0] for i in _imports(MODULES[module])} & FORBIDDEN.get(layer, set())
    assert not third_party, f"{module} ({layer}) imports {sorted(third_party)}"


def test_no_import_cycles():
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            pytest.fail("import cycle: " + " -> ".join(path[path.index(module) :] + [module]))
        if module in done:
            return
        for target in sorted(GRAPH[module]):
            visit(target, path + [module])
        done.add(module)

    for module in sorted(GRAPH):
        visit(module, [])


CLASSIC = "framework.storage.classic"  # the one module that reaches into a classic session's JVM
JVM_HANDLES = ("_jvm", "_jsc", "_jdf", "_jsparkSession", "sparkContext", "java_exception")


@pytest.mark.parametrize("module", sorted(set(MODULES) - {CLASSIC}))
def test_only_the_classic_module_reaches_into_the_jvm(module):
    """A Spark Connect session has no JVM in the client's process (#40): every other module is
    written against the DataFrame API both kinds of session share."""
    tree = ast.parse(MODULES[module].read_text())
    handles = sorted({n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in JVM_HANDLES})
    assert not handles, f"{module} uses {handles}: put it in {CLASSIC}"
    py4j = {i for i in _imports(MODULES[module]) if i.split(".")[0] == "py4j"}
    assert not py4j, f"{module} imports {sorted(py4j)}: put it in {CLASSIC}"
