"""Config texts for tests: the built-in default with some keys of a section set."""

from __future__ import annotations

import re

from fastmode.gateway.config import default_config_text


def with_keys(section: str = "server", text: str | None = None, **values: object) -> str:
    """The config text with ``key = value`` set in ``[section]`` (replaced where the key is
    written, added at the top of the section otherwise). Values are TOML literals as str."""
    text = default_config_text() if text is None else text
    for key, value in values.items():
        literal = value if isinstance(value, str) else repr(value).lower() if isinstance(
            value, bool) else str(value)
        line = re.compile(rf"^{key} = .*$", re.M)
        start = text.index(f"[{section}]\n")
        end = text.find("\n[", start + 1)
        end = len(text) if end < 0 else end
        body = text[start:end]
        if line.search(body):
            body = line.sub(f"{key} = {literal}".replace("\\", "\\\\"), body, count=1)
        else:
            body = body.replace(f"[{section}]\n", f"[{section}]\n{key} = {literal}\n", 1)
        text = text[:start] + body + text[end:]
    return text
