"""The gateway keeps secrets and is not blocked by one dead judge, tested over sockets with
real servers: the client's key stays at the gateway and each upstream gets its own (a keyed
``paco-reward serve`` app scores through it), connection headers (RFC 9110 7.6.1) are not
passed either way, ``/health`` names no upstream URL to a caller without the key, the
upstream connection pool is bounded, and with one upstream dead ``/v1/models`` still lists
the others (the dead one marked) so a client for a live judge scores while the client for
the dead one fails at once naming the real cause."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import numpy as np
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from paco_reward import ConfigError, PacoReward, RewardServerError
from paco_reward.server import ServerConfig, ServerThread, create_app, free_port
from paco_reward.server.gateway import create_gateway
from paco_reward.server.gateway_config import GatewayConfig, Upstream

GATEWAY_KEY, UPSTREAM_KEY = "gateway-secret", "upstream-secret"


def echo_app(name: str) -> Starlette:
    """An upstream that answers with the headers it received (and, on its answer, headers
    about its own connection that the gateway must not relay)."""

    async def echo(request: Request) -> JSONResponse:
        return JSONResponse(
            {"headers": [[k.decode(), v.decode()] for k, v in request.headers.raw]},
            headers={"Connection": "X-Upstream-Hop", "X-Upstream-Hop": "internal", "X-Kept": "1"},
        )

    async def models(request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": name, "object": "model"}]})

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    return Starlette(
        routes=[
            Route("/v1/models", models, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/{path:path}", echo, methods=["POST"]),
        ]
    )


@pytest.fixture(scope="module")
def echoes():
    with ServerThread(echo_app("open")) as open_, ServerThread(echo_app("keyed")) as keyed:
        yield open_, keyed


def received(response: httpx.Response) -> dict[str, str]:
    assert response.status_code == 200, response.text
    return {k.lower(): v for k, v in response.json()["headers"]}


def test_the_client_key_stays_at_the_gateway_and_each_upstream_gets_its_own(echoes):
    open_, keyed = echoes
    upstreams = {
        "open": open_.base_url,
        "keyed": Upstream.parse("keyed", keyed.base_url, api_key=UPSTREAM_KEY),
    }
    key = {"Authorization": f"Bearer {GATEWAY_KEY}"}
    with ServerThread(create_gateway(upstreams, GatewayConfig(api_key=GATEWAY_KEY))) as gateway:
        url = gateway.base_url + "/chat/completions"
        to_open = received(httpx.post(url, json={"model": "open"}, headers=key))
        to_keyed = received(httpx.post(url, json={"model": "keyed"}, headers=key))
        assert "authorization" not in to_open
        assert to_keyed["authorization"] == f"Bearer {UPSTREAM_KEY}"
        assert GATEWAY_KEY not in str(to_open) + str(to_keyed)
        assert UPSTREAM_KEY not in repr(upstreams["keyed"])  # nor in logs of the upstreams
    forwarding = GatewayConfig(api_key=GATEWAY_KEY, forward_authorization=True)
    with ServerThread(create_gateway(upstreams, forwarding)) as gateway:
        url = gateway.base_url + "/chat/completions"
        assert (
            received(httpx.post(url, json={"model": "open"}, headers=key))["authorization"]
            == f"Bearer {GATEWAY_KEY}"
        )
        # an upstream's own key wins over the forwarded one
        assert (
            received(httpx.post(url, json={"model": "keyed"}, headers=key))["authorization"]
            == f"Bearer {UPSTREAM_KEY}"
        )


def test_a_keyed_reward_server_scores_through_the_gateway_with_its_own_key(
    tiny_reward, random_images
):
    config = ServerConfig("judge", max_batch_size=8, api_key=UPSTREAM_KEY)
    with ServerThread(create_app(tiny_reward.backend, config)) as upstream:
        upstreams = {"judge": Upstream.parse("judge", upstream.base_url, api_key=UPSTREAM_KEY)}
        app = create_gateway(upstreams, GatewayConfig(api_key=GATEWAY_KEY))
        with ServerThread(app) as gateway:
            rm = PacoReward.from_server(gateway.base_url, "judge", api_key=GATEWAY_KEY, retries=0)
            a, b = random_images(2, seed=3)
            np.testing.assert_allclose(
                rm.score(a, b, "a fox"), tiny_reward.score(a, b, "a fox"), atol=1e-4
            )
            rm.backend.close()
        # Without its own key the upstream refuses the gateway: the client's key is not its.
        bare = create_gateway({"judge": upstream.base_url}, GatewayConfig(api_key=GATEWAY_KEY))
        with ServerThread(bare) as gateway:
            listed = httpx.get(
                gateway.base_url + "/models", headers={"Authorization": f"Bearer {GATEWAY_KEY}"}
            )
            assert listed.status_code == 502 and listed.json()["error"]["code"] == "upstream_error"


def test_connection_headers_are_not_passed_either_way(echoes):
    open_, _ = echoes
    with ServerThread(create_gateway({"open": open_.base_url})) as gateway:
        response = httpx.post(
            gateway.base_url + "/chat/completions",
            json={"model": "open"},
            headers={
                "Connection": "keep-alive, X-Client-Hop",
                "X-Client-Hop": "for the gateway only",
                "TE": "trailers",
                "Proxy-Authorization": "Basic c2VjcmV0",
                "Keep-Alive": "timeout=5",
                "X-End-To-End": "passed",
            },
        )
        seen = received(response)
        assert seen["x-end-to-end"] == "passed"
        for name in ("x-client-hop", "te", "proxy-authorization", "keep-alive"):
            assert name not in seen, name
        # the gateway's own hop has its own Connection header (httpx's), not the client's
        assert "x-client-hop" not in seen.get("connection", "").lower()
        # and back: the upstream's own connection headers stay between it and the gateway
        assert response.headers["x-kept"] == "1"
        assert "x-upstream-hop" not in response.headers


def test_health_names_no_upstream_url_without_the_key(echoes):
    open_, _ = echoes
    dead = f"http://127.0.0.1:{free_port()}/v1"
    upstreams = {"open": open_.base_url, "dead": dead}
    config = GatewayConfig(api_key=GATEWAY_KEY, health_timeout=2.0, connect_timeout=2.0)
    with ServerThread(create_gateway(upstreams, config)) as gateway:
        root = gateway.base_url.removesuffix("/v1")
        anonymous = httpx.get(root + "/health")
        assert anonymous.status_code == 503
        assert anonymous.json() == {"status": "unavailable", "upstreams_up": 1, "upstreams_down": 1}
        assert "127.0.0.1" not in anonymous.text and "dead" not in anonymous.text
        wrong = httpx.get(root + "/health", headers={"Authorization": "Bearer guess"})
        assert wrong.status_code == 503 and "upstreams" not in wrong.json()
        holder = httpx.get(root + "/health", headers={"Authorization": f"Bearer {GATEWAY_KEY}"})
        reports = holder.json()["upstreams"]
        assert reports["open"]["status"] == "ok" and reports["open"]["url"] == open_.base_url
        assert reports["dead"]["status"] == "down" and reports["dead"]["url"] == dead


def test_the_upstream_connection_pool_is_bounded():
    """An upstream that accepts connections and never answers: with a pool of 2, at most 2
    connections reach it however many clients wait; the rest are a 503 ``gateway_busy``."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    open_now, peak, lock, stop = [0], [0], threading.Lock(), threading.Event()

    def hold(conn: socket.socket) -> None:
        with lock:
            open_now[0] += 1
            peak[0] = max(peak[0], open_now[0])
        conn.settimeout(0.2)
        while not stop.is_set():
            try:
                if not conn.recv(65536):
                    break
            except TimeoutError:
                continue
            except OSError:
                break
        conn.close()
        with lock:
            open_now[0] -= 1

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:  # closed
                return
            threading.Thread(target=hold, args=(conn,), daemon=True).start()

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    config = GatewayConfig(max_upstream_connections=2, upstream_timeout=3.0, connect_timeout=0.5)
    try:
        with ServerThread(create_gateway({"stuck": f"http://127.0.0.1:{port}/v1"}, config)) as gw:
            results: list[httpx.Response] = []

            def send() -> None:
                results.append(
                    httpx.post(
                        gw.base_url + "/chat/completions", json={"model": "stuck"}, timeout=30
                    )
                )

            threads = [threading.Thread(target=send) for _ in range(6)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    finally:
        stop.set()
        acceptor.join()
        listener.close()
    codes = sorted((r.status_code, r.json()["error"]["code"]) for r in results)
    print(f"\npeak upstream connections {peak[0]}; answers {codes}")
    assert peak[0] == 2
    assert codes.count((503, "gateway_busy")) == 4 and codes.count((504, "upstream_timeout")) == 2
    busy = next(r for r in results if r.status_code == 503)
    assert "max_upstream_connections" in busy.json()["error"]["message"]
    with pytest.raises(ConfigError, match="max_upstream_connections must be >= 1"):
        GatewayConfig(max_upstream_connections=0)


def test_one_dead_judge_blocks_no_other(tiny_reward, random_images):
    app = create_app(tiny_reward.backend, ServerConfig("judge-a", max_batch_size=8))
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with ServerThread(app) as upstream:
        gateway_app = create_gateway(
            {"judge-a": upstream.base_url, "judge-d": dead}, GatewayConfig(connect_timeout=2.0)
        )
        with ServerThread(gateway_app) as gateway:
            listed = httpx.get(gateway.base_url + "/models")
            assert listed.status_code == 200
            entries = {e["id"]: e for e in listed.json()["data"]}
            assert entries["judge-a"] == httpx.get(upstream.base_url + "/models").json()["data"][0]
            mark = entries["judge-d"]["paco_gateway"]
            assert mark["status"] == "down" and mark["code"] == "upstream_unreachable"

            rm = PacoReward.from_server(gateway.base_url, "judge-a", retries=0)
            a, b = random_images(2, seed=5)
            np.testing.assert_allclose(rm.score(a, b, "x"), tiny_reward.score(a, b, "x"), atol=1e-4)
            rm.backend.close()

            start = time.monotonic()
            with pytest.raises(RewardServerError) as caught:
                PacoReward.from_server(gateway.base_url, "judge-d", retries=1, backoff=0.01)
            message = str(caught.value)
            print(f"\n{time.monotonic() - start:.2f}s: {message}")
            assert time.monotonic() - start < 5
            assert "upstream does not answer" in message and "upstream_unreachable" in message
            assert "start or fix that upstream" in message and "raise retries" not in message


def test_command_line_upstreams_name_their_key_in_the_environment(monkeypatch):
    from paco_reward.cli import GatewayArguments

    monkeypatch.setenv("JUDGE_B_KEY", "b-secret")
    args = GatewayArguments(
        upstreams=["a=http://127.0.0.1:8001/v1", "b=http://127.0.0.1:8002/v1,key_env=JUDGE_B_KEY"]
    )
    upstreams = args.upstream_urls()
    assert (upstreams["a"].api_key, upstreams["b"].api_key) == (None, "b-secret")
    assert upstreams["b"].api_root == "http://127.0.0.1:8002/v1"
    monkeypatch.delenv("JUDGE_B_KEY")
    with pytest.raises(ConfigError, match="'JUDGE_B_KEY' .* unset or empty"):
        GatewayArguments(upstreams=["b=http://127.0.0.1:8002/v1,key_env=JUDGE_B_KEY"])
    with pytest.raises(ConfigError, match="is not NAME=URL"):
        GatewayArguments(upstreams=["http://127.0.0.1:8002/v1"])
