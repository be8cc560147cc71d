"""The environment: environment.yml (conda) and pyproject.toml (pip) agree, their floors are the releases
the course really needs, and `make lab` gives notebooks the course's commands."""

import importlib.metadata
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _pyproject_requirements() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return set(project["dependencies"]) | {r for extra in project["optional-dependencies"].values() for r in extra}


def _conda_requirements() -> set[str]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_lists = [d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d]
    return {r for r in pip_lists[0] if not r.startswith("-e")}


def test_environment_yml_matches_pyproject():
    pyproject, conda = _pyproject_requirements(), _conda_requirements()
    assert conda - pyproject == set(), f"only in environment.yml: {sorted(conda - pyproject)}"
    assert pyproject - conda == set(), f"only in pyproject.toml: {sorted(pyproject - conda)}"


def test_environment_yml_python_is_one_the_project_supports():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python="))
    minimum = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert minimum.startswith(">=")
    assert tuple(map(int, python.split("=")[1].split("."))) >= tuple(map(int, minimum[2:].split(".")))


# ----------------------------------------------------------------------------- dependency floors
#
# Each floor in pyproject.toml is the first release that has what the course calls (pip does not upgrade
# a requirement that is already satisfied, so a floor that is too low leaves e.g. Colab's older
# transformers in place and lesson 2 fails). Evidence, read in the released wheels' sources and metadata
# (`pip download PACKAGE==VERSION --no-deps`) and in the upstream pull requests:
#
# transformers>=5.0: lesson 2 calls `DataCollatorForLanguageModeling(tokenizer, whole_word_mask=True, seed=0)`,
#   lessons 1-2 read `mask_replace_prob` / `random_replace_prob`. Those two arrive in 4.49.0
#   (huggingface/transformers#35251), `seed` in 4.50.0 (#36497), `whole_word_mask` in 4.57.0 (#39485); but
#   4.57.0 to 4.57.6 call `warnings.warn(str, str)` when `whole_word_mask=True` meets the default
#   `mask_replace_prob=0.8`, so lesson 2's call raises `TypeError: category must be a Warning subclass`.
#   Fixed in 5.0.0 (#42144). Read in each release's `transformers/data/data_collator.py`.
# tokenizers>=0.22: what transformers 5.0 requires (its metadata: `tokenizers>=0.22.0`); the course's own
#   calls (WordPiece model, BertPreTokenizer, BpeTrainer, `ByteLevel(add_prefix_space=)`) are older.
# datasets>=4.2: must work beside transformers 5.0, which requires huggingface-hub>=1.3 (httpx, not
#   requests); 4.2.0 is the first release with huggingface/datasets#7783 ("Support huggingface_hub v0.x and
#   v1.x": 4.1.1 still imports hub errors the old way, 4.2.0 does not and declares `huggingface-hub<2.0`).
#   The calls the course makes (`load_dataset` with a config name and `split=`, the csv/parquet/json
#   builders, `select_columns`) are older.
# torch>=2.4: `torch.is_autocast_enabled(device_type)` and `torch.get_autocast_dtype(device_type)` (model.py)
#   are new in 2.4 (pytorch/pytorch#124359; huggingface/transformers#43509 guards the call for torch<2.4),
#   as is fused AdamW on the CPU (training/pretrain.py).
# peft>=0.18.1: transformers 5.0 refuses older PEFT (huggingface/transformers#41889 sets its minimum to
#   0.18.0, "older PEFT versions will not work anymore"), and 0.18.1 guards its import of `HybridCache`, a
#   class transformers 5 removed, on the transformers version (huggingface/peft commit 41c07f0; vllm-project/
#   vllm#30566 raises its floor to 0.18.1 for that reason). The course calls only `LoraConfig` and
#   `inject_adapter_in_model` on its own modules (bertcourse.training.finetune), which are older.
#
# nbgrader>=0.9.5 (the JupyterLab 4 line), jupyterlab, matplotlib, pyyaml, tqdm and pytest keep the floors
# they had: the course uses long-standing APIs of them, and they were not re-derived here.
FLOORS = {"transformers": "5.0", "tokenizers": "0.22", "datasets": "4.2", "torch": "2.4", "peft": "0.18.1"}


def _declared_floor(package: str) -> str:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for requirement in project["dependencies"]:
        name, _, floor = requirement.partition(">=")
        if name.strip() == package:
            return floor.split(",")[0].strip()
    raise AssertionError(f"pyproject.toml does not ask for {package}")


def test_declared_floors_are_the_documented_ones():
    declared = {package: _declared_floor(package) for package in FLOORS}
    assert declared == FLOORS, "pyproject.toml and the floor table above disagree: update both, with evidence"


def test_installed_versions_meet_the_floors():
    from packaging.version import Version

    for package, floor in FLOORS.items():
        installed = importlib.metadata.version(package)
        assert Version(installed) >= Version(floor), f"{package} {installed} is below the course's floor {floor}"


def _tiny_fast_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    pieces = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "film", "##s", "is", "good", "."]
    core = Tokenizer(models.WordPiece({piece: i for i, piece in enumerate(pieces)}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]")


def test_the_transformers_calls_of_lessons_1_and_2_work():
    import inspect
    import warnings

    from transformers import DataCollatorForLanguageModeling

    parameters = inspect.signature(DataCollatorForLanguageModeling).parameters
    for name in ("seed", "mask_replace_prob", "random_replace_prob", "whole_word_mask"):
        assert name in parameters, f"DataCollatorForLanguageModeling has no {name}= (lessons 1-2 use it)"
    tokenizer = _tiny_fast_tokenizer()
    DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15, seed=0)  # lesson 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # it warns that whole words are always shown as [MASK]
        collator = DataCollatorForLanguageModeling(tokenizer, whole_word_mask=True, seed=0)  # lesson 2
    assert collator.mask_replace_prob == 1.0
    encoded = tokenizer(["the films is good .", "the film ."], padding=True, return_offsets_mapping=True,
                        return_special_tokens_mask=True)
    batch = collator([{key: encoded[key][i] for key in encoded} for i in range(2)])
    assert batch["labels"].shape == batch["input_ids"].shape


def test_the_torch_calls_of_the_model_and_the_trainer_work():
    import torch

    assert torch.is_autocast_enabled("cpu") in (True, False)
    assert isinstance(torch.get_autocast_dtype("cpu"), torch.dtype)
    weight = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.AdamW([weight], lr=0.1, fused=True)
    weight.sum().backward()
    optimizer.step()
    assert (weight < 1).all()


# ----------------------------------------------------------------------------- `make lab`

# Stands in for `jupyter lab`: starts a kernel the way the server does (the server's environment,
# inherited) and runs a shell command in a cell, as a student would.
_KERNEL_PROBE = """
from jupyter_client.manager import start_new_kernel
manager, client = start_new_kernel(kernel_name="python3")
try:
    seen = []
    for cell in ("!bertcourse --help", "!echo bytecode=[$PYTHONDONTWRITEBYTECODE]"):
        client.execute_interactive(cell, timeout=120,
                                   output_hook=lambda message: seen.append(message["content"].get("text", "")))
    print("".join(seen))
finally:
    client.stop_channels()
    manager.shutdown_kernel(now=True)
"""


def test_make_lab_gives_the_kernel_the_course_commands_and_writes_bytecode(tmp_path):
    venv = Path(sys.executable).parent.parent
    probe = tmp_path / "probe.py"
    probe.write_text(_KERNEL_PROBE)
    # A shell where the course's environment is not activated, as when a student types `make lab`.
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                           if p and Path(p).resolve() != (venv / "bin").resolve())
    env = {**os.environ, "PATH": path, "PYTHONDONTWRITEBYTECODE": "1"}  # as on this project's machines
    done = subprocess.run(
        ["make", "-s", "-o", f"{venv}/.installed", "lab", f"VENV={venv}", f"JUPYTER={sys.executable} {probe}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage: bertcourse" in done.stdout, f"`!bertcourse --help` in a `make lab` kernel said:\n{done.stdout}"
    # bytecode is written, so that the kernel and every `!bertcourse` after the first skip compiling torch again
    assert "bytecode=[]" in done.stdout, done.stdout


# Colab runs its kernel on IPython 7.34 and traitlets 5.7 and never upgrades them itself; a student dependency
# that asks for more makes the set-up cell's pip replace them under the running kernel (conflict errors, and
# a kernel that may not start again after a restart). The set-up cell also pins them (COLAB_KEEP), so such a
# floor would make the install fail instead: either way it must not be asked for.
COLAB_PINNED = {"ipython": "7.34.0", "traitlets": "5.7.1", "ipykernel": "6.17.1", "jupyter-client": "6.1.12"}


def test_the_students_dependencies_leave_colabs_kernel_packages_alone():
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for line in project["dependencies"]:
        requirement = Requirement(line)
        if requirement.name in COLAB_PINNED:
            assert requirement.specifier.contains(COLAB_PINNED[requirement.name]), (
                f"{line} excludes Colab's {requirement.name} {COLAB_PINNED[requirement.name]}")


def test_the_setup_cell_pins_the_kernels_packages():
    from bertcourse.colab import COLAB_KEEP

    assert {"torch", *COLAB_PINNED} <= set(COLAB_KEEP)


def test_make_lab_is_a_students_lab_even_where_nbgrader_is_installed(monkeypatch):
    """No nbgrader server extension (nor its log line about a missing nbgrader_config.py) and no nbgrader
    menu or panel in JupyterLab: `make lab` turns both off; `make lab-instructor` keeps them."""
    venv = Path(sys.executable).parent.parent
    shown = subprocess.run(["make", "-s", "-n", "-o", f"{venv}/.installed", "lab", f"VENV={venv}"],
                           cwd=ROOT, capture_output=True, text=True, timeout=60).stdout
    config = ROOT / "jupyter-student"
    assert f'JUPYTER_CONFIG_PATH="{config}"' in shown
    assert all(f"'nbgrader.server_extensions.{x}': False" in shown
               for x in ("formgrader", "validate_assignment", "assignment_list", "course_list"))
    from jupyter_core.paths import jupyter_path
    from jupyterlab_server.config import get_page_config

    monkeypatch.setenv("JUPYTER_CONFIG_PATH", str(config))
    assert "@jupyter/nbgrader" in get_page_config(jupyter_path("labextensions"), None)["disabledExtensions"]
    instructor = subprocess.run(["make", "-s", "-n", "-o", f"{venv}/.installed-instructor", "lab-instructor",
                                 f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True, timeout=60).stdout
    assert "nbgrader" not in instructor and "JUPYTER_CONFIG_PATH" not in instructor
