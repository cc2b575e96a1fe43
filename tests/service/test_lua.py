"""The Lua scripts: statuses rendered from the enum, never spelled; every script compiles."""

from __future__ import annotations

import re

import pytest
import redis

from service.jobs import STATUSES, UNFINISHED
from service.lua import DROP_CONSUMER, JOB_SCRIPTS, PRUNE, STATUS_LUA


def _without_header(script: str) -> str:
    assert script.startswith(STATUS_LUA)
    return script[len(STATUS_LUA) :]


@pytest.mark.parametrize("name", sorted(JOB_SCRIPTS))
def test_no_script_spells_a_status(name: str) -> None:
    body = _without_header(JOB_SCRIPTS[name])
    for status in STATUSES:
        assert not re.search(rf"['\"]{status.value}['\"]", body), (name, status)


def test_prune_and_drop_consumer_spell_no_status() -> None:
    for body in (_without_header(PRUNE), DROP_CONSUMER):
        assert not any(f"'{status.value}'" in body for status in STATUSES)


def test_the_rendered_constants_are_the_enum(redis_client: redis.Redis) -> None:
    names = ", ".join(status.name for status in STATUSES)
    script = STATUS_LUA + f"return {{{names}, #STATUSES, UNFINISHED[QUEUED] and 1 or 0, "
    script += "UNFINISHED[SUCCEEDED] and 1 or 0}"
    reply = [r.decode() if isinstance(r, bytes) else r for r in redis_client.eval(script, 0)]
    assert reply[: len(STATUSES)] == [status.value for status in STATUSES]
    assert reply[len(STATUSES) :] == [len(STATUSES), 1, 0]
    open_ones = [s for s in STATUSES if s in UNFINISHED]
    assert all(f"[{s.name}] = true" in STATUS_LUA for s in open_ones)


@pytest.mark.parametrize("script", [*JOB_SCRIPTS.values(), PRUNE, DROP_CONSUMER])
def test_every_script_compiles(redis_client: redis.Redis, script: str) -> None:
    assert redis_client.script_load(script)
