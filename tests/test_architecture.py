"""The package's dependency structure: no import cycles, and grading never leans on the authoring tools.

`import_graph()` reads `src/bertcourse` with `ast` (nothing is imported), so a test here costs
milliseconds and names the modules of any cycle it finds.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parents[1] / "src"
LONG_MODULE_LINES = 400  # a module longer than this says why in a comment containing "long module:"


def module_files(root: Path = PACKAGE_ROOT, package: str = "bertcourse") -> dict[str, Path]:
    """{dotted module name: file} of every module of `package` under `root`."""
    modules = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _imported(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that `module` imports (anywhere in the file, TYPE_CHECKING blocks included)."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # a relative import: from the module's package upwards
                anchor = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join(anchor + ([base] if base else []))
            # `from package import name`: the submodule when there is one, else the package itself
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in modules:  # `import a.b.c` of a name inside a module: that module
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


def import_graph(root: Path = PACKAGE_ROOT, package: str = "bertcourse") -> dict[str, set[str]]:
    """{module: the modules of the package it imports}, for every module of `package` under `root`."""
    modules = module_files(root, package)
    return {name: _imported(name, path, modules) for name, path in modules.items()}


def find_cycles(graph: dict[str, set[str]], within: str = "") -> list[list[str]]:
    """The import cycles among the modules whose names start with `within` (each as a list of modules,
    first module repeated at the end), found as the graph's strongly connected components."""
    nodes = sorted(m for m in graph if m.startswith(within))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if not successor.startswith(within) or successor not in graph:
                continue
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component) + [sorted(component)[0]])

    for node in nodes:
        if node not in index:
            visit(node)
    return cycles


@pytest.mark.parametrize("within", ["bertcourse.grading", "bertcourse.authoring", "bertcourse"])
def test_no_import_cycles(within):
    cycles = find_cycles(import_graph(), within)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_find_cycles_reports_a_cycle():
    graph = {"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}, "p.d": {"p.a"}}
    assert find_cycles(graph) == [["p.a", "p.b", "p.c", "p.a"]]
    assert find_cycles(graph, within="p.d") == []


def test_import_graph_sees_submodules_and_packages():
    graph = import_graph()
    assert "bertcourse.grading.protocol" in graph["bertcourse.grading.worker"]  # from package.module import name
    assert "bertcourse.grading.batch.feedback" in graph["bertcourse.grading.batch.lanes"]


def test_grading_never_imports_the_authoring_tools():
    graph = import_graph()
    leaning = {module: sorted(m for m in imported if m.startswith("bertcourse.authoring"))
               for module, imported in graph.items() if module.startswith("bertcourse.grading")}
    assert not any(leaning.values()), {m: i for m, i in leaning.items() if i}


@pytest.mark.parametrize("package", ["bertcourse/grading", "bertcourse/grading/batch", "bertcourse/authoring"])
def test_grading_modules_are_short(package):
    long = [f"{path.name}: {len(text.splitlines())} lines"
            for path in sorted((PACKAGE_ROOT / package).glob("*.py"))
            if len((text := path.read_text(encoding="utf-8")).splitlines()) > LONG_MODULE_LINES
            and "long module:" not in text]
    assert not long, f"modules over {LONG_MODULE_LINES} lines without a comment saying why: {long}"


# ----------------------------------------------------------------------------- the teaching core

TEACHING_LEAVES = ["bertcourse.model", "bertcourse.tokenizer", "bertcourse.masking", "bertcourse.model_support",
                   "bertcourse.classifier", "bertcourse.heads", "bertcourse.training.devices",
                   "bertcourse.training.optim", "bertcourse.training.loop"]
MODEL_LESSON_LINES = 300  # model.py above its "end of the lesson" line: what lesson 3 asks a student to read
LESSON_END = "# ----------------------------------------------------------------------------- end of the lesson"


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module `start` imports, directly or through others."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for imported in graph.get(todo.pop(), set()):
            if imported not in seen:
                seen.add(imported)
                todo.append(imported)
    return seen


def test_reachable_follows_imports_transitively():
    assert reachable({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}, "a") == {"a", "b", "c"}


@pytest.mark.parametrize("module", TEACHING_LEAVES)
def test_teaching_leaves_never_import_the_course_manifest(module):
    """The profile is resolved at the edges (commands, notebooks' helper, grader) and handed down."""
    graph = import_graph()
    leaning = reachable(graph, module) & {"bertcourse.course", "bertcourse.data"}
    assert not leaning, f"{module} imports {sorted(leaning)} (directly or through another module)"


def test_teaching_leaves_work_outside_a_course_checkout(tmp_path):
    """Without course.yml anywhere (another folder, no BERTCOURSE_ROOT) they mask, build and tokenize."""
    import os
    import subprocess
    import sys

    code = """
import sys, torch
from bertcourse.masking import mask_tokens
from bertcourse.model import ModelConfig, build_model
from bertcourse.tokenizer import train_tokenizer
ids = torch.randint(5, 50, (2, 8))
inputs, labels = mask_tokens(ids, mask_token_id=4, vocab_size=50, special_ids=[0, 1, 2, 3, 4],
                             generator=torch.Generator().manual_seed(0))
model = build_model(ModelConfig(vocab_size=50, d_model=8, n_heads=2, d_ff=16, max_seq_len=8).for_arch("gpt"))
assert model(inputs, labels=ids).loss.item() > 0
assert train_tokenizer(["a cat sat", "a dog sat"] * 5, 30, progress=False).tokenize("a cat") == ["a", "cat"]
print(sorted(m for m in sys.modules if m in ("bertcourse.course", "bertcourse.data")))
"""
    env = {k: v for k, v in os.environ.items() if k != "BERTCOURSE_ROOT"}
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_model_lesson_part_stays_readable_in_one_sitting():
    text = (PACKAGE_ROOT / "bertcourse" / "model.py").read_text(encoding="utf-8")
    assert LESSON_END in text, "model.py lost its 'end of the lesson' line"
    lesson = text[: text.index(LESSON_END)].splitlines()
    assert len(lesson) <= MODEL_LESSON_LINES, f"model.py's lesson part has {len(lesson)} lines"


# ----------------------------------------------------------------------------- pretraining

# The pieces of pretraining in the order they may import each other: each may import those before it
# (and the teaching core), none those after it; the loop (`train`) comes last.
TRAINING_PIECES = ["bertcourse.training.packing", "bertcourse.training.objectives", "bertcourse.training.heldout",
                   "bertcourse.training.checkpoint", "bertcourse.training.plotting"]
TRAINING_LOOP = "bertcourse.training.pretrain"
TEACHING_CORE = ["bertcourse.config", "bertcourse.data", "bertcourse.tokenizer", "bertcourse.masking",
                 "bertcourse.model", "bertcourse.model_support"]
TRAINING_PIECE_LINES = 250


def test_training_modules_import_in_one_direction():
    graph = import_graph()
    order = TRAINING_PIECES + [TRAINING_LOOP]
    for i, module in enumerate(order):
        later = reachable(graph, module) & set(order[i + 1 :])
        assert not later, f"{module} imports {sorted(later)}, which come after it"
    for module in TRAINING_PIECES:  # the profile is read by the loop's front (pretrain) alone
        leaning = reachable(graph, module) & {"bertcourse.course", "bertcourse.data"}
        assert not leaning, f"{module} imports {sorted(leaning)} (directly or through another module)"
    for module in TEACHING_CORE:
        upwards = reachable(graph, module) & set(order)
        assert not upwards, f"{module} (teaching core) imports the training modules {sorted(upwards)}"
    importers = sorted(m for m, imported in graph.items() if TRAINING_LOOP in imported)
    # the command line, and the experiment that pretrains what it lacks before fine-tuning (compare)
    allowed = {"bertcourse.cli", "bertcourse.training.compare"}
    assert set(importers) <= allowed, f"only the commands may import the loop, not {importers}"
    assert not find_cycles({m: graph[m] for m in order}), "import cycle among the training modules"


def test_training_pieces_are_short():
    files = module_files()
    long = {m: n for m in TRAINING_PIECES if (n := len(files[m].read_text().splitlines())) > TRAINING_PIECE_LINES}
    assert not long, f"training modules over {TRAINING_PIECE_LINES} lines: {long}"


def test_the_gpt_shift_is_written_in_one_place():
    """`[:, 1:]` (position t learns token t + 1) appears in one module of the package: the objectives."""
    shifting = sorted(path.name for path in (PACKAGE_ROOT / "bertcourse").rglob("*.py")
                      if "[:, 1:]" in path.read_text(encoding="utf-8"))
    assert shifting == ["objectives.py"], shifting


# ----------------------------------------------------------------------------- docstrings

def undocumented(source: str) -> list[str]:
    """The public classes, functions and methods (names not starting with "_") of `source` without a
    docstring, as `Class.method`; nested functions are the enclosing function's business."""
    missing = []

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            named = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            if named and not node.name.startswith("_"):
                if ast.get_docstring(node) is None:
                    missing.append(prefix + node.name)
                if isinstance(node, ast.ClassDef):
                    visit(node.body, f"{prefix}{node.name}.")

    visit(ast.parse(source).body, "")
    return missing


def test_undocumented_finds_public_names_only():
    source = '''
def shown(): pass
def _private(): pass
class Spec:
    """Documented."""
    def method(self): pass
    def _helper(self): pass
    @property
    def size(self): """Documented."""
'''
    assert undocumented(source) == ["shown", "Spec.method"]


def test_every_public_class_and_function_has_a_docstring():
    """The package is read to learn from: each public name says why it exists (issue 11)."""
    missing = [f"{path.relative_to(PACKAGE_ROOT)}: {name}" for path in module_files().values()
               for name in undocumented(path.read_text(encoding="utf-8"))]
    assert not missing, "public names without a docstring:\n" + "\n".join(missing)


# ----------------------------------------------------------------------------- folders

FOLDER_RULES = {  # folder -> the folders of the package its modules may never import
    "top": {"training", "after_bert", "grading", "authoring"},
    "authoring": {"training", "after_bert"},
    "training": {"after_bert", "grading", "authoring"},
    "after_bert": {"grading", "authoring"},
    "grading": {"training", "after_bert", "authoring"},
}
# Where the top level reaches a wing anyway: the command line imports each command when it runs, and the
# self-grading helper hands a notebook to the grader.
EDGES_ALLOWED = {"bertcourse.cli", "bertcourse.selfgrade"}


def folder_of(module: str) -> str:
    """The wing a module lives in, or "top" for the top level of the package."""
    parts = module.split(".")
    return parts[1] if len(parts) >= 2 and parts[1] in FOLDER_RULES else "top"


def folder_violations(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """{module: the modules it imports against FOLDER_RULES}, for the modules that break a rule."""
    wrong = {module: sorted(m for m in imported if folder_of(m) in FOLDER_RULES.get(folder_of(module), set()))
             for module, imported in graph.items() if module not in EDGES_ALLOWED}
    return {m: i for m, i in wrong.items() if i}


def test_folder_rules_catch_an_upward_import():
    assert folder_of("bertcourse.model") == "top"
    assert folder_of("bertcourse.training.pretrain") == "training"
    assert folder_of("bertcourse.grading.batch.lanes") == "grading"
    planted = {"bertcourse.model": {"bertcourse.training.optim"},
               "bertcourse.training.finetune": {"bertcourse.after_bert.runner", "bertcourse.model"},
               "bertcourse.after_bert.runner": {"bertcourse.training.finetune"},
               "bertcourse.cli": {"bertcourse.training.pretrain"}}
    assert folder_violations(planted) == {"bertcourse.model": ["bertcourse.training.optim"],
                                          "bertcourse.training.finetune": ["bertcourse.after_bert.runner"]}


def test_each_folder_imports_only_downwards():
    wrong = folder_violations(import_graph())
    assert not wrong, f"imports against the folder rules (see docs/developing.md 'How the code is organised'): {wrong}"


def test_module_table_lists_every_module_once():
    """The module table of docs/developing.md names each module of the top level, training/ and after_bert/
    exactly once, and the grading/ and authoring/ folders; nothing it names is missing from the tree."""
    import re

    guide = (PACKAGE_ROOT.parent / "docs" / "developing.md").read_text(encoding="utf-8")
    table = guide.split("<!-- module-table:", 1)[1].split("\n\n", 1)[0]
    named = re.findall(r"`([\w/]+(?:\.py|/))`", "\n".join(line.split("|")[1] for line in table.splitlines()
                                                              if line.startswith("| `")))
    package = PACKAGE_ROOT / "bertcourse"
    tree = [str(p.relative_to(package)) for p in package.glob("*.py") if p.name != "__init__.py"]
    tree += [str(p.relative_to(package)) for wing in ("training", "after_bert")
             for p in (package / wing).glob("*.py") if p.name != "__init__.py"]
    tree += ["grading/", "authoring/"]
    assert sorted(named) == sorted(set(named)), "a module is named twice in docs/developing.md's table"
    assert sorted(named) == sorted(tree), {"not in the table": sorted(set(tree) - set(named)),
                                           "not in the tree": sorted(set(named) - set(tree))}
