"""Token ids of the one tokenizer: as many ids as tokens billed, shared where content is."""

from __future__ import annotations

import pytest

from fastmode.backends.token_ids import RESERVED, Vocabulary, fit, token_id
from fastmode.backends.tokenizer import count_chat_prompt, count_tokens

MESSAGES = [
    [{"role": "user", "content": "plain text, 12 words or so"}],
    [{"role": "user", "name": "ann", "content": [
        {"type": "text", "text": "look at this"},
        {"type": "image_url", "image_url": {"url": "https://example.invalid/a.png",
                                            "detail": "low"}}]}],
    [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "ls", "arguments": "{\"path\": \"/tmp\"}"}}]},
     {"role": "tool", "tool_call_id": "c1", "content": "a b c"}],
]


@pytest.mark.parametrize("messages", MESSAGES)
def test_chat_ids_are_the_billed_count(messages) -> None:
    v = Vocabulary()
    ids = v.chat_ids(messages)
    assert len(ids) == count_chat_prompt(messages)
    assert ids == Vocabulary().chat_ids(messages)  # no per-process state in the ids
    assert all(0 < i < 1 << 32 for i in ids)


def test_shared_messages_share_ids() -> None:
    v = Vocabulary()
    a = v.chat_ids(MESSAGES[0] + [{"role": "user", "content": "one"}])
    b = v.chat_ids(MESSAGES[0] + [{"role": "user", "content": "two"}])
    n = len(v.chat_ids(MESSAGES[0], generation_prompt=False))
    assert a[:n] == b[:n] and a != b


def test_decode_round_trip_and_unknown() -> None:
    v = Vocabulary()
    text = "Hello,  world: 12345 tokenizers!"
    ids = v.encode(text)
    assert len(ids) == count_tokens(text) and v.decode(ids) == text
    assert all(i >= RESERVED for i in ids) and ids[0] == token_id("Hello")
    with pytest.raises(KeyError):
        Vocabulary().decode(ids)  # a fresh vocabulary never handed these out
    small = Vocabulary(memory=1)
    small.encode("a b")
    assert small.pieces([token_id("a"), token_id(" b")]) == ["a", None]


def test_fit() -> None:
    assert fit([5, 6, 7], 2) == [5, 6]
    padded = fit([5, 6], 5, b"m")
    assert padded[:2] == [5, 6] and len(padded) == 5 and padded == fit([5, 6], 5, b"m")
