"""The shared tokenizer: lossless, prefix-stable, and plausibly BPE-sized."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastmode.backends.images import UNKNOWN_SIZE, openai_tokens
from fastmode.backends.memo import Memo
from fastmode.backends.tokenizer import (
    MESSAGE_OVERHEAD,
    REPLY_PRIMING,
    count_chat_prompt,
    count_tokens,
    tokenize,
)

PROSE = (
    "The scheduler admits a new request at the next step once a slot is free. Continuous "
    "batching keeps the accelerator busy: each decode step produces one token for every running "
    "sequence, and new requests join between steps. Memory bandwidth, not compute, limits "
    "decoding at small batch sizes, which is why fast modes serve fewer users per replica. In "
    "practice, the first token arrives after the prompt has been processed, and the rest follow "
    "at a steady pace until the model stops or the budget runs out."
)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_round_trip_and_count_agree(text: str) -> None:
    tokens = tokenize(text)
    assert "".join(tokens) == text
    assert all(tokens)  # no empty tokens
    assert count_tokens(text) == len(tokens)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab 1,\n\t_é")), st.integers(0, 50))
def test_prefix_of_tokens_retokenizes_identically(text: str, k: int) -> None:
    """Cutting output at a token boundary must not change the tokens before the cut."""
    tokens = tokenize(text)[:k]
    assert tokenize("".join(tokens)) == tokens


def test_splitting_rules() -> None:
    assert tokenize("Hello, world") == ["Hello", ",", " world"]
    assert tokenize(" tokenizer") == [" tokeni", "zer"]  # letters capped at 6
    assert tokenize("12345") == ["123", "45"]  # digits in groups of 3
    assert tokenize("a  b") == ["a", " ", " b"]  # last space joins the word
    assert tokenize("x\n\ny") == ["x", "\n\n", "y"]  # a newline run is one token
    assert tokenize("snake_case") == ["snake", "_", "case"]
    assert count_tokens("") == 0


def test_english_prose_is_bpe_sized() -> None:
    n = count_tokens(PROSE)
    assert 3.0 <= len(PROSE) / n <= 5.5
    assert 1.0 <= n / len(PROSE.split()) <= 1.6


def test_chat_prompt_plain_string() -> None:
    msgs = [{"role": "user", "content": "Hello there"}]
    expected = REPLY_PRIMING + MESSAGE_OVERHEAD + count_tokens("user") + count_tokens("Hello there")
    assert count_chat_prompt(msgs) == expected


def test_chat_prompt_none_parts_images_and_tool_calls() -> None:
    base = REPLY_PRIMING
    msgs = [
        {"role": "system", "content": None},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Describe"},
                {"type": "input_text", "text": " this"},
                {"type": "image_url", "image_url": {"url": "data:..."}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "user", "name": "alex", "content": "thanks"},
    ]
    expected = base + 5 * MESSAGE_OVERHEAD
    expected += sum(count_tokens(r) for r in ("system", "user", "assistant", "tool", "user"))
    # an image whose size cannot be read (a URL, a broken data URL) counts as UNKNOWN_SIZE
    expected += count_tokens("Describe") + count_tokens(" this") + openai_tokens(*UNKNOWN_SIZE,
                                                                                None)
    expected += count_tokens("get_weather") + count_tokens('{"city":"Paris"}')
    expected += count_tokens("call_1") + count_tokens("sunny")
    expected += count_tokens("alex") + count_tokens("thanks")
    assert count_chat_prompt(msgs) == expected


def test_chat_prompt_counts_tools_as_compact_sorted_json() -> None:
    msgs = [{"role": "user", "content": "hi"}]
    tool = {
        "type": "function",
        "function": {"name": "f", "parameters": {"type": "object", "properties": {}}},
    }
    text = json.dumps(tool, sort_keys=True, separators=(",", ":"))
    assert count_chat_prompt(msgs, [tool]) == count_chat_prompt(msgs) + count_tokens(text)
    assert count_chat_prompt(msgs, None) == count_chat_prompt(msgs, [])


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(" \n\t a1._é。\u3000xyz9")), st.integers(1, 5))
def test_long_texts_counted_in_chunks_count_the_same(text: str, chunk: int) -> None:
    """Chunks end where the whole scan ends a token: the same tokens, the same
    count, whatever the chunk size."""
    import fastmode.backends.tokenizer as tk

    whole = tk._TOKEN_RE.findall(text)
    saved = tk.CHUNK_CHARS, tk.CHUNK_TOKENS
    tk.CHUNK_CHARS, tk.CHUNK_TOKENS = 2, chunk
    try:
        assert tokenize(text) == whole
        assert count_tokens(text) == len(whole)
    finally:
        tk.CHUNK_CHARS, tk.CHUNK_TOKENS = saved


def test_a_prompt_budget_stops_counting_soon_after_it() -> None:
    from fastmode.backends.tokenizer import CHUNK_TOKENS, PromptTooLong, prompt_budget

    text = "." * (10 * CHUNK_TOKENS)
    assert count_tokens(text) == 10 * CHUNK_TOKENS  # no budget: counted whole
    with prompt_budget(1000):
        try:
            count_tokens(text)
            raise AssertionError("not stopped")
        except PromptTooLong as exc:
            assert exc.limit == 1000 and 1000 < exc.counted <= CHUNK_TOKENS
        # a chat prompt is stopped as soon as its running total passes the budget
        short = [{"role": "user", "content": ". " * 400}] * 100
        try:
            count_chat_prompt(short)
            raise AssertionError("not stopped")
        except PromptTooLong as exc:
            assert 1000 < exc.counted < 2000
    assert count_chat_prompt(short) > 10_000  # outside the block: no budget


def test_a_part_whose_type_is_not_a_string_counts_its_text() -> None:
    assert count_chat_prompt([{"role": "user", "content": [{"type": [], "text": "hi"}]}]) == (
        count_chat_prompt([{"role": "user", "content": "hi"}]))


def test_a_callers_long_texts_are_counted_once_and_only_for_it(monkeypatch) -> None:
    """An agent resends its conversation every turn: inside ``prompt_budget(limit, scope)`` a
    long text's count is remembered for that scope (the same count, one scan), and another
    caller's count of the same text is scanned again (no caller can time another's texts)."""
    from fastmode.backends import tokenizer
    from fastmode.backends.tokenizer import MEMO_MIN_CHARS, prompt_budget

    scans: list[int] = []
    scan = tokenizer._scan
    monkeypatch.setattr(tokenizer, "_scan", lambda text: scans.append(len(text)) or scan(text))
    monkeypatch.setattr(tokenizer, "_COUNTS", Memo(tokenizer.MEMO_MAX_CHARS))
    system = (PROSE + " ") * 3
    assert len(system) >= MEMO_MIN_CHARS
    plain = count_tokens(system)
    turns = [[{"role": "system", "content": system}, {"role": "user", "content": f"turn {k}"}]
             for k in range(3)]
    with prompt_budget(1_000_000, "Bearer sk-a"):
        counts = [count_chat_prompt(t) for t in turns]
    assert counts == [count_chat_prompt(t) for t in turns]  # what counting without a scope says
    assert counts[0] == MESSAGE_OVERHEAD * 2 + REPLY_PRIMING + plain + count_tokens("system") \
        + count_tokens("user") + count_tokens("turn 0")
    assert scans.count(len(system)) == 1 + 1 + 3  # the plain count, the first turn, unscoped x3
    with prompt_budget(1_000_000, "Bearer sk-b"):
        assert count_chat_prompt(turns[0]) == counts[0]
    assert scans.count(len(system)) == 6  # the other caller's count is its own scan
    with prompt_budget(1_000_000, "Bearer sk-a"):
        assert count_tokens(system.lower()) == count_tokens(system.lower())  # a different text
    assert scans.count(len(system)) == 7


def test_remembered_counts_are_bounded_and_a_text_past_the_budget_is_never_kept(
        monkeypatch) -> None:
    from fastmode.backends import tokenizer
    from fastmode.backends.tokenizer import CHUNK_TOKENS, PromptTooLong, prompt_budget

    counts: Memo[int] = Memo(4 * 1024)
    monkeypatch.setattr(tokenizer, "_COUNTS", counts)
    texts = [f"{k} " + "x" * 1000 for k in range(10)]
    with prompt_budget(1_000_000, "k"):
        expected = [count_tokens(t) for t in texts]
    assert counts.size <= 4 * 1024 and len(counts.entries) == 4  # the newest four
    assert [key[1] for key in counts.entries] == texts[-4:]
    with prompt_budget(1_000_000, "k"):
        assert [count_tokens(t) for t in texts] == expected
    long = "." * (3 * CHUNK_TOKENS)
    with prompt_budget(CHUNK_TOKENS, "k"), pytest.raises(PromptTooLong):
        count_tokens(long)
    assert ("k", long) not in counts.entries
