"""Recording a test's exchanges once and replaying them after: ``fastmode.cassette``.

In a project, ``fastmode.cassette("cassettes/test_summary.jsonl")`` (mode ``once``) records
on the first run and replays on every later one. Here the file is in ``tmp_path``, so the
example records and then replays in the same test."""


def test_the_summary_replays_the_recorded_answer(fastmode, tmp_path):
    ask = [{"role": "user", "content": "Summarise: the meeting moved to Friday."}]
    path = fastmode.cassette(tmp_path / "summary.jsonl", "record")
    live = fastmode.openai().chat.completions.create(model="frontier-spark", messages=ask)
    fastmode.cassette(path, "replay")  # from now on only the file answers
    replayed = fastmode.openai().chat.completions.create(model="frontier-spark", messages=ask)
    assert replayed.id == live.id  # the recorded exchange, not a new one
    assert replayed.choices[0].message.content == live.choices[0].message.content
