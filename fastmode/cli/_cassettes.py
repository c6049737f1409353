"""``fastmode serve``'s record and replay flags (docs/replay.md), applied to the config.

Each flag sets a field of ``[record]`` / ``[replay]`` (so a file can carry the same settings);
``--upstream URL`` serves every tier of the config from that OpenAI-compatible server (a
``[remote.tiers.*]`` entry per tier), the quickest way to put the gateway in front of a
provider or a ``fastmode engine`` to record a session.
"""

from __future__ import annotations

import argparse
from typing import Any

from pydantic import ValidationError

from fastmode.gateway.cassette_config import RecordConfig, ReplayConfig
from fastmode.gateway.config import Config, RemoteConfig


class UsageError(Exception):
    """A bad flag: one line, exit status 2 (``fastmode.cli.main``)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("record and replay (docs/replay.md)")
    g.add_argument("--record", metavar="DIR",
                   help="record every exchange (request, events, timing) as cassettes in DIR")
    g.add_argument("--replay", metavar="DIR",
                   help="answer requests with the exchanges recorded in DIR")
    g.add_argument("--replay-timing", metavar="T",
                   help="recorded (default), none, modeled (the serving tier's speed and "
                   "price) or tier:NAME")
    g.add_argument("--replay-miss", choices=["error", "mock"],
                   help="an unmatched request: a 404 naming the nearest entry (default), or "
                   "the mock model's answer")
    g.add_argument("--replay-match", choices=["body", "last_user", "header"],
                   help="match by the normalised body (default), the last user message, or "
                   "a header (--replay-header)")
    g.add_argument("--replay-ignore", action="append", metavar="FIELD",
                   help="a body field the matcher ignores (dotted, * for any; repeatable)")
    g.add_argument("--replay-header", metavar="NAME",
                   help="the header of --replay-match header (default x-request-id)")
    g.add_argument("--upstream", action="append", metavar="URL",
                   help="serve every tier from this OpenAI-compatible server (repeatable: a "
                   "pool); e.g. a fastmode engine, vLLM, a provider's base URL without /v1")
    g.add_argument("--upstream-key-env", metavar="VAR",
                   help="environment variable holding the upstream's API key")


def apply(args: argparse.Namespace, config: Config) -> Config:
    """The config with the record / replay / upstream flags, validated like the file."""
    record: dict[str, Any] = config.record.model_dump()
    replay: dict[str, Any] = config.replay.model_dump()
    if args.record:
        record["dir"] = args.record
    for flag, key in (("replay", "dir"), ("replay_timing", "timing"), ("replay_miss", "miss"),
                      ("replay_match", "match"), ("replay_header", "header")):
        if getattr(args, flag):
            replay[key] = getattr(args, flag)
    if args.replay_ignore:
        replay["ignore"] = [*replay["ignore"], *args.replay_ignore]
    try:
        update: dict[str, Any] = {"record": RecordConfig.model_validate(record),
                                  "replay": ReplayConfig.model_validate(replay)}
        if args.upstream:
            tier = {"upstreams": args.upstream, "health_path": "/v1/models"}
            if args.upstream_key_env:
                tier["api_key_env"] = args.upstream_key_env
            remote = config.remote.model_dump()
            remote["tiers"] = dict.fromkeys(config.tiers, tier)
            update["remote"] = RemoteConfig.model_validate(remote)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise UsageError(f"{where}: {err['msg']}") from None
    if update["record"].dir and update["replay"].dir:
        raise UsageError("--record and --replay: one at a time (record a session, then "
                         "replay it)")
    named = update["replay"].timing_tier
    if named is not None and named not in config.tiers:
        raise UsageError(f"--replay-timing: unknown tier {named!r}; the config's tiers: "
                         f"{', '.join(sorted(config.tiers))}")
    if args.upstream_key_env and not args.upstream:
        raise UsageError("--upstream-key-env needs --upstream")
    return config.model_copy(update=update)


def describe(config: Config) -> list[str]:
    """Banner lines: what is recorded or replayed."""
    rec, rep = config.record, config.replay
    lines = []
    if rec.dir:
        lines.append(f"  recording:            every exchange to {rec.dir.rstrip('/')}/ "
                     "(cassettes, docs/replay.md)")
    if rep.dir:
        lines.append(f"  replaying:            {rep.dir.rstrip('/')}/ (timing {rep.timing}, match "
                     f"{rep.match}, a miss: {'the mock model' if rep.miss == 'mock' else '404'})")
    return lines
