"""The layers of the data package (`data.LAYERS`): every import of every module of data/,
module-level or inside a function, goes to its own layer or a lower one, names a module that
exists, and no modules import each other in a circle."""

from __future__ import annotations

import ast
import pathlib

import pytest

import data

DATA = pathlib.Path(data.__file__).parent
FORBIDDEN = ("train", "models")  # data never imports these (DESIGN.md)


def module_name(path: pathlib.Path, root: pathlib.Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules(root: pathlib.Path) -> dict[str, pathlib.Path]:
    """{dotted name: file} of every module of the package at `root` (packages by __init__)."""
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def top_level_names(path: pathlib.Path) -> set[str]:
    """The names a module's top level defines (what `from module import name` can take)."""
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def imports(name: str, path: pathlib.Path, modules: dict) -> list[tuple[int, str]]:
    """(line, imported name) of every import in the file, in functions too; `from P import X`
    names P.X when that is a module, or when P is a package that defines no X (a module that is
    not there), else P. Relative imports are resolved."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                missing = (base in modules and modules[base].name == "__init__.py"
                           and alias.name not in top_level_names(modules[base]))
                found.append((node.lineno, full if full in modules or missing else base))
    return found


def layer_of(name: str, layers) -> int | None:
    for i, members in enumerate(layers):
        if any(name == m or name.startswith(m + ".") for m in members):
            return i
    return None


def problems(root: pathlib.Path, layers) -> list[str]:
    """Every breach of the layering of the package at `root` (empty when there is none)."""
    modules = package_modules(root)
    top = root.name
    found, graph = [], {name: set() for name in modules}
    for name, path in modules.items():
        if name == top:
            continue
        layer = layer_of(name, layers)
        if layer is None:
            found.append(f"{name} is in no layer of {top}.LAYERS")
            continue
        for line, target in imports(name, path, modules):
            where = f"{path.relative_to(root.parent)}:{line}"
            if target.split(".")[0] in FORBIDDEN:
                found.append(f"{where} imports {target}: {top} never imports {FORBIDDEN}")
            if target.split(".")[0] != top or target == top:
                continue
            if target not in modules:
                found.append(f"{where} imports {target}, which is not a module of {top}/")
                continue
            graph[name].add(target)
            target_layer = layer_of(target, layers)
            if target_layer is not None and target_layer > layer:
                found.append(f"{where} imports {target}, a higher layer ({layers[target_layer]} "
                             f"above {layers[layer]})")
    return found + [" -> ".join(c) for c in cycles(graph)]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One closed path for each back edge a depth-first search meets."""
    state, stack, found = {}, [], []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def test_data_imports_follow_the_layers():
    assert problems(DATA, data.LAYERS) == []


def test_every_layer_names_a_module_or_package():
    modules = package_modules(DATA)
    assert [m for members in data.LAYERS for m in members if m not in modules] == []


@pytest.mark.parametrize("source, expected", [
    ({"low.py": "import pkg.high\n"}, "pkg/low.py:1 imports pkg.high, a higher layer"),
    ({"low.py": "def f():\n    from pkg import high\n"},  # in a function too
     "pkg/low.py:2 imports pkg.high, a higher layer"),
    ({"high.py": "from . import gone\n"}, "imports pkg.gone, which is not a module of pkg/"),
    ({"high.py": "import models.vit\n"}, "imports models.vit: pkg never imports"),
    ({"stray.py": ""}, "pkg.stray is in no layer of pkg.LAYERS"),
    ({"high.py": "from pkg.sub import b\n", "sub/a.py": "from pkg.sub import b\n",
      "sub/b.py": "from pkg.sub import a\n"}, "pkg.sub.b -> pkg.sub.a -> pkg.sub.b"),
])
def test_a_breach_is_named(tmp_path, source, expected):
    """A small package of three layers (low, sub, high) with one breach planted."""
    root = tmp_path / "pkg"
    files = {"__init__.py": "", "low.py": "", "high.py": "",
             "sub/__init__.py": "", "sub/a.py": "", "sub/b.py": "", **source}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    layers = (("pkg.low",), ("pkg.sub",), ("pkg.high",))
    found = problems(root, layers)
    assert len(found) == 1 and expected in found[0], found


def test_models_never_import_train_or_data():
    """models/ are pure modules (DESIGN.md): nothing of the trainer or the data, in functions too."""
    import models

    root = pathlib.Path(models.__file__).parent
    modules = package_modules(root)
    found = [f"{path.relative_to(root.parent)}:{line} imports {target}"
             for name, path in modules.items() for line, target in imports(name, path, modules)
             if target.split(".")[0] in ("train", "data")]
    assert found == []
