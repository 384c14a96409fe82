"""A cached folder is reused only when finished under the same key; an interrupted build
leaves only ``.partial``, which the next build starts over."""

from __future__ import annotations

import json

import pytest

from paco_reward.cached_folder import cache_key, is_cached, partial_folder, publish_folder


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
    with pytest.raises(ValueError, match="cache 'key'"):
        publish_folder(work, tmp_path / "model", "info.json", {"seconds": 1.0})
