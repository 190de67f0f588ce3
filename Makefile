# The two set-up commands of the README: `make run` and `make test`.
# Each creates .venv when missing and installs what it needs into it; Debian
# packages the tests or benchmarks use are installed only when missing (and only
# as root), never upgraded.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# import-linter lives in a virtualenv of its own: it needs rich, and structlog
# imports rich when it is there, which would add 0.1 s to every mtad command.
TOOLS  := .venv-tools
CONFIG ?= conf/mtad.toml
# `make test` runs the tests marked serial first, alone on a quiet machine (load
# and rate tests whose bounds assume the cores are theirs; right after the
# parallel run one failed where alone it passed), then the rest on
# two workers, a test file each at a time with its own embedded PostgreSQL
# (about 6 minutes instead of 10 on 2 cores).
# PYTEST_ARGS adds to both runs (PYTEST_ARGS="-k relay"); WORKERS=0 runs serially.
WORKERS ?= 2
PYTEST_ARGS ?=

.PHONY: run test lint bench clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	  { echo "mtad needs Python >= 3.11 (set PYTHON=...)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.run-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.test-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'
	touch $@ $(VENV)/.run-installed

$(TOOLS)/bin/lint-imports:
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install -q "import-linter>=2.1,<3"

# $(call debian,COMMAND,PACKAGE): install PACKAGE when COMMAND is missing.
define debian
	$(call debian_when,command -v $(1),$(2))
endef

# $(call debian_when,TEST,PACKAGE): install PACKAGE when the shell command TEST fails.
define debian_when
	@$(1) >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" != 0 ]; then echo "note: $(2) is not installed (root installs it); what needs it is skipped"; \
	  else echo "installing $(2) from Debian"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get install -y -q --no-install-recommends --no-upgrade $(2) >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends --no-upgrade $(2) >/dev/null 2>&1; } || \
	    echo "note: could not install $(2); what needs it is skipped"; fi; }
endef

run: $(VENV)/.run-installed
	$(BIN)/mtad run --config $(CONFIG)

# promtool comes with Debian's prometheus, whose server the package also enables.
test: $(VENV)/.test-installed $(TOOLS)/bin/lint-imports
	$(call debian,swaks,swaks)
	$(call debian,dnsmasq,dnsmasq)
	$(call debian,opendkim-testmsg,opendkim-tools)
	$(call debian,dovecot,dovecot-imapd)
	$(call debian,promtool,prometheus)
	$(call debian,php,php-cli)
	$(call debian,bsd-mailx,bsd-mailx $$(test -e /usr/sbin/sendmail || echo dma))
	$(call debian,chromium,chromium)
	$(call debian,chromedriver,chromium-driver)
	$(BIN)/python -m pytest -m serial $(PYTEST_ARGS) || [ $$? -eq 5 ]  # 5: PYTEST_ARGS chose none of them
	$(BIN)/python -m pytest $(if $(filter 0,$(WORKERS)),,-n $(WORKERS) --dist loadfile) -m "not serial" $(PYTEST_ARGS)

lint: $(VENV)/.test-installed $(TOOLS)/bin/lint-imports
	$(BIN)/ruff check mtad tests bench
	$(BIN)/ruff format --check mtad tests bench
	$(BIN)/mypy
	PYTHONPATH=. $(TOOLS)/bin/lint-imports --no-cache

# Sisimai (libsisimai-perl) names the recipients the bounces part compares with.
bench: $(VENV)/.test-installed
	$(call debian,smtp-source,postfix)
	$(call debian,opendkim,opendkim)
	$(call debian_when,perl -MSisimai -e1,libsisimai-perl)
	$(BIN)/python -m bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(TOOLS) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
