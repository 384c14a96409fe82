"""A cached folder is reused only when finished under the same key; an interrupted build
leaves only ``.partial``, which the next build starts over; two processes asking for one
folder build it once."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from paco_reward.cached_folder import (
    build_once,
    cache_key,
    is_cached,
    partial_folder,
    publish_folder,
)
from paco_reward.errors import InputError


def test_a_build_is_reused_only_when_finished_under_its_key(tmp_path):
    out = tmp_path / "model"
    key = cache_key({"config": {"steps": 10}, "version": 1})
    assert key == cache_key({"version": 1, "config": {"steps": 10}})  # key order is irrelevant
    assert key != cache_key({"config": {"steps": 11}, "version": 1})

    work = partial_folder(out)
    (work / "weights.bin").write_bytes(b"half")
    assert not is_cached(out, "info.json", key) and not out.exists()  # interrupted here

    work = partial_folder(out)
    assert list(work.iterdir()) == []  # the next build starts over
    (work / "weights.bin").write_bytes(b"done")
    assert publish_folder(work, out, "info.json", {"key": key, "seconds": 1.5}) == out
    assert is_cached(out, "info.json", key) and not work.exists()
    assert not is_cached(out, "info.json", cache_key({"config": {"steps": 11}}))
    assert json.loads((out / "info.json").read_text())["seconds"] == 1.5

    work = partial_folder(out)
    (work / "weights.bin").write_bytes(b"new")
    publish_folder(work, out, "info.json", {"key": "other"})
    assert (out / "weights.bin").read_bytes() == b"new"


def test_publishing_without_a_key_is_refused(tmp_path):
    work = partial_folder(tmp_path / "model")
    with pytest.raises(InputError, match="cache 'key'"):
        publish_folder(work, tmp_path / "model", "info.json", {"seconds": 1.0})


# A process that builds ``folder`` with build_once; its build records the pid and lasts until
# the file ``release`` exists (so a test decides how long a build takes, whatever the load).
BUILDER = """
import os, sys, time
from pathlib import Path
from paco_reward.cached_folder import build_once

folder, log, release = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])

def build(work):
    with open(log, "a") as handle:
        handle.write(f"{os.getpid()}\\n")
    while not release.exists():
        time.sleep(0.05)
    (work / "weights.bin").write_text(str(os.getpid()))
    return {"builder": os.getpid()}

print(build_once(folder, "info.json", "k1", build))
"""

# A process that takes the build lock, says so, and holds it until it is killed.
HOLDER = """
import sys, time
from pathlib import Path
from paco_reward.cached_folder import build_lock

with build_lock(Path(sys.argv[1])):
    Path(sys.argv[2]).write_text("locked")
    time.sleep(600)
"""


def _python(code: str, *args) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_build_once_reuses_a_finished_build(tmp_path):
    calls = []

    def build(work):
        calls.append(work)
        (work / "weights.bin").write_text("w")
        return {"seconds": 1.0}

    out = tmp_path / "model"
    assert build_once(out, "info.json", "k1", build) == out
    assert build_once(out, "info.json", "k1", build) == out
    assert len(calls) == 1 and calls[0].name == "model.partial"
    assert json.loads((out / "info.json").read_text()) == {"key": "k1", "seconds": 1.0}
    build_once(out, "info.json", "k2", build)  # another key: built again
    assert len(calls) == 2 and is_cached(out, "info.json", "k2")


def test_two_processes_asking_for_one_folder_build_it_once(tmp_path):
    out, log, release = tmp_path / "model", tmp_path / "builds.log", tmp_path / "release"
    first = _python(BUILDER, out, log, release)
    while not log.is_file():  # the first is building
        time.sleep(0.05)
    second = _python(BUILDER, out, log, release)
    second_err = ""
    while "being built by another process; waiting" not in second_err:  # until the second waits
        line = second.stderr.readline()
        assert line, f"the second process ended without waiting: {second_err}"
        second_err += line
    release.touch()  # the first finishes its build
    (first_out, _), (second_out, rest) = first.communicate(60), second.communicate(60)
    assert first.returncode == second.returncode == 0, second_err + rest
    assert first_out.strip() == second_out.strip() == str(out)
    builders = log.read_text().split()
    assert builders == [str(first.pid)]  # the second waited and reused the first's build
    assert json.loads((out / "info.json").read_text())["builder"] == first.pid
    assert (out / "weights.bin").read_text() == str(first.pid)


def test_a_killed_builder_does_not_block_the_next(tmp_path):
    out, locked = tmp_path / "model", tmp_path / "locked"
    holder = _python(HOLDER, out, locked)
    while not locked.is_file():
        time.sleep(0.05)
    holder.kill()
    holder.wait(60)
    start = time.perf_counter()
    build_once(out, "info.json", "k1", lambda work: {"seconds": 0.0})
    assert time.perf_counter() - start < 10 and is_cached(out, "info.json", "k1")
