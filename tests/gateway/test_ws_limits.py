"""Websocket connection bounds (gateway.websocket.life): a cap on open connections, server-wide
and per API key, and an idle timeout — 2,000 idle sockets are no longer all accepted."""

from __future__ import annotations

import time

import orjson
import pytest
from configs import with_keys  # noqa: I001 - tests/gateway
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from fastmode.gateway.app import create_app
from fastmode.gateway.config import load_config


def app_with(tmp_path, server: dict, auth: str = ""):
    text = with_keys(**server)
    if auth:
        text = text.replace("enabled = false                 # when true", auth + "\n#", 1)
    path = tmp_path / "ws.toml"
    path.write_text(text)
    return create_app(load_config(path))


def denied(tc: TestClient, headers: dict[str, str] | None = None) -> dict:
    """Open a websocket that the server must refuse; the refusal's JSON body."""
    from starlette.testclient import WebSocketDenialResponse

    with pytest.raises(WebSocketDenialResponse) as caught:
        with tc.websocket_connect("/v1/responses", headers=headers or {}):
            pass
    assert caught.value.status_code == 429
    return orjson.loads(caught.value.content)


def test_open_connections_are_capped(tmp_path) -> None:
    app = app_with(tmp_path, {"ws_max_connections": 2})
    with TestClient(app) as tc, tc.websocket_connect("/v1/responses"), \
            tc.websocket_connect("/v1/responses"):
        body = denied(tc)
        assert body["error"]["code"] == "websocket_connection_limit_reached"
    with TestClient(app) as tc, tc.websocket_connect("/v1/responses"):
        pass  # closed ones free their place


def test_open_connections_are_capped_per_key(tmp_path) -> None:
    auth = 'enabled = true\n[[auth.keys]]\nkey = "ka"\n[[auth.keys]]\nkey = "kb"\n'
    app = app_with(tmp_path, {"ws_max_connections_per_key": 1}, auth)
    a = {"authorization": "Bearer ka"}
    with TestClient(app) as tc, tc.websocket_connect("/v1/responses", headers=a):
        assert "this API key" in denied(tc, a)["error"]["message"]
        with tc.websocket_connect("/v1/responses", headers={"authorization": "Bearer kb"}):
            pass  # another key is not affected


def test_an_idle_connection_is_closed(tmp_path) -> None:
    app = app_with(tmp_path, {"ws_idle_timeout_s": 0.3})
    with TestClient(app) as tc, tc.websocket_connect("/v1/responses") as ws:
        ws.send_text("{")  # a frame: activity, answered with an error event
        assert orjson.loads(ws.receive_text())["type"] == "error"
        started = time.monotonic()
        with pytest.raises(WebSocketDisconnect) as caught:
            ws.receive_text()  # nothing more comes: the server closes the idle socket
        assert caught.value.code == 1001
        assert time.monotonic() - started < 10
