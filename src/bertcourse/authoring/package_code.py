"""Which package code a lesson's outputs came from: the `bertcourse` modules its cells import, followed through
the imports of those modules, each with a digest of its code.

A lesson's cells can stay the same while a function they call changes what it prints (a new metric, a fixed
bug), and then the committed outputs no longer come from the code next to them. `execute_lessons` records
`code_digests` of the modules a lesson reaches in its provenance; `changed_modules` names those whose code
differs now. The digest reads the module's syntax tree without docstrings, so a reworded docstring, a comment
or a reformatting leaves the outputs in step; any change to what runs does not.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

PACKAGE = "bertcourse"


def package_folder() -> Path:
    """The folder of the installed `bertcourse` package (src/bertcourse in a checkout)."""
    return Path(__file__).resolve().parents[1]


def module_file(module: str, folder: Path | None = None) -> Path | None:
    """The source file of `module` ("bertcourse.x.y") under the package folder, None if it is not a module there."""
    folder = folder or package_folder()
    top, *parts = module.split(".")
    if top != PACKAGE:
        return None
    base = folder.joinpath(*parts)
    for candidate in ((base.with_suffix(".py"),) if parts else ()) + (base / "__init__.py",):
        if candidate.is_file():
            return candidate
    return None


def imported_modules(code: str, folder: Path | None = None) -> set[str]:
    """The `bertcourse` modules that `code` imports directly (`import bertcourse.x`, `from bertcourse.x import y`,
    and `from bertcourse import x` where x is a module). Cells that do not parse (IPython magics) are read line
    by line where they can be."""
    folder = folder or package_folder()
    try:
        tree = ast.parse(code)
    except SyntaxError:
        found: set[str] = set()
        for line in code.splitlines():
            if line.lstrip().startswith(("import ", "from ")):
                found |= imported_modules(line.strip(), folder)
        return found
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == PACKAGE}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == PACKAGE:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names
                      if module_file(f"{node.module}.{alias.name}", folder)}
    return {name for name in found if module_file(name, folder)}


def reached_modules(code: str, folder: Path | None = None) -> set[str]:
    """`imported_modules` of `code` and, transitively, of every package module they import (a package's
    `__init__` included: importing bertcourse.x.y runs bertcourse/__init__ and bertcourse/x/__init__)."""
    folder = folder or package_folder()
    todo, seen = list(imported_modules(code, folder)), set()
    while todo:
        module = todo.pop()
        parents = [".".join(module.split(".")[:k]) for k in range(1, module.count(".") + 1)]
        for name in (module, *parents):
            if name in seen:
                continue
            seen.add(name)
            path = module_file(name, folder)
            if path is not None:
                todo += list(imported_modules(path.read_text(encoding="utf-8"), folder) - seen)
    return seen


def _without_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(getattr(first.value, "value", None), str):
                node.body = node.body[1:] or [ast.Pass()]
    return tree


def code_digest(source: str) -> str:
    """A digest of what `source` runs: its syntax tree without docstrings (comments and layout never reach it)."""
    tree = _without_docstrings(ast.parse(source))
    return hashlib.sha256(ast.dump(tree, include_attributes=False).encode()).hexdigest()[:16]


def code_digests(modules: Iterable[str], folder: Path | None = None) -> dict[str, str]:
    """{module: `code_digest` of its file} for each of `modules`, sorted by name."""
    folder = folder or package_folder()
    digests = {}
    for module in sorted(modules):
        path = module_file(module, folder)
        if path is not None:
            digests[module] = code_digest(path.read_text(encoding="utf-8"))
    return digests


def notebook_code(notebook: Any) -> str:
    """The code cells of `notebook`, one after another."""
    return "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "code")


def changed_modules(recorded: dict[str, str] | None, notebook: Any, folder: Path | None = None) -> list[str]:
    """The modules whose code differs from what `recorded` (a lesson's provenance `package_code`) holds: changed,
    newly reached or no longer reached, each with why. None recorded: every reached module, said so."""
    now = code_digests(reached_modules(notebook_code(notebook), folder), folder)
    if recorded is None:
        return ["(no package code recorded: executed before it was)"] if now else []
    changed = [f"{name} (changed)" for name in sorted(set(now) & set(recorded)) if now[name] != recorded[name]]
    changed += [f"{name} (now imported)" for name in sorted(set(now) - set(recorded))]
    changed += [f"{name} (no longer imported)" for name in sorted(set(recorded) - set(now))]
    return changed


__all__ = ["PACKAGE", "package_folder", "module_file", "imported_modules", "reached_modules", "code_digest",
           "code_digests", "notebook_code", "changed_modules"]
