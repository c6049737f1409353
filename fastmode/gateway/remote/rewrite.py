"""An upstream's error answer in the OpenAI format, whatever shape the upstream used."""

from __future__ import annotations

from collections.abc import Mapping

import orjson

from fastmode.gateway.errors import ERROR_TYPES, APIError

_PASS_HEADERS = ("retry-after", "retry-after-ms", "x-should-retry")


def upstream_error(status: int, body: bytes, headers: Mapping[str, str] | None = None
                   ) -> APIError:
    """An upstream's error answer in the OpenAI format (OpenAI's, vLLM's and FastAPI's shapes)."""
    message = etype = code = param = None
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        obj = None
    if isinstance(obj, dict):
        err = obj.get("error")
        if isinstance(err, str):
            message = err
        else:
            src = err if isinstance(err, dict) else obj  # vLLM: {"object":"error","message",...}
            message, etype = src.get("message"), src.get("type")
            code, param = src.get("code"), src.get("param")
        if message is None and "detail" in obj:
            message = str(obj["detail"])
    if not message:
        text = body.decode("utf-8", "replace").strip()[:500]
        message = f"The upstream server answered HTTP {status}" + (f": {text}" if text else ".")
    if code is not None and not isinstance(code, str):
        code = None if isinstance(code, int) else str(code)  # vLLM repeats the status as code
    if status >= 500 and not str(message).startswith("Upstream"):
        message = f"Upstream error: {message}"
    if etype not in set(ERROR_TYPES.values()) | {"tokens", "requests", "server_error"}:
        etype = None
    passed = {k: v for k in _PASS_HEADERS if headers is not None and (v := headers.get(k))}
    return APIError(status, str(message), param=param if isinstance(param, str) else None,
                    code=code, type=etype or ERROR_TYPES.get(status, "server_error"),
                    headers=passed)
