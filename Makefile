# The PyTorch GPU optimization cookbook. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV ?= .venv
# PYTHON=python3 runs with a ready interpreter and skips the venv (e.g. a GPU image without internet)
PYTHON ?=
ifeq ($(PYTHON),)
PY := $(VENV)/bin/python
SETUP := $(VENV)/.installed
else
PY := $(PYTHON)
SETUP :=
endif
ARGS ?=
HOST ?= 127.0.0.1
PORT ?= 6006
# a long target ends with the time its user waited for it: "make recipe-amp: 2 min 41 s"
TIMED = start=$$(date +%s); trap 'rc=$$?; t=$$(( $$(date +%s) - start )); echo "make $@: $$((t / 60)) min $$((t % 60)) s"; exit $$rc' EXIT;
RECIPES := $(sort $(patsubst recipes/%/__init__.py,%,$(wildcard recipes/*/__init__.py)))

.PHONY: help setup lock doctor gpu-check tour finalize recipes index readme baselines ladder test traces browser tensorboard clean trace-diff

help: ## list the targets
	@echo "Quick start: make recipe-amp (the main job), make test (the CPU test suite)."
	@grep -hE '^[a-zA-Z%_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'
	@echo "Recipes: $(RECIPES). Extra runner flags: ARGS='--smoke' or ARGS='--rounds 5 -- --steps 200'."

# The venv holds exactly the lock (the versions CI tests); redone only when the lock changes. First, where
# nvidia-smi sees a GPU that the locked torch (CUDA 13) cannot use, one line says what to run instead
# (common/startup.py): TORCH_INDEX=cu126 installs the same torch built for CUDA 12.6 over the lock's,
# and the venv keeps that choice (.venv/.torch-index) until another is given.
RECORDED_INDEX := $(shell cat $(VENV)/.torch-index 2>/dev/null)
TORCH_INDEX ?= $(RECORDED_INDEX)
SKIP_GPU_CHECK ?=
LOCKED = $(shell sed -n 's/^$(1)==\([^ ;]*\).*/\1/p' requirements.lock)
ifneq ($(TORCH_INDEX),$(RECORDED_INDEX))
$(VENV)/.installed: FORCE
endif
FORCE:

# Another build installs its torch first, then the lock less torch and the lock's CUDA wheels (two builds'
# CUDA libraries would share folders).
$(VENV)/.installed: requirements.lock
	@$(if $(SKIP_GPU_CHECK),,python3 -m common.startup --setup $(if $(TORCH_INDEX),--index $(TORCH_INDEX)))
	rm -rf $(VENV)
	python3 -m venv $(VENV)
	$(if $(TORCH_INDEX),$(VENV)/bin/python -m pip install torch==$(call LOCKED,torch)+$(TORCH_INDEX) \
		torchvision==$(call LOCKED,torchvision)+$(TORCH_INDEX) --index-url https://download.pytorch.org/whl/$(TORCH_INDEX) \
		&& python3 -m common.startup --lock-without-cuda > $(VENV)/lock-without-cuda.txt \
		&& $(VENV)/bin/python -m pip install -r $(VENV)/lock-without-cuda.txt \
		&& echo $(TORCH_INDEX) > $(VENV)/.torch-index,$(VENV)/bin/python -m pip install -r requirements.lock)
	touch $@

setup: $(SETUP) ## create .venv from requirements.lock (automatic for every target; TORCH_INDEX=cu126 for an older driver or GPU)

UV_VERSION := 0.13.9
# uv runs from its own venv so the project's venv stays exactly the lock
lock: ## re-resolve requirements.txt (+ constraints.txt) into requirements.lock with uv
	python3 -m venv .venv-lock
	.venv-lock/bin/python -m pip install -q uv==$(UV_VERSION)
	.venv-lock/bin/uv pip compile requirements.txt --constraints constraints.txt --universal \
		--python-version 3.10 --output-file requirements.lock

recipe-%: $(SETUP) ## run a recipe's slow/fast pairs -> reports/local/<recipe>.md (e.g. make recipe-amp)
	@$(TIMED) $(PY) -m common.runners.compare $* $(ARGS)

recipes: $(SETUP) ## run every recipe (a failure does not stop the others) -> reports/local/README.md
	@$(TIMED) status=0; for r in $(RECIPES); do echo "== make recipe-$$r"; $(PY) -m common.runners.compare $$r $(ARGS) || status=1; done; \
	$(PY) -m common.render.index; exit $$status

sweep-%: $(SETUP) ## the regime map: a recipe's pair across batch size (or workers) -> reports/local/sweep_<recipe>.md
	@$(TIMED) $(PY) -m common.runners.sweep $* $(ARGS)

SCRIPT ?=
FLAGS ?=
doctor: $(SETUP) ## diagnose your own script: make doctor SCRIPT=path/to/train.py ARGS='its args' (FLAGS='--step forward')
	@$(TIMED) $(PY) -m common.runners.doctor $(if $(SCRIPT),"$(SCRIPT)") $(FLAGS) -- $(ARGS)

diagnose-%: $(SETUP) ## the four-phase diagnosis of a baseline -> reports/local/baseline_<workload>.md (churn, resnet18)
	@$(TIMED) $(PY) -m common.runners.diagnose $* $(ARGS)

baselines: $(SETUP) ## diagnose both naive baselines (make diagnose-churn, make diagnose-resnet18)
	@$(TIMED) status=0; for w in churn resnet18; do $(PY) -m common.runners.diagnose $$w $(ARGS) || status=1; done; exit $$status

ladder: $(SETUP) ## climb the three ladders (churn, ResNet-18, GPT), naive -> every technique -> reports/local/ladder_<workload>.md
	@$(TIMED) $(PY) -m common.runners.climb $(ARGS)

gpu-check: $(SETUP) ## on a GPU first: the GPU tests, every recipe, sweep, ladder and diagnosis once, small, one line each
	@$(TIMED) $(PY) -m common.runners.tour --check $(ARGS)

tour: $(SETUP) ## on one GPU in one sitting: the A/A, then each recipe's main pair (3 rounds), within ARGS='--budget 480' -> a bundle
	@$(TIMED) $(PY) -m common.runners.tour $(ARGS)

BUNDLE ?=
finalize: $(SETUP) ## a tour's bundle into the reports, the overview and the README's column, anywhere: make finalize BUNDLE=DIR
	@$(TIMED) $(PY) -m common.runners.finalize $(BUNDLE) $(ARGS)

index: $(SETUP) ## re-render reports/local/README.md and overview.png from the saved results
	$(PY) -m common.render.index

readme: $(SETUP) ## the README's recipe table, its GPU column rewritten from the committed reports (ARGS=--check: only say)
	@$(PY) -m common.render.readme $(ARGS)

A ?=
B ?=
trace-diff: $(SETUP) ## two profiler traces' ops and kernels matched by name, the largest change first: make trace-diff A=before.pt.trace.json B=after.pt.trace.json
	@$(PY) -m common.render.roofline $(A) $(B) $(ARGS)

diff-%: $(SETUP) ## print each slow/fast pair of a recipe side by side (e.g. make diff-amp)
	@$(PY) -m common.render.diffs $*

report-%: $(SETUP) ## re-render reports/local/<recipe>.md from the saved results
	$(PY) -m common.render.report $*

ncu-%: $(SETUP) ## the heaviest kernels of one step of each twin under Nsight Compute -> reports/local/ncu_<recipe>.md (needs ncu and a GPU)
	@$(TIMED) $(PY) -m common.runners.ncu $* $(ARGS)

nsys-%: $(SETUP) ## run a recipe's pairs under Nsight Systems with NVTX ranges (needs nsys)
	$(PY) -m common.runners.nsys $* $(ARGS)

traces: $(SETUP) ## every profiled run's page (one self-contained HTML file beside its trace, no network needed) listed, written where missing; ARGS='--serve' serves them on http://127.0.0.1:8008 (--port N)
	@$(PY) -m common.render.trace_page --all $(ARGS)

tensorboard: $(SETUP) ## serve reports/local/traces on http://127.0.0.1:6006 (HOST=, PORT= to change)
	$(PY) -m common.render.tensorboard --host $(HOST) --port $(PORT)

# the files that hold timing tests (marked alone): the second run collects these only, with no fork server
# (COOKBOOK_ZYGOTE=0: they time steps in their own process, and the server's start is 14 s of Inductor's warm-up)
ALONE_FILES = $(shell grep -l "mark.alone" tests/*/test_*.py)

# the trace page's test opens it in headless Chromium with the network off: Debian's package, where the machine
# lets this user install it (else that one test says it was skipped, and why)
browser:
	@command -v chromium > /dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get > /dev/null && \
	  timeout 300 apt-get install -y -q chromium > /dev/null 2>&1 && echo "installed chromium (the trace page's test)"; } \
	  || echo "no chromium: tests/integration/test_trace_page.py's browser test will be skipped (apt-get install chromium)"

test: $(SETUP) browser ## lint (ruff), then the CPU test suite on every core, then the timing tests alone, as CI runs it
	@$(TIMED) $(PY) -m ruff check . && \
	$(PY) -m pytest -q -n auto --dist loadgroup -m "not alone" --durations=15 && \
	COOKBOOK_ZYGOTE=0 $(PY) -m pytest -q -m alone --durations=5 $(ALONE_FILES)

clean: ## delete every local run's reports (reports/local/), results, traces and cached ceilings (committed reports stay)
	rm -rf reports/local reports/results reports/traces
	rm -f $${COOKBOOK_DATA_DIR:-data}/matmul_ceilings.json
