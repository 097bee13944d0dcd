"""The server apart from the lab: imports go one way, and the server's dependencies are what it imports.

``service/`` never imports ``lab/`` (statically or by a module-name string); the server's library
never imports its own command line (``cli.py``, ``commands/``), which calls the library; and
``[project.dependencies]`` of pyproject.toml is exactly the set of distributions that importing every
module of the server loads (with their own requirements), no more and no less. The install tests
(tests/test_install.py) check the same on fresh virtual environments. And each room of the server
stays readable on its own (issue 52): no module above 800 lines, no class above 400, with the
exemptions named below and why.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
SERVICE = ROOT / "service"
OWN = {"service", "lab", "clients", "tests"}


#: Functions that import a module named by a string.
IMPORTERS = {"import_module", "__import__", "find_spec", "import_string"}


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import statement and every string constant that names a lab module:
    a dotted ``lab.x`` anywhere, and ``lab`` itself where an importer takes it (the bare word is also
    the command line's ``clickboost lab``, a command's name, not a module)."""
    found: list[tuple[int, str]] = []
    tree = ast.parse(path.read_text(), str(path))
    imported: set[int] = set()  # ids of the constants an importer takes
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in IMPORTERS:
                imported |= {id(a) for a in node.args}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            # `from service import cli` imports service.cli
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
        elif (  # a module-name string, as importlib.import_module("lab...") would take
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and (node.value.startswith("lab.") or (node.value == "lab" and id(node) in imported))
        ):
            found.append((node.lineno, node.value))
    return found


def test_no_module_of_the_service_imports_the_lab() -> None:
    files = sorted(SERVICE.rglob("*.py"))
    assert len(files) > 30  # the walk sees the package
    offenders = [
        f"{path.relative_to(ROOT)}:{line} {module}"
        for path in files
        for line, module in _imports(path)
        if module == "lab" or module.startswith("lab.")
    ]
    assert offenders == []


def test_the_library_never_imports_the_command_line() -> None:
    """Issue 37: the command line parses arguments and calls the library (runtime, stores, OPE),
    never the reverse. ``__main__.py`` is the command line's entry point (``python -m service``)."""
    command_line = {SERVICE / "cli.py", SERVICE / "__main__.py"}
    library = [
        p
        for p in sorted(SERVICE.rglob("*.py"))
        if p not in command_line and p.relative_to(SERVICE).parts[0] != "commands"
    ]
    assert SERVICE / "ope.py" in library and SERVICE / "evaluations.py" in library
    offenders = [
        f"{path.relative_to(ROOT)}:{line} {module}"
        for path in library
        for line, module in _imports(path)
        if module in ("service.cli", "service.commands")
        or module.startswith(("service.cli.", "service.commands."))
    ]
    assert offenders == []


#: Largest module and class a reader is asked to hold in mind at once (issue 52).
MAX_MODULE_LINES = 800
MAX_CLASS_LINES = 400
#: Modules exempt from both limits, and why.
SIZE_EXEMPT = {
    # The store back-ends: each implements the whole Store interface (about 35 methods) against one
    # engine, with the SQL or Lua of each operation beside the method that runs it, so that one file
    # shows how that engine keeps every guarantee (exactly once, durability, atomic claims).
    "service/store/memory.py": "a store back-end",
    "service/store/sqlite.py": "a store back-end",
    "service/store/redis.py": "a store back-end",
}


def _size_exempt(path: Path) -> bool:
    """Exempt from the size limits: a store back-end, or a module of compiled kernels (numba
    functions over plain arrays: each hot loop is one function, the file a family of them)."""
    return path.relative_to(ROOT).as_posix() in SIZE_EXEMPT or path.name.endswith("kernels.py")


def test_no_module_of_the_service_is_over_800_lines_or_holds_a_class_over_400() -> None:
    files = sorted(SERVICE.rglob("*.py"))
    assert all((ROOT / p).is_file() for p in SIZE_EXEMPT)  # an exemption names a module that exists
    assert any(p.name.endswith("kernels.py") for p in files)
    too_long: list[str] = []
    for path in files:
        if _size_exempt(path):
            continue
        text = path.read_text()
        where = path.relative_to(ROOT).as_posix()
        if (n := len(text.splitlines())) > MAX_MODULE_LINES:
            too_long.append(f"{where}: {n} lines")
        for node in ast.walk(ast.parse(text, where)):
            if isinstance(node, ast.ClassDef):
                lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if lines > MAX_CLASS_LINES:
                    too_long.append(f"{where}: class {node.name} {lines} lines")
    assert too_long == [], f"over {MAX_MODULE_LINES} lines a module or {MAX_CLASS_LINES} a class"


def test_the_lab_imports_the_service() -> None:
    # the other direction holds by construction; this checks the scan above would see an import
    lab = [m for p in sorted((ROOT / "lab").rglob("*.py")) for _, m in _imports(p)]
    assert any(m.startswith("service.") for m in lab)


_PROBE = """
import importlib, json, pkgutil, sys
at_start = set(sys.modules)  # the interpreter's own start-up (site, .pth hooks) is not the server's
import service
for mod in pkgutil.walk_packages(service.__path__, prefix="service."):
    if not mod.name.endswith("__main__"):  # that one runs the command line
        importlib.import_module(mod.name)
import uvicorn.loops.auto, uvicorn.protocols.http.auto  # what `serve` loads when it starts uvicorn
from service.api.app import create_app
create_app()
print(json.dumps(sorted({name.partition(".")[0] for name in set(sys.modules) - at_start})))
"""


def _imported_top_level() -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def _closure(requirements: list[str]) -> set[str]:
    """Canonical names of the distributions these requirements install, with their own requirements."""
    seen: set[str] = set()
    todo = [(Requirement(r), frozenset()) for r in requirements]
    while todo:
        req, _ = todo.pop()
        name = canonicalize_name(req.name)
        extras = req.extras
        key = name + "[" + ",".join(sorted(extras)) + "]"
        if key in seen:
            continue
        seen.add(key)
        seen.add(name)
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue  # an optional requirement not installed here (its marker may not apply)
        for text in dist.requires or []:
            sub = Requirement(text)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in (extras or {""})):
                todo.append((sub, frozenset()))
    return {s for s in seen if "[" not in s}


def test_server_dependencies_are_what_the_server_imports() -> None:
    from importlib.metadata import packages_distributions

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    allowed = _closure(declared)
    owners = packages_distributions()
    imported = _imported_top_level()
    assert "lab" not in imported  # nothing in the server loads the lab at run time either
    third_party = {
        canonicalize_name(dist)
        for top in imported - OWN - set(sys.stdlib_module_names)
        for dist in owners.get(top, [])
    }
    assert third_party, "the probe saw no third-party import"
    # numpy.f2py (which scipy loads) imports charset_normalizer when it happens to be installed and
    # does without it otherwise: an optional import, not a dependency. numba imports scipy the same
    # way (a version check at import, where scipy is installed: river, a dev dependency, needs it).
    optional = {"charset-normalizer", "scipy"}
    assert sorted(third_party - allowed - optional) == [], "imported but not a (transitive) server dependency"
    direct = {canonicalize_name(Requirement(r).name) for r in declared}
    assert sorted(direct - third_party) == [], "declared server dependency that the server never imports"
    for heavy in ("matplotlib", "tqdm", "vowpalwabbit", "river", "httpx"):
        assert heavy not in allowed, f"{heavy} is a server dependency"
