"""The annotation app over HTTP (FastAPI TestClient, and raw sockets to a real server for what
a hostile client sends): every refused request gets a 4xx with a message for the page,
changes nothing stored, and shows no server path; the body limit and the request deadline
hold whatever the framing; images come only from the work folder's own records; the shared
key; resuming; annotator names compared canonically; progress statistics checked against
scipy."""

from __future__ import annotations

import json
import random
import shutil
import time

import pytest
from scipy.stats import kendalltau, spearmanr

from tests import raw_http
from tests.annotate.conftest import LOCAL, make_work


def read_instances(work) -> list[dict]:
    return [json.loads(line) for line in (work / "instances.jsonl").read_text().splitlines()]


def ids_of(instance: dict) -> list[str]:
    return [f"{c['grid']}_{c['pos']}" for c in instance["candidates"]]


def snapshot(work) -> dict:
    """Every file the app may write, as bytes (None when absent)."""
    names = ("annotations.jsonl", "rankings.jsonl", "agreement.json", "instances.jsonl")
    return {n: (work / n).read_bytes() if (work / n).is_file() else None for n in names}


def assert_refused(response, status: int, code: str, work) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    assert str(work.parent) not in response.text and "Traceback" not in response.text
    return error["message"]


def rank(client, annotator, instance, order, status=201):
    ids = ids_of(instance)
    body = {
        "annotator": annotator,
        "instance_id": instance["instance_id"],
        "ranking": [[ids[i] for i in group] for group in order],
    }
    response = client.post("/api/rankings", json=body)
    assert response.status_code == status, response.text
    return response


# ---------------------------------------------------------------------- bad input
def test_no_instances_is_a_message_on_the_page_until_stage_3_runs(tmp_path, client_for):
    work = make_work(tmp_path, n_prompts=1)
    (work / "instances.jsonl").rename(tmp_path / "aside.jsonl")
    client = client_for(work)
    assert client.get("/").status_code == 200
    message = assert_refused(client.get("/api/next?annotator=alice"), 404, "no_instances", work)
    assert "paco-data instances" in message
    body = {"annotator": "alice", "instance_id": "x", "ranking": [["0_0"]]}
    assert_refused(client.post("/api/rankings", json=body), 404, "no_instances", work)
    (work / "instances.jsonl").write_text("")
    message = assert_refused(client.get("/api/next?annotator=alice"), 404, "no_instances", work)
    assert "empty" in message
    assert not (work / "annotations.jsonl").exists()
    # Stage 3 run while the server is up: the page works on reload.
    (tmp_path / "aside.jsonl").rename(work / "instances.jsonl")
    assert client.get("/api/next?annotator=alice").json()["instance"]["index"] == 1


def test_missing_panel_file(work, client_for):
    first = read_instances(work)[0]
    missing = first["candidates"][1]
    (work / missing["path"]).unlink()
    client = client_for(work)
    view = client.get("/api/next?annotator=alice").json()["instance"]
    assert view["instance_id"] == first["instance_id"]
    assert len(view["problems"]) == 1 and "candidate" in view["problems"][0]
    assert "paco-data grids" in view["problems"][0]
    url = view["candidates"][1]["url"]
    assert_refused(client.get(url), 404, "missing_panel", work)
    assert client.get(view["candidates"][0]["url"]).status_code == 200
    before = snapshot(work)
    message = assert_refused(
        rank(client, "alice", first, [[0], [1], [2], [3]], 404), 404, "missing_panel", work
    )
    assert "Nothing was stored" in message
    assert snapshot(work) == before


@pytest.mark.parametrize(
    "change, status, code",
    [
        (lambda b, ids: b.update(ranking=[[ids[0]], [ids[1]], [ids[2]], ["9_9"]]), 400, "invalid_ranking"),
        (lambda b, ids: b.update(ranking=[[ids[0]], [ids[0]], [ids[1]], [ids[2]], [ids[3]]]), 400, "invalid_ranking"),
        (lambda b, ids: b.update(ranking=[[ids[0], ids[1]], [ids[1], ids[2], ids[3]]]), 400, "invalid_ranking"),
        (lambda b, ids: b.update(ranking=[[ids[0]], [ids[1]], [ids[2]]]), 400, "invalid_ranking"),
        (lambda b, ids: b.update(ranking=[[ids[0], ids[1], ids[2], ids[3]], []]), 400, "invalid_ranking"),
        (lambda b, ids: b.update(ranking=[["../../prompts.jsonl"]]), 400, "invalid_ranking"),
        (lambda b, ids: b.update(ranking=[[0], [1], [2], [3]]), 422, "malformed_request"),
        (lambda b, ids: b.update(ranking=ids[0]), 422, "malformed_request"),
        (lambda b, ids: b.update(ranking=[[i] for i in ids] * 17), 422, "malformed_request"),
        (lambda b, ids: b.update(annotator="../alice"), 422, "malformed_request"),
        (lambda b, ids: b.update(annotator=""), 422, "malformed_request"),
        (lambda b, ids: b.pop("annotator"), 422, "malformed_request"),
        (lambda b, ids: b.update(extra="field"), 422, "malformed_request"),
        (lambda b, ids: b.update(seconds=-1), 422, "malformed_request"),
    ],
    ids=[
        "unknown-candidate", "duplicate", "duplicate-across-ties", "left-out", "empty-group",
        "path-as-candidate", "indices-not-ids", "not-a-list", "too-long", "bad-annotator",
        "empty-annotator", "no-annotator", "extra-field", "negative-seconds",
    ],
)  # fmt: skip
def test_malformed_submission_changes_nothing(work, client_for, change, status, code):
    client = client_for(work)
    first = read_instances(work)[0]
    body = {
        "annotator": "alice",
        "instance_id": first["instance_id"],
        "ranking": [[i] for i in ids_of(first)],
    }
    change(body, ids_of(first))
    before = snapshot(work)
    message = assert_refused(client.post("/api/rankings", json=body), status, code, work)
    assert "nothing was stored" in message.lower() or status == 400
    assert snapshot(work) == before


def test_body_that_is_not_json(work, client_for):
    client = client_for(work)
    response = client.post(
        "/api/rankings", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert_refused(response, 422, "malformed_request", work)
    assert not (work / "annotations.jsonl").exists()


def test_annotator_name_with_a_trailing_newline_is_refused(work, client_for):
    """'alice\n' is not a second annotator: it would let alice rank an instance twice."""
    from data_pipeline.annotate import AnnotateConfig
    from data_pipeline.annotate.config import check_annotator

    client = client_for(work)
    first = read_instances(work)[0]
    rank(client, "alice", first, [[0], [1], [2], [3]])
    before = snapshot(work)
    for name in ("alice\n", "alice\r\n", "\nalice", "alice\x00"):
        message = assert_refused(rank(client, name, first, [[3], [2], [1], [0]], 422), 422,
                                 "malformed_request", work)  # fmt: skip
        assert "annotator name" in message and "is not allowed" in message
        assert repr(name) in message  # the newline is shown, not printed
        response = client.get("/api/next", params={"annotator": name})
        assert "is not allowed" in assert_refused(response, 400, "bad_request", work)
        with pytest.raises(ValueError, match="is not allowed"):
            check_annotator(name)
        with pytest.raises(ValueError, match="annotator name"):
            AnnotateConfig(work, annotator=name)
    assert snapshot(work) == before
    assert_refused(rank(client, "alice", first, [[3], [2], [1], [0]], 409), 409, "already_ranked", work)  # fmt: skip
    assert snapshot(work) == before


def test_annotator_names_compare_in_their_canonical_form(work, client_for):
    """'ALICE' and 'alice.' after 'alice' are alice again: one ranking of an instance, one
    annotator in the progress; a name that only looks alike ('a.lice') is another."""
    from data_pipeline.annotate.config import canonical_annotator

    client = client_for(work)
    first, second = read_instances(work)[:2]
    rank(client, "alice", first, [[0], [1], [2], [3]])
    before = snapshot(work)
    for name in ("ALICE", "alice.", "Alice-", "alice_", "aLiCe@"):
        assert canonical_annotator(name) == "alice"
        response = rank(client, name, first, [[3], [2], [1], [0]], 409)
        message = assert_refused(response, 409, "already_ranked", work)
        assert message.startswith("alice has already ranked")
        following = client.get("/api/next", params={"annotator": name}).json()["instance"]
        assert following["instance_id"] == second["instance_id"]
        assert following["ranked_by_you"] == 1
    assert snapshot(work) == before
    # New rankings are stored under the canonical name.
    assert (
        rank(client, "ALICE.", second, [[1], [0], [2], [3]]).json()["stored"]["annotator"]
        == "alice"
    )
    rank(client, "a.lice", first, [[3], [2], [1], [0]])
    progress = client.get("/api/progress").json()
    assert [(a["annotator"], a["rankings"]) for a in progress["annotators"]] == [
        ("a.lice", 1),
        ("alice", 2),
    ]
    stored = [
        json.loads(x)["annotator"] for x in (work / "annotations.jsonl").read_text().splitlines()
    ]
    assert stored == ["alice", "alice", "a.lice"]


def test_rankings_stored_under_other_forms_of_a_name_are_read_as_one_annotator(work, client_for):
    """A store written before names compared canonically may hold 'Alice', 'alice.' and even
    a second ranking of an instance as 'ALICE': read as alice's, first ranking counted, the
    store left as it is."""
    instances = read_instances(work)
    old = [
        ("Alice", instances[0], [[0], [1], [2], [3]]),
        ("alice.", instances[1], [[1], [0], [2], [3]]),
        ("ALICE", instances[0], [[3], [2], [1], [0]]),  # her second ranking of instance 0
        ("bob", instances[0], [[0], [1], [2], [3]]),
    ]
    with open(work / "annotations.jsonl", "w") as handle:
        for name, instance, ranking in old:
            record = {"instance_id": instance["instance_id"], "annotator": name,
                      "ranking": ranking, "time": "2025-01-01T00:00:00.000Z"}  # fmt: skip
            handle.write(json.dumps(record) + "\n")
    before = snapshot(work)
    client = client_for(work)
    view = client.get("/api/next?annotator=alice").json()["instance"]
    assert view["instance_id"] == instances[2]["instance_id"] and view["ranked_by_you"] == 2
    assert_refused(rank(client, "alice", instances[1], [[0], [1], [2], [3]], 409), 409, "already_ranked", work)  # fmt: skip
    progress = client.get("/api/progress").json()
    annotators = {a["annotator"]: a for a in progress["annotators"]}
    assert {name: a["rankings"] for name, a in annotators.items()} == {"alice": 2, "bob": 1}
    # Her first ranking of instance 0 counts: the same order as bob's.
    assert annotators["alice"]["agreement_with_others"] == 1.0
    assert progress["rankings"] == 3 and progress["agreement"]["pairwise_agreement"] == 1.0
    assert snapshot(work) == before


def test_body_size_is_limited(work, client_for):
    from data_pipeline.annotate.app import MAX_BODY_BYTES

    client = client_for(work)
    first = read_instances(work)[0]
    body = {"annotator": "alice", "instance_id": first["instance_id"], "ranking": [["0_0"]]}
    before = snapshot(work)
    huge = json.dumps({**body, "instance_id": "x" * MAX_BODY_BYTES}).encode()
    json_type = {"Content-Type": "application/json"}
    response = client.post("/api/rankings", content=huge, headers=json_type)
    message = assert_refused(response, 413, "too_large", work)
    assert str(MAX_BODY_BYTES) in message and "nothing was stored" in message
    assert len(response.content) < 1000
    # Without a length up front (chunked), the bytes are counted as they arrive.
    chunks = iter([huge[i : i + 4096] for i in range(0, len(huge), 4096)])
    response = client.post("/api/rankings", content=chunks, headers=json_type)
    assert_refused(response, 413, "too_large", work)
    chunks = iter([b'{"annotator": "alice", ', b'"instance_id": "x"}'])
    response = client.post("/api/rankings", content=chunks, headers=json_type)
    assert "ranking: Field required" in assert_refused(response, 422, "malformed_request", work)
    response = client.post("/api/rankings", content=b"{}", headers={**json_type, "Content-Length": "1e9"})  # fmt: skip
    assert_refused(response, 413, "too_large", work)
    assert snapshot(work) == before
    # The limit is far above any ranking: just under it, the body is read (and checked).
    padded = json.dumps(body).encode().ljust(MAX_BODY_BYTES)
    response = client.post("/api/rankings", content=padded, headers=json_type)
    assert_refused(response, 400, "invalid_ranking", work)
    rank(client, "alice", first, [[0], [1], [2], [3]])


def ranking_body(annotator: str, instance: dict, size: int = 0) -> bytes:
    """A valid ranking as JSON, padded with white space (still valid JSON) to ``size`` bytes."""
    body = {"annotator": annotator, "instance_id": instance["instance_id"],
            "ranking": [[i] for i in ids_of(instance)]}  # fmt: skip
    text = json.dumps(body).encode()
    return text[:-1] + b" " * max(0, size - len(text)) + b"}"


def test_a_chunked_body_behind_a_small_content_length_is_refused(work, annotate_server):
    """A hostile client on loopback: 16 MiB in chunks, declared as 100 bytes, on a real server
    (h11 reads the chunks). The bytes received are counted: 413, and nothing is stored."""
    server = annotate_server(work)
    first = read_instances(work)[0]
    framing = {"Content-Type": "application/json", "Transfer-Encoding": "chunked",
               "Content-Length": "100"}  # fmt: skip
    before = snapshot(work)
    with raw_http.connect(server.port) as sock:
        sock.sendall(raw_http.head("POST", "/api/rankings", server.port, framing))
        for chunk in raw_http.chunked(ranking_body("mallory", first, size=16 * 2**20)):
            sock.sendall(chunk)
        status, _, payload = raw_http.read_response(sock)
    assert status == 413, payload[:300]
    error = json.loads(payload)["error"]
    assert error["code"] == "too_large" and "nothing was stored" in error["message"]
    assert snapshot(work) == before
    # The size is why: the same ranking, small, in the same framing is stored.
    with raw_http.connect(server.port) as sock:
        sock.sendall(raw_http.head("POST", "/api/rankings", server.port, framing))
        for chunk in raw_http.chunked(ranking_body("mallory", first)):
            sock.sendall(chunk)
        status, _, payload = raw_http.read_response(sock)
    assert status == 201, payload
    assert json.loads(payload)["stored"]["annotator"] == "mallory"


def test_half_sent_requests_are_disconnected(work, annotate_server):
    """A client that sends half a request and stalls, or trickles it, loses its connection
    after --request_timeout; a request sent in pieces within it is served."""
    server = annotate_server(work, "--request_timeout", "1")
    first = read_instances(work)[0]
    body = ranking_body("alice", first)
    request = raw_http.head("POST", "/api/rankings", server.port,
                            {"Content-Type": "application/json",
                             "Content-Length": str(len(body))}) + body  # fmt: skip
    before = snapshot(work)
    for sent, trickle in [
        (request[:30], b""),  # half a head
        (request[: len(request) - len(body) // 2], b""),  # the head and half the body
        (b"", request[:-1]),  # a byte every 50 ms, never the last
    ]:
        with raw_http.connect(server.port) as sock:
            sock.sendall(sent)
            closed_after = raw_http.seconds_until_closed(sock, limit=15, trickle=trickle)
        assert closed_after is not None, f"still open after 15 s: {sent[:40]!r}"
        assert 0.5 < closed_after < 6
    assert snapshot(work) == before
    with raw_http.connect(server.port) as sock:
        sock.sendall(request[:100])
        time.sleep(0.3)
        sock.sendall(request[100:])
        status, _, payload = raw_http.read_response(sock)
    assert status == 201, payload


def test_error_messages_quote_at_most_80_characters_of_the_input(work, client_for):
    client = client_for(work)
    first = read_instances(work)[0]
    iid = first["instance_id"]
    long_id = "x" * 60_000  # httpx's longest URL is 64 KiB
    for url in (
        f"/api/instances/{long_id}?annotator=alice",
        f"/api/instances/{long_id}/panels/reference",
        f"/api/instances/{iid}/panels/{long_id}",
    ):
        response = client.get(url)
        message = assert_refused(response, 404, "not_found", work)
        assert f"'{'x' * 80}…' (60000 characters)" in message
        assert len(response.content) < 1000
    ids = ids_of(first)
    body = {"annotator": "alice", "instance_id": iid, "ranking": [[*ids, "y" * 256]]}
    message = assert_refused(client.post("/api/rankings", json=body), 400, "invalid_ranking", work)
    assert f"'{'y' * 80}…' (256 characters) is not a candidate" in message
    body = {"annotator": "alice", "instance_id": "z" * 128, "ranking": [ids]}
    message = assert_refused(client.post("/api/rankings", json=body), 409, "stale_instance", work)
    assert f"'{'z' * 80}…' (128 characters)" in message and "z" * 81 not in message
    assert not (work / "annotations.jsonl").exists()


def test_submissions_keep_the_store_index_in_memory(work, client_for, monkeypatch):
    """The store is read once, not once per submission (which made a submission's time grow
    with the store); a restarted app, or another server on the folder, reads what is there."""
    from data_pipeline.annotate import AnnotationStore
    from data_pipeline.rankings import load_annotations
    from data_pipeline.storage import AppendOnlyJsonl

    reads = []
    load = AppendOnlyJsonl.load
    monkeypatch.setattr(AppendOnlyJsonl, "load", lambda self: reads.append(self.path) or load(self))
    client = client_for(work)
    instances = read_instances(work)
    for annotator, mine in (("alice", instances[:20]), ("bob", instances[10:25])):
        for instance in mine:
            response = rank(client, annotator, instance, [[0], [1], [2], [3]])
    assert response.json()["next"]["instance_id"] == instances[25]["instance_id"]
    progress = client.get("/api/progress").json()
    assert progress["in_store"] == 35 and progress["ranked"] == 25
    assert_refused(rank(client, "bob", instances[24], [[0], [1], [2], [3]], 409), 409, "already_ranked", work)  # fmt: skip
    assert len(reads) == 1  # the first screen's
    # The index is what the file holds.
    store = client.app.state.store
    assert store.all_rankings() == load_annotations(work)

    # Another server appends: this one reads the store again, once.
    other = client_for(work)
    rank(other, "carol", instances[0], [[3], [2], [1], [0]])
    reads.clear()
    assert_refused(rank(client, "carol", instances[0], [[0], [1], [2], [3]], 409), 409, "already_ranked", work)  # fmt: skip
    assert client.get("/api/progress").json()["in_store"] == 36
    assert len(reads) == 1

    # A restart rebuilds the index from the file.
    restarted = client_for(work)
    assert restarted.get("/api/next?annotator=alice").json()["instance"]["index"] == 21
    assert restarted.get("/api/next?annotator=bob").json()["instance"]["index"] == 1
    assert restarted.get("/api/progress").json() == client.get("/api/progress").json()
    assert AnnotationStore(work).ranked_by("bob") == {i["instance_id"] for i in instances[10:25]}


def test_the_app_does_not_import_torch(work):
    """The app reads JSON and serves images: serving it must not load torch (~700 MB)."""
    import subprocess
    import sys

    script = f"""
import sys
from fastapi.testclient import TestClient
from data_pipeline.annotate import AnnotateConfig, create_app
client = TestClient(create_app(AnnotateConfig({str(work)!r}, key_env="")), base_url="{LOCAL}")
view = client.get("/api/next?annotator=alice").json()["instance"]
assert client.get(view["reference"]["url"]).status_code == 200
body = {{"annotator": "alice", "instance_id": view["instance_id"],
         "ranking": [[c["id"]] for c in view["candidates"]]}}
assert client.post("/api/rankings", json=body).status_code == 201
assert client.get("/api/progress").status_code == 200
print(sorted(m for m in ("torch", "transformers", "diffusers") if m in sys.modules))
"""
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]", run.stdout


def test_stale_instance_after_instances_are_rebuilt(work, client_for):
    from data_pipeline.instances import PairingConfig, build_instances

    client = client_for(work)
    old = read_instances(work)
    assert client.get("/api/next?annotator=alice").json()["instance"]["total"] == 144
    body = {"annotator": "alice", "instance_id": "0123456789abcdef", "ranking": [["0_0"]]}
    assert_refused(client.post("/api/rankings", json=body), 409, "stale_instance", work)
    # The folder's instances are rebuilt with another rule while the page is open.
    build_instances(work, PairingConfig(rule="same_position"))
    before = snapshot(work)
    message = assert_refused(
        rank(client, "alice", old[0], [[0], [1], [2], [3]], 409), 409, "stale_instance", work
    )
    assert "Reload" in message
    assert snapshot(work) == before
    view = client.get("/api/next?annotator=alice").json()["instance"]
    assert view["total"] == 48 and view["instance_id"] == read_instances(work)[0]["instance_id"]


def test_one_record_per_annotator_and_instance(work, client_for):
    client = client_for(work)
    first = read_instances(work)[0]
    rank(client, "alice", first, [[2], [0, 1], [3]])
    before = snapshot(work)
    message = assert_refused(
        rank(client, "alice", first, [[0], [1], [2], [3]], 409), 409, "already_ranked", work
    )
    assert "alice" in message
    assert snapshot(work) == before
    rank(client, "bob", first, [[0], [1], [2], [3]])
    stored = [json.loads(x) for x in (work / "annotations.jsonl").read_text().splitlines()]
    assert [(r["annotator"], r["ranking"]) for r in stored] == [
        ("alice", [[2], [0, 1], [3]]),
        ("bob", [[0], [1], [2], [3]]),
    ]


def test_shared_key(work, client_for):
    key = "team-key-4711"
    client = client_for(work, key=key)
    config = client.get("/api/config").json()
    assert config["needs_key"] and not config["authorized"]
    assert client.get("/").status_code == 200  # the page itself holds no data
    assert client.get("/static/app.js").status_code == 200
    first = read_instances(work)[0]
    assert_refused(client.get("/api/next?annotator=alice"), 401, "bad_key", work)
    assert_refused(
        client.get(f"/api/instances/{first['instance_id']}/panels/reference"), 401, "bad_key", work
    )
    assert_refused(client.get("/api/progress"), 401, "bad_key", work)
    before = snapshot(work)
    assert_refused(rank(client, "alice", first, [[0], [1], [2], [3]], 401), 401, "bad_key", work)
    wrong = client.get("/api/next?annotator=alice", headers={"X-Annotate-Key": key + "x"})
    assert_refused(wrong, 401, "bad_key", work)
    response = client.post("/api/session", json={"key": "team-key-4712"})
    assert_refused(response, 401, "bad_key", work)
    assert "paco_annotate" not in client.cookies
    assert snapshot(work) == before
    # The right key: a session cookie (not the key itself) unlocks the API.
    assert client.post("/api/session", json={"key": key}).status_code == 200
    assert client.cookies["paco_annotate"] != key
    assert client.get("/api/next?annotator=alice").status_code == 200
    rank(client, "alice", first, [[0], [1], [2], [3]])
    # A script may send the key as a header instead.
    other = client_for(work, key=key)
    assert other.get("/api/progress", headers={"X-Annotate-Key": key}).status_code == 200


def test_key_from_environment(work, client_for, monkeypatch):
    monkeypatch.setenv("MY_TEAM_KEY", "from-the-environment")
    client = client_for(work, key_env="MY_TEAM_KEY")
    assert client.get("/api/config").json()["needs_key"]
    headers = {"X-Annotate-Key": "from-the-environment"}
    assert client.get("/api/progress", headers=headers).status_code == 200


def test_paths_in_requests_never_reach_the_file_system(work, client_for, tmp_path):
    client = client_for(work)
    first = read_instances(work)[0]
    iid = first["instance_id"]
    (tmp_path / "secret.png").write_bytes(b"\x89PNG secret outside the work folder")
    attempts = [
        "/static/%2e%2e/%2e%2e/setup.cfg",
        "/static/..%2F..%2Fcli.py",
        "/static/app.js%2F..%2F..%2Fcli.py",
        "/..%2F..%2Fetc%2Fpasswd",
        f"/api/instances/{iid}/panels/..%2F..%2Fprompts.jsonl",
        f"/api/instances/{iid}/panels/..%2Fsecret.png",
        f"/api/instances/{iid}/panels/%2Fetc%2Fpasswd",
        f"/api/instances/{iid}/panels/panels%2Fsyn00000%2F0_0.png",
        f"/api/instances/{iid}/panels/reference%00.png",
        f"/api/instances/{iid}/panels/..%5C..%5Cprompts.jsonl",
        "/api/instances/..%2F..%2Fprompts.jsonl/panels/reference",
        "/api/instances/%2E%2E/panels/reference",
    ]
    for url in attempts:
        response = client.get(url)
        assert response.status_code == 404, url
        assert b"secret" not in response.content and b"prompt_id" not in response.content, url
        assert b"root:" not in response.content and b"[metadata]" not in response.content, url
        assert str(tmp_path) not in response.text, url
    # Even the folder's own records may only name images inside it.
    records = read_instances(work)
    records[0]["candidates"][0]["path"] = "../secret.png"
    records[0]["candidates"][1]["path"] = str(tmp_path / "secret.png")
    records[0]["candidates"][2]["path"] = "prompts.jsonl"
    (work / "instances.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    for c in records[0]["candidates"][:3]:
        url = f"/api/instances/{iid}/panels/{c['grid']}_{c['pos']}"
        response = client.get(url)
        assert_refused(response, 404, "missing_panel", work)
        assert b"secret" not in response.content and b"prompt_id" not in response.content


def test_page_is_self_contained_and_locked_down(work, client_for):
    from importlib.resources import files

    client = client_for(work)
    static = files("data_pipeline.annotate") / "static"
    for url, name in [("/", "index.html"), ("/progress", "index.html"),
                      ("/static/app.js", "app.js"), ("/static/style.css", "style.css")]:  # fmt: skip
        response = client.get(url)
        assert response.status_code == 200
        assert response.content == (static / name).read_bytes()
        assert "script-src 'self'" in response.headers["content-security-policy"]
        assert response.headers["x-content-type-options"] == "nosniff"
        text = response.text
        assert "http://" not in text and "https://" not in text and 'src="//' not in text


# ---------------------------------------------------------------------- behaviour
def test_resume_skip_and_restart(work, client_for):
    from data_pipeline.annotate import AnnotationStore

    client = client_for(work)
    order = [r["instance_id"] for r in read_instances(work)]
    first, second, _, fourth = read_instances(work)[:4]

    def next_id(annotator="alice", after=None):
        url = f"/api/next?annotator={annotator}" + (f"&after={after}" if after else "")
        return client.get(url).json()["instance"]["instance_id"]

    response = rank(client, "alice", first, [[0], [1], [2], [3]])
    assert response.json()["next"]["instance_id"] == order[1]
    rank(client, "alice", second, [[0], [1], [2], [3]])
    assert next_id() == order[2]
    assert next_id(after=order[2]) == order[3]  # skipped
    rank(client, "alice", fourth, [[3], [2], [1], [0]])
    assert next_id(after=order[3]) == order[4]
    assert next_id() == order[2]  # the skipped one is still the first unranked
    assert next_id("bob") == order[0]
    # A new server on the same folder (a restart) resumes at the same place.
    assert AnnotationStore(work).next_for("alice")["instance_id"] == order[2]
    view = client.get(f"/api/instances/{order[3]}?annotator=alice").json()
    assert view["already_ranked"] and view["ranked_by_you"] == 3


def test_everything_ranked(tmp_path, client_for):
    work = make_work(tmp_path, n_prompts=1, rule="all_other_grids")  # 16 instances
    client = client_for(work)
    for instance in read_instances(work):
        rank(client, "alice", instance, [[i] for i in range(len(instance["candidates"]))])
    assert client.get("/api/next?annotator=alice").json() == {"done": True, "instance": None}


def test_progress_agreement_against_scipy(work, client_for):
    client = client_for(work)
    instances = read_instances(work)
    rng = random.Random(0)
    orders = {}
    for instance in instances[:6] + instances[48:50]:  # two categories
        n = len(instance["candidates"])
        a, b = rng.sample(range(n), n), rng.sample(range(n), n)
        rank(client, "alice", instance, [[i] for i in a])
        rank(client, "bob", instance, [[i] for i in b])
        orders[instance["instance_id"]] = (a, b)
    rank(client, "carol", instances[100], [[0], [1, 2], [3]])
    progress = client.get("/api/progress").json()

    # Two annotators without ties: W = (1 + Spearman's rho) / 2, and the share of agreeing
    # candidate pairs = (1 + Kendall's tau) / 2.
    ws, taus = [], []
    for a, b in orders.values():
        rank_a = [a.index(c) for c in range(len(a))]
        rank_b = [b.index(c) for c in range(len(b))]
        ws.append((1 + spearmanr(rank_a, rank_b).statistic) / 2)
        taus.append((1 + kendalltau(rank_a, rank_b).statistic) / 2)
    agreement = progress["agreement"]
    assert agreement["kendall_w_mean"] == pytest.approx(sum(ws) / len(ws))
    assert agreement["pairwise_agreement"] == pytest.approx(sum(taus) / len(taus))
    assert agreement["instances_multi_annotated"] == 8
    assert agreement["pairwise_comparisons"] == 8 * 6

    annotators = {a["annotator"]: a for a in progress["annotators"]}
    assert {k: v["rankings"] for k, v in annotators.items()} == {"alice": 8, "bob": 8, "carol": 1}
    assert annotators["alice"]["agreement_with_others"] == pytest.approx(sum(taus) / len(taus))
    assert annotators["carol"]["agreement_with_others"] is None
    by_category = {c["category"]: c for c in progress["categories"]}
    expected = {}
    for instance in instances:
        expected.setdefault(instance["category"], [0, 0])[0] += 1
    for instance in instances[:6] + instances[48:50] + [instances[100]]:
        expected[instance["category"]][1] += 1
    assert {k: [v["instances"], v["ranked"]] for k, v in by_category.items()} == expected
    assert progress["ranked"] == 9 and progress["rankings"] == 17


def test_several_servers_on_one_folder_share_the_store(work, client_for):
    a, b = client_for(work), client_for(work)
    first = read_instances(work)[0]
    rank(a, "alice", first, [[0], [1], [2], [3]])
    assert_refused(rank(b, "alice", first, [[3], [2], [1], [0]], 409), 409, "already_ranked", work)
    assert b.get("/api/next?annotator=alice").json()["instance"]["index"] == 2


def test_truncated_tail_left_by_a_killed_write(work, client_for):
    client = client_for(work)
    first, second = read_instances(work)[:2]
    rank(client, "alice", first, [[1], [0], [2], [3]])
    with open(work / "annotations.jsonl", "a") as handle:
        handle.write('{"instance_id": "' + second["instance_id"] + '", "annot')
    assert client.get("/api/next?annotator=alice").json()["instance"]["index"] == 2
    rank(client, "alice", second, [[0], [1], [2], [3]])
    lines = (work / "annotations.jsonl").read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[2])["instance_id"] == second["instance_id"]


def test_folder_merged_by_an_older_version_is_a_clear_409(work, client_for):
    (work / "rankings.jsonl").write_text("")
    (work / "agreement.json").write_text("{}")
    client = client_for(work)
    message = assert_refused(
        client.get("/api/next?annotator=alice"), 409, "unreadable_work_folder", work
    )
    assert "paco-data rankings" in message


def test_unreadable_instances_file(work, client_for):
    (work / "instances.jsonl").write_text('{"instance_id": "a"}\n{broken\n')
    client = client_for(work)
    message = assert_refused(
        client.get("/api/next?annotator=alice"), 409, "unreadable_work_folder", work
    )
    assert "server log" in message


def test_unknown_routes_and_bad_query(work, client_for):
    client = client_for(work)
    assert_refused(client.get("/api/nothing"), 404, "not_found", work)
    assert_refused(client.get("/api/next"), 422, "malformed_request", work)
    assert_refused(client.get("/api/next?annotator=a%20b"), 400, "bad_request", work)
    assert_refused(client.get("/api/instances/nope?annotator=alice"), 404, "not_found", work)
    first = read_instances(work)[0]
    url = f"/api/instances/{first['instance_id']}/panels/9_9"
    assert_refused(client.get(url), 404, "not_found", work)


def test_copy_of_work_folder_serves_its_own_panels(work, client_for, tmp_path):
    """Panel paths are relative to the work folder: a moved folder still works."""
    moved = tmp_path / "moved"
    shutil.copytree(work, moved)
    client = client_for(moved)
    view = client.get("/api/next?annotator=alice").json()["instance"]
    image = client.get(view["reference"]["url"])
    assert image.status_code == 200 and image.headers["content-type"] == "image/png"
    path = moved / read_instances(moved)[0]["reference"]["path"]
    assert image.content == path.read_bytes()


def test_requests_from_other_sites_are_refused(work, client_for):
    """A page on another site cannot post rankings (no JSON without a CORS preflight, which
    the app does not grant) nor read panels through a rebound DNS name."""
    from fastapi.testclient import TestClient

    client = client_for(work)
    first = read_instances(work)[0]
    body = json.dumps(
        {
            "annotator": "alice",
            "instance_id": first["instance_id"],
            "ranking": [[i] for i in ids_of(first)],
        }
    )
    before = snapshot(work)
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data"):
        response = client.post(
            "/api/rankings", content=body, headers={"Content-Type": content_type}
        )
        assert_refused(response, 415, "not_json", work)
    preflight = client.options(
        "/api/rankings",
        headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"},
    )
    assert "access-control-allow-origin" not in preflight.headers
    assert snapshot(work) == before

    rebound = TestClient(client.app, base_url="http://evil.example:8765")
    for url in ("/", "/api/next?annotator=alice", "/api/progress"):
        assert_refused(rebound.get(url), 400, "bad_host", work)
    assert_refused(rebound.post("/api/rankings", content=body, headers={"Content-Type": "application/json"}), 400, "bad_host", work)  # fmt: skip
    assert snapshot(work) == before
    assert TestClient(client.app, base_url="http://localhost:8765").get("/").status_code == 200

    # On a LAN the machine's own address is not known in advance: any Host, with the key.
    lan = client_for(work, host="0.0.0.0", key="team-key-4711")
    lan = TestClient(lan.app, base_url="http://192.168.1.20:8765")
    assert lan.get("/").status_code == 200
    assert_refused(lan.get("/api/progress"), 401, "bad_key", work)
    assert lan.get("/api/progress", headers={"X-Annotate-Key": "team-key-4711"}).status_code == 200


def test_work_folder_must_exist(tmp_path):
    from data_pipeline.annotate import AnnotateConfig

    with pytest.raises(ValueError, match="does not exist"):
        AnnotateConfig(tmp_path / "typo")
