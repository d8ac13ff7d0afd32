"""The architecture as a test: no import circles, arrows only down the layers, and tools that
import the public tool API and nothing else of the package.

Every import statement counts, also those inside functions and under `if TYPE_CHECKING:`:
a lazy import still ties two modules together, and a circle hidden in a function is one
refactor away from breaking at import time. The rules are plain data, just below.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("chat_agent", "tools", "server.py")  # what is walked, relative to ROOT

# chat_agent's layers, top to bottom: a module may import its own layer or lower ones.
LAYERS: dict[str, int] = {
    "chat_agent.web": 7,
    "chat_agent.sessions": 6,
    "chat_agent.agent": 5,
    "chat_agent.tooling": 4,
    "chat_agent.canvas": 3, "chat_agent.files": 3, "chat_agent.knowledge": 3, "chat_agent.context": 3,
    "chat_agent.model": 2, "chat_agent.quotas": 2,
    "chat_agent.store": 1,
    "chat_agent.protocol": 0, "chat_agent.config": 0, "chat_agent.ids": 0, "chat_agent.clock": 0, "chat_agent.text": 0, "chat_agent.edits": 0,
    "chat_agent.per_loop": 0, "chat_agent.rejection": 0, "chat_agent.tracing": 0, "chat_agent.urgency": 0,
    "chat_agent.eager": 0,
}
# Outside the layers: what each may import of chat_agent (itself included).
SEPARATE: dict[str, set[str]] = {"chat_agent.client": {"chat_agent.client", "chat_agent.protocol"}}
EXEMPT = {"chat_agent"}  # its __init__ lazily exposes create_app and Settings
PACKAGE = "chat_agent"
TOOLS = "tools"  # the top-level package of tools
TOOL_API = "chat_agent.tooling"  # all a tool may import of chat_agent, exactly this module


@dataclass(frozen=True, slots=True)
class Import:
    source: str  # importing module
    target: str  # imported module, resolved
    where: str  # path:line of the statement

    def __str__(self) -> str:
        return f"{self.where}: {self.source} imports {self.target}"


def find_modules(root: Path, sources=SOURCES) -> dict[str, Path]:
    """Module name → file relative to root; a package's `__init__.py` is the module of the package."""
    found: dict[str, Path] = {}
    for source in sources:
        path = root / source
        files = [path] if path.is_file() else sorted(path.rglob("*.py")) if path.is_dir() else []
        for file in files:
            file = file.relative_to(root)
            parts = list(file.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = file
    return found


def _base(module: str, file: Path, level: int) -> str:
    package = module if file.name == "__init__.py" else module.rpartition(".")[0]
    parts = package.split(".") if package else []
    return ".".join(parts[:len(parts) - (level - 1)])


def _targets(node: ast.AST, module: str, file: Path, known: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    assert isinstance(node, ast.ImportFrom)
    base = node.module or ""
    if node.level:
        prefix = _base(module, file, node.level)
        base = ".".join(p for p in (prefix, node.module) if p)
    # `from X import name` is an import of the module X.name when there is one.
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]


def find_imports(root: Path, sources=SOURCES) -> tuple[dict[str, Path], list[Import]]:
    known = find_modules(root, sources)
    imports: list[Import] = []
    for module, file in known.items():
        tree = ast.parse((root / file).read_text(encoding="utf-8"), str(file))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                where = f"{file}:{node.lineno}"
                imports += [Import(module, target, where) for target in _targets(node, module, file, known)]
    return known, imports


def _ours(name: str) -> bool:
    return any(name == top or name.startswith(top + ".") for top in (PACKAGE, TOOLS))


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one module, iteratively (no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


# ---- the rules: each returns one readable line per violation -------------------------------


def circles(known: dict[str, Path], imports: list[Import]) -> list[str]:
    graph: dict[str, set[str]] = {module: set() for module in known}
    for imp in imports:
        if imp.target in known and imp.target != imp.source:
            graph[imp.source].add(imp.target)
    problems = []
    for component in strongly_connected(graph):
        members = set(component)
        arrows = [str(i) for i in imports if i.source in members and i.target in members and i.source != i.target]
        problems.append(f"circle among {', '.join(component)}:\n      " + "\n      ".join(sorted(set(arrows))))
    return problems


def layer_of(module: str) -> int | None:
    matches = [prefix for prefix in LAYERS if _within(module, prefix)]
    return LAYERS[max(matches, key=len)] if matches else None


def layers(known: dict[str, Path], imports: list[Import]) -> list[str]:
    problems = []
    for module in sorted(known):
        separate = any(_within(module, s) for s in SEPARATE)
        if _within(module, PACKAGE) and module not in EXEMPT and not separate and layer_of(module) is None:
            problems.append(f"{known[module]}: {module} is in no layer (add it to LAYERS)")
    for imp in imports:
        if imp.source in EXEMPT or not _within(imp.source, PACKAGE) or not _within(imp.target, PACKAGE):
            continue
        home = next((s for s in SEPARATE if _within(imp.source, s)), None)
        if home is not None:
            if not any(_within(imp.target, allowed) for allowed in SEPARATE[home]):
                problems.append(f"{imp} ({home} may import only {', '.join(sorted(SEPARATE[home]))})")
            continue
        if any(_within(imp.target, s) for s in SEPARATE):
            problems.append(f"{imp} (that package stands apart from the layers)")
            continue
        low, high = layer_of(imp.source), layer_of(imp.target)
        if low is not None and high is not None and high > low:
            problems.append(f"{imp}: up from layer {low} to layer {high}")
    return problems


def package_imports_tools(known: dict[str, Path], imports: list[Import]) -> list[str]:
    return [f"{imp} (the package must not import the top-level tools)" for imp in imports
            if _within(imp.source, PACKAGE) and _within(imp.target, TOOLS)]


def tools_use_the_tool_api(known: dict[str, Path], imports: list[Import]) -> list[str]:
    return [f"{imp} (a tool may import only {TOOL_API})" for imp in imports
            if _within(imp.source, TOOLS) and _within(imp.target, PACKAGE) and imp.target != TOOL_API]


def unresolved(known: dict[str, Path], imports: list[Import]) -> list[str]:
    """An import of ours that names no module file: the other rules could not judge it."""
    return [f"{imp}, which is no module here" for imp in imports if _ours(imp.target) and imp.target not in known]


RULES: dict[str, Callable[[dict[str, Path], list[Import]], list[str]]] = {
    "no import circles": circles,
    "arrows run down the layers": layers,
    "chat_agent does not import tools": package_imports_tools,
    "tools import only the tool API": tools_use_the_tool_api,
    "every import of ours resolves": unresolved,
}


def check(root: Path, sources=SOURCES) -> dict[str, list[str]]:
    known, imports = find_imports(root, sources)
    return {name: rule(known, imports) for name, rule in RULES.items()}


@pytest.fixture(scope="module")
def found() -> dict[str, list[str]]:
    return check(ROOT)


@pytest.mark.parametrize("rule", list(RULES))
def test_architecture(found: dict[str, list[str]], rule: str):
    problems = found[rule]
    assert not problems, f"{rule}: {len(problems)} violation(s)\n  " + "\n  ".join(problems)


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_the_checker_sees_every_kind_of_violation(tmp_path: Path):
    _write(tmp_path, {
        "chat_agent/__init__.py": "",
        "chat_agent/store/__init__.py": "def later():\n    from ..web import app\n",  # up, and a circle
        "chat_agent/web/__init__.py": "",
        "chat_agent/web/app.py": "from chat_agent.store import Thing\nimport tools.helper\n",
        "chat_agent/client/__init__.py": "from typing import TYPE_CHECKING\n"
                                         "if TYPE_CHECKING:\n    from chat_agent.config import Settings\n",
        "chat_agent/config.py": "import json\n",
        "chat_agent/tooling/__init__.py": "from . import _types\n",
        "chat_agent/tooling/_types.py": "",
        "tools/__init__.py": "from chat_agent.tooling import ToolContext\nfrom . import helper\n",
        "tools/helper.py": "from chat_agent.tooling._types import X\nfrom chat_agent import config\n",
        "tools/sub/__init__.py": "from chat_agent.gone import Y\n",
    })
    found = check(tmp_path, ("chat_agent", "tools"))
    assert [p.splitlines()[0] for p in found["no import circles"]] == [
        "circle among chat_agent.store, chat_agent.web.app:"]
    assert sorted(p.split(": ", 1)[1] for p in found["arrows run down the layers"]) == [
        "chat_agent.client imports chat_agent.config (chat_agent.client may import only chat_agent.client, "
        "chat_agent.protocol)",
        "chat_agent.store imports chat_agent.web.app: up from layer 1 to layer 7"]
    assert found["chat_agent does not import tools"] == [
        "chat_agent/web/app.py:2: chat_agent.web.app imports tools.helper (the package must not import the "
        "top-level tools)"]
    assert sorted(p.split(": ", 1)[1] for p in found["tools import only the tool API"]) == [
        "tools.helper imports chat_agent.config (a tool may import only chat_agent.tooling)",
        "tools.helper imports chat_agent.tooling._types (a tool may import only chat_agent.tooling)",
        "tools.sub imports chat_agent.gone (a tool may import only chat_agent.tooling)"]
    assert found["every import of ours resolves"] == [
        "tools/sub/__init__.py:1: tools.sub imports chat_agent.gone, which is no module here"]


# ---- the sessions core: callbacks are given at construction, and the hub only composes ------------

HUB = ROOT / "chat_agent" / "sessions" / "hub.py"
HUB_LINES = 250
WIRED_AT_CONSTRUCTION = ("chat_agent/sessions", "chat_agent/store/writer.py", "chat_agent/canvas/artifact.py")


def late_callbacks(root: Path, sources=WIRED_AT_CONSTRUCTION) -> list[str]:
    """Attributes that get a function after their object was made: a lambda assigned to an
    attribute outside `__init__`, or any `on_…` attribute assigned on another object."""
    found = []
    for file in find_modules(root, sources).values():
        tree = ast.parse((root / file).read_text(encoding="utf-8"))
        for function in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
            for node in ast.walk(function):
                if not isinstance(node, ast.Assign):
                    continue
                for target in node.targets:
                    if not isinstance(target, ast.Attribute):
                        continue
                    on_other = not (isinstance(target.value, ast.Name) and target.value.id == "self")
                    late = function.name != "__init__" and isinstance(node.value, ast.Lambda)
                    if late or (on_other and target.attr.startswith("on_")):
                        found.append(f"{file}:{node.lineno}: {ast.unparse(target)} = {ast.unparse(node.value)}")
    return found


def test_no_callback_is_wired_after_construction():
    assert late_callbacks(ROOT) == []


def test_the_checker_sees_a_late_callback(tmp_path: Path):
    _write(tmp_path, {"chat_agent/sessions/x.py": "class A:\n    def __init__(self, b):\n        self.f = lambda: 1\n"
                                                  "        b.on_lost = self.g\n    def wire(self):\n"
                                                  "        self.h = lambda: 2\n"})
    assert late_callbacks(tmp_path, ("chat_agent/sessions",)) == [
        "chat_agent/sessions/x.py:4: b.on_lost = self.g", "chat_agent/sessions/x.py:6: self.h = lambda: 2"]


def test_the_hub_only_composes():
    lines = len(HUB.read_text(encoding="utf-8").splitlines())
    assert lines <= HUB_LINES, f"sessions/hub.py has {lines} lines; it composes, it does not do the work"
