"""OpenAI's Files API, as far as batches need it: upload a JSONL file, read it back, delete it.

``POST /v1/files`` (multipart: ``file`` and ``purpose``), ``GET /v1/files``,
``GET /v1/files/{id}``, ``GET /v1/files/{id}/content``, ``DELETE /v1/files/{id}``. A batch's
results are files too (purpose ``batch_output``). Each file belongs to the key that made it
(``gateway.stored.ownership``): another key gets the 404 an unknown id gets; the admin key sees all.
Files are kept in this process's memory (a mock's scratch space, bounded by ``[batches]
max_file_bytes`` per file), so a gateway run with ``--workers`` serves them from the worker
that took the upload only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from email import policy
from email.parser import BytesParser
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from fastmode.gateway.errors import APIError, bad_request
from fastmode.gateway.http.json_response import json_response
from fastmode.gateway.stored.ownership import Caller
from fastmode.gateway.values.ids import new_id

PURPOSES = ("batch", "assistants", "fine-tune", "vision", "user_data", "evals")


@dataclass
class StoredFile:
    id: str
    filename: str
    purpose: str
    data: bytes
    owner: str | None
    created_at: int

    def card(self) -> dict[str, Any]:
        return {"id": self.id, "object": "file", "bytes": len(self.data),
                "created_at": self.created_at, "filename": self.filename,
                "purpose": self.purpose, "status": "processed", "expires_at": None,
                "status_details": None}


class FileStore:
    """Files by id, each shown to its owner only (``Caller``)."""

    def __init__(self) -> None:
        self._files: dict[str, StoredFile] = {}

    @property
    def stored_bytes(self) -> int:
        return sum(len(f.data) for f in self._files.values())

    def add(self, filename: str, purpose: str, data: bytes, owner: str | None) -> StoredFile:
        item = StoredFile(new_id("file"), filename, purpose, data, owner, int(time.time()))
        self._files[item.id] = item
        return item

    def get(self, file_id: str, who: Caller) -> StoredFile:
        item = self._files.get(file_id)
        if item is None or not who.may_see(item.owner):
            raise APIError(404, f"No such File object: {file_id}", param="id",
                           code="not_found")
        return item

    def delete(self, file_id: str, who: Caller) -> None:
        self.get(file_id, who)
        del self._files[file_id]

    def visible(self, who: Caller) -> list[StoredFile]:
        return [f for f in self._files.values() if who.may_see(f.owner)]


def multipart(request: Request, raw: bytes) -> dict[str, tuple[str | None, bytes]]:
    """The parts of a ``multipart/form-data`` body: name -> (filename, bytes). The standard
    library's MIME parser reads it (no extra dependency)."""
    ctype = request.headers.get("content-type", "")
    if not ctype.lower().startswith("multipart/form-data"):
        raise bad_request("Expected a multipart/form-data body with 'file' and 'purpose'.")
    message = BytesParser(policy=policy.HTTP).parsebytes(
        b"Content-Type: " + ctype.encode("latin-1") + b"\r\n\r\n" + raw)
    parts: dict[str, tuple[str | None, bytes]] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if isinstance(name, str):
            payload = part.get_payload(decode=True)
            parts[name] = (part.get_filename(), payload if isinstance(payload, bytes) else b"")
    return parts


async def upload(request: Request, store: FileStore, who: Caller, max_bytes: int,
                 max_stored: int) -> Response:
    if int(request.headers.get("content-length") or 0) > max_bytes + 65536:
        raise APIError(413, f"The file is larger than {max_bytes} bytes.", param="file")
    parts = multipart(request, await request.body())
    if "file" not in parts:
        raise bad_request("Missing required parameter: 'file'.", param="file")
    purpose = parts.get("purpose", (None, b""))[1].decode("utf-8", "replace").strip()
    if purpose not in PURPOSES:
        raise bad_request(f"Invalid value for 'purpose': {purpose!r}; expected one of "
                          f"{', '.join(PURPOSES)}.", param="purpose")
    filename, data = parts["file"]
    if len(data) > max_bytes:
        raise APIError(413, f"The file is larger than {max_bytes} bytes.", param="file")
    if store.stored_bytes + len(data) > max_stored:  # the files live in this process's memory
        raise APIError(413, f"The server keeps at most {max_stored} bytes of files; delete "
                       "some (DELETE /v1/files/{id}) first.", param="file",
                       code="storage_full")
    item = store.add(filename or "upload.jsonl", purpose, data, who.owner)
    return json_response(item.card())


def listing(store: FileStore, who: Caller) -> Response:
    cards = [f.card() for f in store.visible(who)]
    return json_response({"object": "list", "data": cards, "has_more": False,
                          "first_id": cards[0]["id"] if cards else None,
                          "last_id": cards[-1]["id"] if cards else None})
