"""``paco-data annotate`` used as a person would: a real headless Chromium against the real
command in a subprocess. Three instances ranked with the keyboard, one with the mouse; a
reload; the server killed mid-session and restarted; the store, the resumed position, and
the Yes/No pairs ``paco-data pairs`` makes from it.

Takes the README's screenshots, annotate.png and annotate_progress.png, into a temporary
folder, so a test run leaves the checkout as it was; ``make screenshots``
(``PACO_SCREENSHOTS_DIR=docs``) writes them to docs/.
"""

from __future__ import annotations

import json
import os
import subprocess
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from tests.annotate.conftest import make_work, paco_data_command

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.browser, pytest.mark.slow]


def body_data(driver, name: str) -> str:
    return driver.find_element(By.TAG_NAME, "body").get_attribute(f"data-{name}") or ""


def wait_instance(driver, instance_id: str, timeout: float = 15) -> None:
    WebDriverWait(driver, timeout).until(
        lambda d: body_data(d, "instance") == instance_id,
        message=f"page never showed instance {instance_id}",
    )


def ranking_on_page(driver) -> list[list[int]]:
    return json.loads(body_data(driver, "ranking") or "[]")


def press(driver, *keys: str) -> None:
    ActionChains(driver).send_keys(*keys).perform()


def message(driver) -> tuple[str, str]:
    box = driver.find_element(By.ID, "message")
    return box.get_attribute("data-kind") or "", box.text


def drag(driver, source, target, x_offset: int = 0) -> None:
    """Press on ``source``, move in two steps, release over ``target`` (+ offset from its
    centre): real pointer events, as a mouse makes them."""
    (
        ActionChains(driver)
        .move_to_element(source)
        .click_and_hold()
        .move_by_offset(12, 12)
        .move_to_element_with_offset(target, x_offset, 0)
        .release()
        .perform()
    )


def screenshots_dir(tmp_path: Path) -> Path:
    """``$PACO_SCREENSHOTS_DIR`` (relative to the checkout), else a folder under ``tmp_path``."""
    folder = os.environ.get("PACO_SCREENSHOTS_DIR")
    if not folder:
        return tmp_path / "screenshots"
    return ROOT / folder  # an absolute folder stays as it is


def save_screenshot(driver, path: Path, tolerance: int = 300) -> None:
    """Write a screenshot for the docs, unless it differs from the one there in fewer than
    ``tolerance`` pixels (a timing digit): the committed image changes when the page does."""
    import io

    import numpy as np
    from PIL import Image

    png = driver.get_screenshot_as_png()
    if path.is_file():
        old = np.asarray(Image.open(path).convert("RGB"), dtype=np.int16)
        new = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.int16)
        if old.shape == new.shape and int((np.abs(old - new).sum(-1) > 0).sum()) < tolerance:
            return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png)


def borda(rankings: list[list[list[int]]], n: int) -> dict[int, float]:
    """The README's Borda rule, written out again: a candidate scores the number of
    candidates ranked below it, half a point per candidate tied with it, summed over
    annotators."""
    scores = dict.fromkeys(range(n), 0.0)
    for groups in rankings:
        place = {c: k for k, g in enumerate(groups) for c in g}
        for c in range(n):
            scores[c] += sum(place[o] > place[c] for o in range(n))
            scores[c] += 0.5 * sum(place[o] == place[c] for o in range(n) if o != c)
    return scores


def expected_pairs(instances: dict, entered: dict[str, list[list[list[int]]]]) -> set:
    """The paper's label rule as documented ("the merged top-1 candidate with the reference
    is a Yes pair, the bottom-1 a No pair, and a side whose boundary is tied is dropped"),
    applied to the orders this test entered."""
    out = set()
    for instance_id, rankings in entered.items():
        inst = instances[instance_id]
        scores = borda(rankings, len(inst["candidates"]))
        best, worst = max(scores.values()), min(scores.values())
        top = [c for c, s in scores.items() if s == best]
        bottom = [c for c, s in scores.items() if s == worst]
        if best == worst:
            continue
        ref = inst["reference"]["path"]
        if len(top) == 1:
            out.add((instance_id, ref, inst["candidates"][top[0]]["path"], 1))
        if len(bottom) == 1:
            out.add((instance_id, ref, inst["candidates"][bottom[0]]["path"], 0))
    return out


def test_rank_with_keyboard_and_mouse_survive_kill_then_pairs(tmp_path, annotate_server, browser):
    work = make_work(tmp_path, n_prompts=3, panel_size=128)
    lines = (work / "instances.jsonl").read_text().splitlines()
    instances = {json.loads(line)["instance_id"]: json.loads(line) for line in lines}
    order = list(instances)
    driver = browser
    screenshots = screenshots_dir(tmp_path)

    # Started before stage 3 ran, then with a panel file missing: messages on the page.
    (work / "instances.jsonl").rename(tmp_path / "instances.aside")
    server = annotate_server(work, "--annotator", "alice")
    driver.get(f"{server.url}/")
    WebDriverWait(driver, 15).until(lambda d: message(d)[0] == "error")
    assert "paco-data instances" in message(driver)[1]
    (tmp_path / "instances.aside").rename(work / "instances.jsonl")
    panel = work / instances[order[0]]["candidates"][2]["path"]
    panel.rename(tmp_path / "panel.aside")
    driver.refresh()
    wait_instance(driver, order[0])
    assert message(driver)[0] == "error" and "missing from the work folder" in message(driver)[1]
    WebDriverWait(driver, 10).until(
        lambda d: (
            "broken" in d.find_elements(By.CSS_SELECTOR, ".candidate")[2].get_attribute("class")
        )
    )
    (tmp_path / "panel.aside").rename(panel)
    driver.refresh()
    wait_instance(driver, order[0])
    assert message(driver) == ("info", "")
    assert driver.find_element(By.ID, "annotator-name").text == "alice"
    assert len(driver.find_elements(By.CSS_SELECTOR, "#candidates .candidate")) == 4
    assert "instance 1 of 144" in driver.find_element(By.ID, "position").text

    # 1-3: the keyboard. Keys are 1-based candidate numbers, best first.
    entered: dict[str, list[list[int]]] = {}
    keyboard = [
        (["3", "1", "4", "2"], [[2], [0], [3], [1]]),
        (["1", "3", "=", "4", "2"], [[0, 2], [3], [1]]),  # '=' ties 3 with 1
        (["1", "2", Keys.BACKSPACE, "3", "2", "4"], [[0], [2], [1], [3]]),  # undo the 2
    ]
    for k, (keys, groups) in enumerate(keyboard):
        if k == 1:  # the annotation screen, one candidate still to place, for the README
            press(driver, *keys[:-1])
            assert driver.find_element(By.ID, "submit").get_attribute("disabled") == "true"
            save_screenshot(driver, screenshots / "annotate.png")
            keys = keys[-1:]
        press(driver, *keys)
        assert ranking_on_page(driver) == groups
        press(driver, Keys.ENTER)
        wait_instance(driver, order[k + 1])
        entered[order[k]] = groups
        assert message(driver) == ("info", f"Saved your ranking of instance {k + 1}.")

    # 4: the mouse. Drag candidates 2, 4, 1 to the end of the ranking, then 3 onto 4's group.
    cards = driver.find_elements(By.CSS_SELECTOR, "#candidates .candidate")
    ranking_box = driver.find_element(By.ID, "ranking")
    end = ranking_box.size["width"] // 2 - 30  # the empty right end of the ranking
    for index in (1, 3, 0):
        drag(driver, cards[index], ranking_box, x_offset=end)
    assert ranking_on_page(driver) == [[1], [3], [0]]
    drag(driver, cards[2], driver.find_elements(By.CSS_SELECTOR, "#ranking .group")[1])
    assert ranking_on_page(driver) == [[1], [2, 3], [0]]
    driver.find_element(By.ID, "submit").click()
    wait_instance(driver, order[4])
    entered[order[3]] = [[1], [2, 3], [0]]

    # Reload mid-ranking: the same instance comes back (nothing stored for it).
    press(driver, "2", "1")
    driver.refresh()
    wait_instance(driver, order[4])
    assert ranking_on_page(driver) == []

    # Kill the server mid-session: the page says so, stores nothing, keeps the ranking.
    press(driver, "4", "3", "2", "1")
    server.kill()
    press(driver, Keys.ENTER)
    WebDriverWait(driver, 10).until(lambda d: message(d)[0] == "error")
    assert "Cannot reach the annotation server" in message(driver)[1]
    assert body_data(driver, "instance") == order[4]
    store = work / "annotations.jsonl"
    stored = [json.loads(line) for line in store.read_text().splitlines()]
    assert [(r["annotator"], r["instance_id"], r["ranking"]) for r in stored] == [
        ("alice", i, entered[i]) for i in order[:4]
    ]
    for r in stored:
        datetime.fromisoformat(r["time"].replace("Z", "+00:00"))
        assert 0 < r["seconds"] < 120

    # Restart: Enter retries the kept ranking; a reload resumes at the first unranked one.
    server.start()
    press(driver, Keys.ENTER)
    wait_instance(driver, order[5])
    entered[order[4]] = [[3], [2], [1], [0]]
    driver.refresh()
    wait_instance(driver, order[5])
    assert "you ranked 5" in driver.find_element(By.ID, "position").text
    stored = [json.loads(line) for line in store.read_text().splitlines()]
    assert [r["instance_id"] for r in stored] == order[:5]
    assert stored[4]["ranking"] == [[3], [2], [1], [0]]

    # A second annotator, from another client, on the first three instances.
    bob = {
        order[0]: [[2], [3], [0], [1]],
        order[1]: [[2], [0], [3], [1]],
        order[2]: [[3], [1], [2], [0]],
    }
    for instance_id, groups in bob.items():
        ids = [f"{c['grid']}_{c['pos']}" for c in instances[instance_id]["candidates"]]
        body = {
            "annotator": "bob",
            "instance_id": instance_id,
            "ranking": [[ids[i] for i in g] for g in groups],
            "seconds": 3.5,
        }
        assert httpx.post(f"{server.url}/api/rankings", json=body).status_code == 201

    driver.get(f"{server.url}/progress")
    WebDriverWait(driver, 15).until(lambda d: body_data(d, "progress") == "loaded")
    rows = {
        tr.get_attribute("data-annotator"): [td.text for td in tr.find_elements(By.TAG_NAME, "td")]
        for tr in driver.find_elements(By.CSS_SELECTOR, "#annotators-table tbody tr")
    }
    assert rows["alice"][1] == "5" and rows["bob"][1] == "3"
    progress = httpx.get(f"{server.url}/api/progress").json()
    summary = driver.find_element(By.ID, "summary").text
    assert f"{progress['agreement']['kendall_w_mean']:.2f}" in summary
    assert "5 / 144" in summary
    save_screenshot(driver, screenshots / "annotate_progress.png")
    assert (screenshots / "annotate.png").is_file()
    assert (screenshots / "annotate_progress.png").is_file()
    server.kill()

    # paco-data pairs reads the store as it is: the pairs are those of the entered orders.
    for instance_id, groups in bob.items():
        entered[instance_id] = [entered[instance_id], groups]
    for instance_id in order[3:5]:
        entered[instance_id] = [entered[instance_id]]
    run = subprocess.run(
        [*paco_data_command(), "pairs", str(work)], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    pairs = [json.loads(line) for line in (work / "pairs.jsonl").read_text().splitlines()]
    got = {(p["instance_id"], p["image_a"], p["image_b"], p["label"]) for p in pairs}
    want = expected_pairs(instances, entered)
    assert got == want
    # Instances 1, 2 (bob breaks alice's tie at the top), 4 and 5 give a Yes and a No;
    # alice and bob reverse each other on 3, so Borda ties everything there: no pair.
    assert len(want) == 8
