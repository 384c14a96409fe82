"""Fixtures of the annotation app's tests: a small synthetic work folder, the app in-process
(FastAPI TestClient), ``paco-data annotate`` as a subprocess, and a headless Chromium.

The browser is Debian's ``chromium`` driven through ``chromedriver`` (``make test`` installs
both). Without them the browser tests fail with the command that installs them: they never
skip.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

CHROMIUM = os.environ.get("PACO_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("PACO_CHROMEDRIVER", "/usr/bin/chromedriver")
# Without the background-networking flags Chromium waits on services a closed network
# never answers.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
    "--window-size=1280,900",
    "--force-prefers-reduced-motion",  # no CSS transitions: screenshots show settled pages
)


LOCAL = "http://127.0.0.1"


def make_work(root: Path, n_prompts: int = 3, rule: str = "other_grid", panel_size: int = 96):
    """A synthetic work folder up to stage 3 (instances), as a user has it before ranking."""
    from data_pipeline.generate import ingest_grids
    from data_pipeline.instances import PairingConfig, build_instances
    from data_pipeline.pipeline import SyntheticConfig, make_synthetic_inputs
    from data_pipeline.prompts import prepare_prompts

    work = root / "work"
    config = SyntheticConfig(n_prompts=n_prompts, seed=3, panel_size=panel_size)
    inputs = make_synthetic_inputs(work, config)
    prepare_prompts(inputs["prompts"], work, source="synthetic")
    ingest_grids(inputs["grids"], work)
    build_instances(work, PairingConfig(rule=rule))
    return work


@pytest.fixture
def work(tmp_path):
    """3 synthetic prompts (one per category), 4 grids of 2x2, 'other_grid' instances."""
    return make_work(tmp_path)


@pytest.fixture
def client_for():
    """Factory: ``client_for(work_dir, **config)`` -> a TestClient of the app."""
    from fastapi.testclient import TestClient

    from data_pipeline.annotate import AnnotateConfig, create_app

    def make(work_dir, **kwargs):
        kwargs.setdefault("key_env", "")
        # The app answers only requests addressed to this machine's own names.
        return TestClient(create_app(AnnotateConfig(work_dir, **kwargs)), base_url=LOCAL)

    return make


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def paco_data_command() -> list[str]:
    """The installed ``paco-data`` console script, as a user runs it."""
    script = Path(sys.executable).with_name("paco-data")
    if script.is_file():
        return [str(script)]
    found = shutil.which("paco-data")
    if found is None:
        pytest.fail("the `paco-data` console script is not installed; run `make test`.")
    return [found]


class AnnotateServer:
    """``paco-data annotate WORK ...`` in a subprocess, started, killed and restarted."""

    def __init__(self, work_dir: Path, log_path: Path, *args: str) -> None:
        self.work_dir = work_dir
        self.port = free_port()
        self.args = list(args)
        self.log_path = log_path
        self.process: subprocess.Popen | None = None
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> None:
        command = [
            *paco_data_command(),
            "annotate",
            str(self.work_dir),
            "--port",
            str(self.port),
            *self.args,
        ]
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the process
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"paco-data annotate exited:\n{self.log_path.read_text()}")
            try:
                if httpx.get(f"{self.url}/api/health", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        pytest.fail(
            f"paco-data annotate did not answer in {timeout}s:\n{self.log_path.read_text()}"
        )

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, as when the machine or the process dies."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
        self.process = None


@pytest.fixture
def annotate_server(tmp_path):
    """Factory: ``annotate_server(work_dir, *extra_args)`` -> a started :class:`AnnotateServer`
    (killed at teardown)."""
    servers: list[AnnotateServer] = []

    def start(work_dir, *args):
        server = AnnotateServer(work_dir, tmp_path / f"server{len(servers)}.log", *args)
        servers.append(server)
        server.start()
        return server

    yield start
    for server in servers:
        server.kill()


@pytest.fixture
def browser(tmp_path):
    """A headless Debian Chromium through chromedriver (Selenium)."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).exists()]
    if missing:
        pytest.fail(
            f"browser tests need Chromium and its driver; missing {missing}. Run `make test` "
            "(it installs them) or `apt-get install chromium chromium-driver`; set "
            "PACO_CHROMIUM / PACO_CHROMEDRIVER for other locations."
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()
