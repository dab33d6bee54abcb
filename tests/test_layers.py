"""fastload's import layers: a module never imports a higher layer, no import cycles, and no
module uses another module's private names; and its sizes: no module over MAX_MODULE_LINES
lines, no class over MAX_CLASS_LINES.

Every module of fastload/ is parsed with `ast` (nothing is imported), and every import is
collected: module-level ones, those inside functions and methods (a lazy import is still
a dependency), those under `if TYPE_CHECKING:`, and `importlib.import_module("fastload.x")`
with a string literal. The layers, lowest first, are LAYERS below; fastload/README.md
("Layers") says why they are in this order.
"""

from __future__ import annotations

import ast
import os
from typing import Dict, Iterator, List, Optional, Set, Tuple

import pytest

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fastload")

# Lowest first. A module belongs to the layer of the longest prefix that names it.
LAYERS: List[Tuple[str, Tuple[str, ...]]] = [
    ("binding", ("fastload._C", "fastload._ext", "fastload._meta", "fastload.errors", "fastload._contract",
                 "fastload._ops", "fastload.reference")),
    ("source", ("fastload.source",)),
    ("sampling", ("fastload.sampling",)),
    ("decode", ("fastload.decode",)),
    ("augment", ("fastload.augment", "fastload.transforms", "fastload.ops")),
    ("compat", ("fastload.compat",)),
    ("trace", ("fastload.trace",)),
    ("datasets", ("fastload.datasets",)),
    ("adapters", ("fastload.adapters",)),
    ("transfer", ("fastload.transfer", "fastload.stats")),
    ("runners", ("fastload.native", "fastload.generic")),
    ("loader", ("fastload.loader", "fastload.loader_args", "fastload.loader_path", "fastload.resume", "fastload.rebuild")),
    ("entry points", ("fastload.prepare", "fastload.bench", "fastload.info", "fastload")),
]
# Compiled modules (no .py file to parse).
EXTENSIONS = ("fastload._C",)
RANK = {name: rank for rank, (name, _) in enumerate(LAYERS)}


def layer_of(module: str) -> Optional[str]:
    best, length = None, -1
    for name, prefixes in LAYERS:
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > length:
                best, length = name, len(prefix)
    return best


class Import:
    """One import of a fastload module: where it is, what it imports, and whether it runs
    when the importing module is imported (module level, not under TYPE_CHECKING)."""

    def __init__(self, path: str, line: int, target: str, at_import: bool):
        self.path, self.line, self.target, self.at_import = path, line, target, at_import


def module_files(root: str = ROOT) -> Dict[str, str]:
    """{"fastload.x.y": path} for every .py file under root."""
    out = {}
    base = os.path.dirname(root)
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                parts = os.path.relpath(path, base)[:-3].split(os.sep)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                out[".".join(parts)] = path
    return out


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(node: ast.AST, at_import: bool) -> Iterator[Tuple[ast.AST, bool]]:
    """Every node under `node`, with whether it runs when the module is imported."""
    for child in ast.iter_child_nodes(node):
        runs = at_import
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            runs = False
        yield child, runs
        if isinstance(child, ast.If) and _type_checking(child):
            for grandchild in child.body:
                yield grandchild, False
                yield from _walk(grandchild, False)
            for grandchild in child.orelse:
                yield grandchild, runs
                yield from _walk(grandchild, runs)
        else:
            yield from _walk(child, runs)


def imports_of(module: str, path: str, modules: Dict[str, str]) -> List[Import]:
    """Every fastload module `module` imports (resolved: `from fastload import _ext` is
    fastload._ext, `from fastload import DataLoader` is fastload)."""
    with open(path, "r", encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    out: List[Import] = []
    for node, at_import in _walk(tree, True):
        if isinstance(node, ast.Import):
            out += [Import(path, node.lineno, alias.name, at_import) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - (node.level - 1)])
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                known = sub in modules or sub in EXTENSIONS
                out.append(Import(path, node.lineno, sub if known else source, at_import))
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None))
              == "import_module" and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            out.append(Import(path, node.lineno, node.args[0].value, at_import))
    return [i for i in out if i.target == "fastload" or i.target.startswith("fastload.")]


def upward_imports(root: str = ROOT) -> List[str]:
    """`file:line imports X (layer a) from layer b` for each import of a higher layer."""
    modules = module_files(root)
    problems: List[str] = []
    for module, path in modules.items():
        mine = layer_of(module)
        assert mine is not None, f"{path}: module {module} is in no layer; add it to LAYERS in {__file__}"
        for imp in imports_of(module, path, modules):
            theirs = layer_of(imp.target)
            if theirs is not None and RANK[theirs] > RANK[mine]:
                problem = (f"{os.path.relpath(imp.path, os.path.dirname(root))}:{imp.line} imports "
                           f"{imp.target} (layer {theirs}) from layer {mine}")
                if problem not in problems:
                    problems.append(problem)
    return problems


def graph_cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The cycles of a module -> imported modules graph (edges to modules outside it ignored)."""
    cycles, state, stack = [], {}, []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if n not in graph:
                continue
            if state.get(n) == 1:
                cycles.append(stack[stack.index(n):] + [n])
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    return cycles


def import_cycles(root: str = ROOT) -> List[List[str]]:
    """Cycles among the imports that run when a module is imported. Importing
    fastload.a.b runs fastload/a/__init__.py first, so that counts as an import of
    fastload.a, unless fastload.a is a package the importing module is in (its __init__
    then runs first anyway). The root package, which imports the rest lazily, is left
    out."""
    modules = module_files(root)
    graph: Dict[str, Set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for imp in imports_of(module, path, modules):
            if not imp.at_import:
                continue
            target = imp.target
            while target not in ("fastload", ""):
                if target in modules and target != module and not module.startswith(target + "."):
                    graph[module].add(target)
                target = target.rpartition(".")[0]
    graph.pop("fastload", None)
    return graph_cycles(graph)


def folder_cycles(root: str = ROOT) -> List[List[str]]:
    """Cycles among the modules of one folder, counting every import between them: lazy
    ones (inside functions) too, not those under TYPE_CHECKING. A folder whose modules
    import each other in a circle has no order a reader can follow, wherever the imports
    sit. A package's `__init__` (its contract, importing its modules) is left out."""
    modules = module_files(root)
    graph: Dict[str, Set[str]] = {m: set() for m in modules if not modules[m].endswith("__init__.py")}
    for module in graph:
        folder = module.rpartition(".")[0]
        for imp in imports_of(module, modules[module], modules):
            if imp.line and _under_type_checking(modules[module], imp.line):
                continue
            target = imp.target
            if target in graph and target != module and target.rpartition(".")[0] == folder:
                graph[module].add(target)
    return graph_cycles(graph)


def _under_type_checking(path: str, line: int) -> bool:
    with open(path, "r", encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _type_checking(node):
            if any(child.lineno <= line <= (child.end_lineno or child.lineno) for child in node.body):
                return True
    return False


def test_no_import_cycles_inside_a_folder():
    cycles = folder_cycles()
    assert not cycles, "modules of one folder importing each other in a circle (lazy imports included):\n" + \
        "\n".join(" -> ".join(c) for c in cycles)


def test_a_lazy_cycle_inside_a_folder_is_found(tmp_path):
    root = _copy_tree(tmp_path)
    with open(os.path.join(root, "trace", "where.py"), "a", encoding="utf-8") as f:
        f.write("\n\ndef _late():\n    from fastload.trace import lazy\n    return lazy\n")
    cycles = folder_cycles(root)
    assert any("fastload.trace.where" in c and "fastload.trace.lazy" in c for c in cycles), cycles


# A module a reader can hold in mind, and a class one can: past these, split by job.
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 300


def oversized(root: str = ROOT) -> List[str]:
    """`file: N lines` for each module over MAX_MODULE_LINES, `file:line class X: N lines`
    for each class (nested ones too) over MAX_CLASS_LINES, docstring included."""
    problems: List[str] = []
    for module, path in module_files(root).items():
        with open(path, "r", encoding="utf-8") as f:
            text = f.read()
        where = os.path.relpath(path, os.path.dirname(root))
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            problems.append(f"{where}: {lines} lines (at most {MAX_MODULE_LINES})")
        for node in ast.walk(ast.parse(text, path)):
            if isinstance(node, ast.ClassDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_CLASS_LINES:
                    problems.append(f"{where}:{node.lineno} class {node.name}: {length} lines "
                                    f"(at most {MAX_CLASS_LINES})")
    return problems


def test_no_module_or_class_is_oversized():
    problems = oversized()
    assert not problems, ("modules or classes too long to read as one piece (move a cohesive group of "
                          "functions or methods to the module that owns its job):\n" + "\n".join(problems))


@pytest.mark.parametrize("what", ["module", "class"])
def test_an_oversized_module_or_class_is_named(tmp_path, what):
    root = _copy_tree(tmp_path)
    path = os.path.join(root, "source", "urls.py")
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_CLASS_LINES))
    with open(path, "a", encoding="utf-8") as f:
        if what == "class":
            f.write(f"\n\nclass _Long:\n{body}\n")
        else:
            f.write("\n" * MAX_MODULE_LINES)
    problems = oversized(root)
    where = f"fastload{os.sep}source{os.sep}urls.py"
    if what == "class":
        assert any(p.startswith(where + ":") and f"class _Long: {MAX_CLASS_LINES + 1} lines" in p
                   for p in problems), problems
    else:
        assert any(p.startswith(where + ": ") for p in problems), problems


# The binding layer's modules are private by name (fastload._C, fastload._ext, ...): other
# modules import them, and use their public names; the compiled module's names are C++'s.
BINDING_MODULES = ("fastload._C", "fastload._ext", "fastload._meta", "fastload._ops", "fastload._contract")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_uses(root: str = ROOT) -> List[str]:
    """`file:line uses X._name` for each use of another fastload module's private name:
    `from fastload.x import _name`, or `alias._name` where alias is that module (imported
    under any name, inside functions too). A module's `_private` names are its own."""
    modules = module_files(root)
    problems: List[str] = []
    for module, path in modules.items():
        with open(path, "r", encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
        aliases: Dict[str, str] = {}  # local name -> fastload module
        where = os.path.relpath(path, os.path.dirname(root))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("fastload.") and alias.asname:
                        aliases[alias.asname] = alias.name
            elif isinstance(node, ast.ImportFrom):
                source = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - (node.level - 1)])
                    source = f"{base}.{node.module}" if node.module else base
                if not (source == "fastload" or source.startswith("fastload.")):
                    continue
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    if sub in modules or sub in EXTENSIONS:
                        aliases[alias.asname or alias.name] = sub
                    elif _private(alias.name) and source != module and sub not in BINDING_MODULES:
                        problems.append(f"{where}:{node.lineno} imports {source}.{alias.name}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and _private(node.attr):
                target = aliases.get(node.value.id)
                if target is not None and target != module and target != "fastload._C":
                    problems.append(f"{where}:{node.lineno} uses {target}.{node.attr}")
    return problems


def test_no_module_uses_another_modules_private_names():
    problems = private_uses()
    assert not problems, ("uses of other modules' private names (make the name public in its module, or keep "
                          "the use inside that module):\n" + "\n".join(problems))


def test_every_module_has_a_layer():
    missing = [m for m in module_files() if layer_of(m) is None]
    assert not missing, f"modules in no layer (add them to LAYERS): {missing}"


def test_no_module_imports_a_higher_layer():
    problems = upward_imports()
    assert not problems, "imports against the layers (lowest first: " + " -> ".join(
        name for name, _ in LAYERS) + "):\n" + "\n".join(problems)


def test_no_import_cycles_at_module_level():
    cycles = import_cycles()
    assert not cycles, "import cycles among module-level imports:\n" + "\n".join(" -> ".join(c) for c in cycles)


def _copy_tree(tmp_path) -> str:
    import shutil

    shutil.copytree(ROOT, tmp_path / "fastload", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    return str(tmp_path / "fastload")


@pytest.mark.parametrize("where", ["module level", "in a function", "import_module"])
def test_an_upward_import_is_named(tmp_path, where):
    root = _copy_tree(tmp_path)
    path = os.path.join(root, "source", "index.py")
    with open(path, "a", encoding="utf-8") as f:
        f.write({"module level": "\nfrom fastload.loader import DataLoader\n",
                 "in a function": "\n\ndef _late():\n    from fastload.native import runner\n    return runner\n",
                 "import_module": "\n\ndef _late():\n    import importlib\n    return importlib.import_module("
                                  "'fastload.adapters')\n"}[where])
    target, layer = {"module level": ("fastload.loader", "loader"),
                     "in a function": ("fastload.native.runner", "runners"),
                     "import_module": ("fastload.adapters", "adapters")}[where]
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    line = max(n for n, text in enumerate(lines, 1) if target.rpartition(".")[0] in text or target in text)
    problems = upward_imports(root)
    expected = f"fastload{os.sep}source{os.sep}index.py:{line} imports {target} (layer {layer}) from layer source"
    assert expected in problems, problems


def test_a_module_level_cycle_is_found(tmp_path):
    root = _copy_tree(tmp_path)
    with open(os.path.join(root, "source", "index.py"), "a", encoding="utf-8") as f:
        f.write("\nimport fastload.source.urls\n")
    with open(os.path.join(root, "source", "urls.py"), "a", encoding="utf-8") as f:
        f.write("\nfrom fastload.source import index\n")
    cycles = import_cycles(root)
    assert any(set(c) == {"fastload.source.index", "fastload.source.urls"} for c in cycles), cycles


@pytest.mark.parametrize("use", ["from-import", "module alias", "aliased import"])
def test_a_use_of_another_modules_private_name_is_named(tmp_path, use):
    root = _copy_tree(tmp_path)
    path = os.path.join(root, "compat", "explain.py")
    with open(path, "a", encoding="utf-8") as f:
        f.write({"from-import": "\n\ndef _late():\n    from fastload.trace.call import _hidden\n    return _hidden\n",
                 "module alias": "\n\ndef _late():\n    from fastload.trace import call\n    return call._hidden\n",
                 "aliased import": "\n\ndef _late():\n    import fastload.trace.call as t\n    return t._hidden\n"}[use])
    problems = private_uses(root)
    where = f"fastload{os.sep}compat{os.sep}explain.py:"
    assert any(p.startswith(where) and p.endswith("fastload.trace.call._hidden") for p in problems), problems


def folders_without_init(root: str = ROOT) -> List[str]:
    """Folders of fastload/ holding Python modules but no __init__.py: setuptools' package
    finder (pyproject.toml) leaves them out of a wheel, and the docstring tests never walk them."""
    return sorted(os.path.relpath(folder, root) for folder, dirs, names in os.walk(root)
                  if "__pycache__" not in folder and any(n.endswith(".py") for n in names)
                  and "__init__.py" not in names)


def test_every_folder_of_modules_is_a_package():
    assert not folders_without_init(), f"add an __init__.py to {folders_without_init()}"
