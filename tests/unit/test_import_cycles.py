"""No import cycle in the package, read from the source: the modules' import graph has no loop.

The graph (:func:`import_graph`) has a node per module of ``mixle_spark`` (a package is its
``__init__``) and an edge ``a -> b`` for each of these in ``a``'s source:

* an import, at module level or inside a function (a lazy import is still a dependency), not under
  ``if TYPE_CHECKING:`` (it never runs): ``import x.y`` is an edge to ``x.y``; ``from x import n`` to
  the module ``x.n`` when there is one, else to the module ``n`` comes from (below), else to ``x``;
* a string that names a module of the package, ``"mixle_spark.x.y"``, a name in it
  ``"mixle_spark.x.y.Name"`` or an entry point ``"mixle_spark.x.y:name"`` (a registry's entry,
  ``importlib.import_module("...")``; an f-string counts when made of text and module-level string
  constants): naming a module in a string to import it later is importing it. A logger's name
  (``logging.getLogger("mixle_spark.estimation")``) names a logger, not a module, and is no edge.

A package ``__init__``'s re-exports are set aside, as the architecture allows: an ``__init__`` only
re-exports (eagerly, or on first use through a ``name -> "module"`` table, PEP 562), so it has no
edges of its own, and ``from package import name`` is an edge to the module the ``__init__`` takes
``name`` from (an import in the ``__init__``, ``TYPE_CHECKING`` ones included since they declare the
lazy names, or its table): what a module imports through a package is where the name lives.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping

from tests.unit.test_architecture import PACKAGE, _is_type_checking, _module_name

ROOT = "mixle_spark"


def _package_of(module: str, is_package: bool) -> str:
    return module if is_package else module.rpartition(".")[0]


def _absolute(node: ast.ImportFrom, package: str) -> str:
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        anchor = parts[: len(parts) - node.level + 1]
        base = ".".join([*anchor, *([base] if base else [])])
    return base


def _is_logger_name(node: ast.AST, parents: Mapping[ast.AST, ast.AST]) -> bool:
    call = parents.get(node)
    if not isinstance(call, ast.Call) or node not in call.args:
        return False
    func = call.func
    return (isinstance(func, ast.Attribute) and func.attr == "getLogger") or (
        isinstance(func, ast.Name) and func.id == "getLogger"
    )


def _text(node: ast.AST, constants: Mapping[str, str]) -> str | None:
    """The text of a string constant, or of an f-string made of text and module-level string
    constants (``f"{_BACKENDS}.local:make_local"``); None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if not isinstance(node, ast.JoinedStr):
        return None
    parts = []
    for part in node.values:
        if isinstance(part, ast.Constant) and isinstance(part.value, str):
            parts.append(part.value)
        elif isinstance(part, ast.FormattedValue) and isinstance(part.value, ast.Name):
            if part.value.id not in constants or part.format_spec is not None:
                return None
            parts.append(constants[part.value.id])
        else:
            return None
    return "".join(parts)


class _Source:
    """What one module's source says: the modules it imports and names, and (for an ``__init__``)
    where each name it re-exports comes from."""

    def __init__(self, module: str, tree: ast.Module, is_package: bool) -> None:
        self.module, self.is_package = module, is_package
        package = _package_of(module, is_package)
        self.imports: list[tuple[str, str | None]] = []  # (module, name imported from it or None)
        self.strings: list[str] = []
        self.exports: dict[str, str] = {}  # an __init__'s name -> the module it is taken from
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        constants = {  # module-level NAME = "text": what an f-string's {NAME} stands for
            target.id: node.value.value
            for node in tree.body
            if isinstance(node, ast.Assign | ast.AnnAssign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(target, ast.Name)
        }

        def visit(node: ast.AST, typing_only: bool) -> None:
            if isinstance(node, ast.If) and _is_type_checking(node):
                for child in node.body:
                    visit(child, True)
                for child in node.orelse:
                    visit(child, typing_only)
                return
            if isinstance(node, ast.Import):
                if not typing_only:
                    self.imports.extend((alias.name, None) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(node, package)
                for alias in node.names:
                    self.exports[alias.asname or alias.name] = base
                    if not typing_only:
                        self.imports.append((base, alias.name))
            elif isinstance(node, ast.Dict):  # a lazy re-export table: {"name": "mixle_spark.module"}
                for key, value in zip(node.keys, node.values, strict=True):
                    if isinstance(key, ast.Constant) and isinstance(value, ast.Constant):
                        if isinstance(key.value, str) and isinstance(value.value, str):
                            self.exports.setdefault(key.value, value.value)
            text = _text(node, constants)
            if text is not None and not typing_only:
                if text.startswith(ROOT + ".") and not _is_logger_name(node, parents):
                    self.strings.append(text)
            if isinstance(node, ast.JoinedStr):
                return  # its parts are not strings of their own
            for child in ast.iter_child_nodes(node):
                visit(child, typing_only)

        visit(tree, False)


def read_sources(files: Mapping[str, tuple[str, bool]]) -> dict[str, _Source]:
    """``{module: _Source}`` from ``{module: (source text, is a package __init__)}``."""
    return {m: _Source(m, ast.parse(text), is_package) for m, (text, is_package) in files.items()}


def _package_files() -> dict[str, tuple[str, bool]]:
    return {
        _module_name(path): (path.read_text(encoding="utf-8"), path.name == "__init__.py")
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def _home(sources: Mapping[str, _Source], target: str, name: str | None, seen: frozenset[str]) -> str | None:
    """The module that ``from target import name`` (or ``import target``) depends on: a submodule
    ``target.name``, else the module a package's ``__init__`` takes ``name`` from (followed through
    packages), else ``target`` itself; None outside the package."""
    if name is not None and f"{target}.{name}" in sources:
        return f"{target}.{name}"
    if target not in sources:
        return None
    source = sources[target]
    if name is None or not source.is_package or name not in source.exports or target in seen:
        return target
    origin = source.exports[name]
    found = _home(sources, origin, name, seen | {target})
    return found if found is not None else target


def _named_module(sources: Mapping[str, _Source], text: str) -> str | None:
    """The module a string names (``mixle_spark.x.y``, ``mixle_spark.x.y.Name`` or, as an entry
    point, ``mixle_spark.x.y:name``), else None."""
    text = text.partition(":")[0]
    if text in sources and text != ROOT:
        return text
    head, _, name = text.rpartition(".")
    if head in sources and head != ROOT and name.isidentifier():
        return _home(sources, head, name, frozenset())
    return None


def import_graph(sources: Mapping[str, _Source]) -> dict[str, set[str]]:
    """``{module: the modules it depends on}`` as the module docstring defines the edges."""
    graph: dict[str, set[str]] = {}
    for module, source in sources.items():
        edges: set[str] = set()
        if not source.is_package:  # an __init__ only re-exports: its names count where they are used
            for target, name in source.imports:
                home = _home(sources, target, name, frozenset())
                if home is not None:
                    edges.add(home)
            for text in source.strings:
                home = _named_module(sources, text)
                if home is not None:
                    edges.add(home)
        edges.discard(module)
        graph[module] = edges
    return graph


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Each strongly connected set of more than one module, as one cycle through it
    (``[a, b, ..., a]``), sorted; empty when the graph has no cycle."""
    return sorted(_one_cycle(graph, component) for component in strongly_connected(graph))


def strongly_connected(graph: Mapping[str, Iterable[str]]) -> list[set[str]]:
    """The sets of more than one module each of which reaches every other (Tarjan's algorithm,
    without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next((c for c in children if c in graph), None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(component)
    return components


def _one_cycle(graph: Mapping[str, Iterable[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the first module (by name) of a strongly connected ``component``."""
    start = min(component)
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node]):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start] if node != start else [start, start]
                if child in component and child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # unreachable for a strongly connected set


SOURCES = read_sources(_package_files())
GRAPH = import_graph(SOURCES)


def _shown(found: list[list[str]]) -> str:
    return "\n".join(" -> ".join(cycle) for cycle in found)


def test_the_package_has_no_import_cycle() -> None:
    found = cycles(GRAPH)
    tangles = "\n".join(sorted(", ".join(sorted(c)) for c in strongly_connected(GRAPH)))
    assert found == [], f"import cycles:\n{_shown(found)}\nmodules in each tangle:\n{tangles}"


def test_the_graph_reads_every_kind_of_edge() -> None:
    """Module-level, function-level and re-exported imports, and strings, are edges; TYPE_CHECKING
    imports and a package __init__'s own imports are not."""
    assert "mixle_spark.em.handles" in GRAPH["mixle_spark.estimation"]  # module level
    assert "mixle_spark.parallel.backends.model_parallel" in GRAPH["mixle_spark.parallel.backends._handle"]
    assert "mixle_spark.em.options" not in GRAPH["mixle_spark.em.resilient"]  # only under TYPE_CHECKING
    assert GRAPH["mixle_spark.parallel"] == set() and GRAPH["mixle_spark.spec"] == set()
    # `from mixle_spark.spec import load_spec` is an edge to where load_spec lives
    assert "mixle_spark.jobspec" in GRAPH["mixle_spark.cli.fit"]


def _planted(files: dict[str, tuple[str, bool]]) -> list[list[str]]:
    return cycles(import_graph(read_sources(files)))


def test_a_planted_cycle_is_caught() -> None:
    """The check is live: a cycle planted by a lazy import, through a package's re-export, or by a
    string naming a module is reported with its modules; a TYPE_CHECKING import or a logger's name
    makes none."""
    files = _package_files()
    lazy = dict(files)
    planted = "\n\ndef _f():\n    from mixle_spark.estimation import optimize\n"  # a lazy import back
    text = files["mixle_spark.em.options"][0] + planted
    lazy["mixle_spark.em.options"] = (text, False)
    found = _planted(lazy)
    assert any({"mixle_spark.em.options", "mixle_spark.estimation"} <= set(c) for c in found), _shown(found)
    assert all(c[0] == c[-1] for c in found)

    toy = {
        "mixle_spark": ("", True),
        "mixle_spark.a": ("from mixle_spark.pkg import thing\n", False),
        "mixle_spark.pkg": ("from mixle_spark.pkg.inner import thing\n__all__ = ['thing']\n", True),
        "mixle_spark.pkg.inner": ("import mixle_spark.b\nthing = 1\n", False),
        "mixle_spark.b": ("import importlib\nX = importlib.import_module('mixle_spark.a')\n", False),
        "mixle_spark.c": (
            "from typing import TYPE_CHECKING\nimport logging\nlogger = logging.getLogger('mixle_spark.d')\n"
            "if TYPE_CHECKING:\n    from mixle_spark.d import y\n",
            False,
        ),
        "mixle_spark.d": ("from mixle_spark.c import logger\ny = 2\n", False),
    }
    assert _planted(toy) == [["mixle_spark.a", "mixle_spark.pkg.inner", "mixle_spark.b", "mixle_spark.a"]]
    toy["mixle_spark.b"] = ("REGISTRY = {'x': 'mixle_spark.pkg.inner.thing'}\n", False)
    toy["mixle_spark.pkg.inner"] = ("REGISTRY = {'x': 'mixle_spark.b'}\nthing = 1\n", False)
    assert _planted(toy) == [["mixle_spark.b", "mixle_spark.pkg.inner", "mixle_spark.b"]]


def _reach(start: Iterable[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(start)
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(GRAPH[module])
    return seen


def test_the_spec_package_imports_nothing_from_the_em_driver() -> None:
    """Models and estimators as JSON know no EM driver: no module of ``mixle_spark.spec`` reaches
    ``mixle_spark.em`` (nor the API above it), directly or through what it imports. (The spec files'
    names, whose fit section is the driver's options, live in ``mixle_spark.jobspec``; the model
    files', which carry an EM fit's statistics, in ``mixle_spark.model_file``.)"""
    spec = [m for m in GRAPH if m == "mixle_spark.spec" or m.startswith("mixle_spark.spec.")]
    assert "mixle_spark.spec.estimators" in spec
    above = ("mixle_spark.em", "mixle_spark.estimation", "mixle_spark.model_selection")
    reached = sorted(m for m in _reach(spec) if any(m == a or m.startswith(a + ".") for a in above))
    assert reached == []
    assert "mixle_spark.em.options" in _reach(["mixle_spark.jobspec"])  # the check sees what it is for
