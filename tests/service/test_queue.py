"""JobQueue against a real Redis: claims, leases, fencing, retries, cancel, paging, TTL."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis

from service.errors import TooManyActiveJobs
from service.queue import Claim, JobQueue
from service.settings import Settings
from tests.service.conftest import committed

MakeQueue = Callable[..., JobQueue]


@pytest.fixture
def make_queue(redis_client: redis.Redis) -> MakeQueue:
    """Queues on the flushed test database (same prefix, so they share jobs)."""

    def make(**kwargs: Any) -> JobQueue:
        kwargs.setdefault("prefix", "t")
        return JobQueue(redis_client, **kwargs)

    return make


@pytest.fixture
def queue(make_queue: MakeQueue) -> JobQueue:
    return make_queue()


def _pending(queue: JobQueue) -> list[dict[str, Any]]:
    return queue.client.xpending_range(queue.stream, queue.group, "-", "+", 100)


def _claim(queue: JobQueue, consumer: str = "w1") -> Claim:
    claim = queue.claim(consumer, block_ms=100)
    assert claim is not None
    return claim


def test_submit_creates_queued_job_and_enqueues_only_its_id(queue: JobQueue) -> None:
    job = queue.submit("ds1", {"n_clusters": 3, "sigma0": 2.5})
    assert job == {
        "id": job["id"],
        "dataset_id": "ds1",
        "params": {"n_clusters": 3, "sigma0": 2.5},
        "status": "queued",
        "progress": {"fraction": None, "sigma": None, "iteration": None, "objective": None},
        "error": None,
        "created_at": job["created_at"],
        "started_at": None,
        "finished_at": None,
        "attempts": 0,
        "tenant": "default",
    }
    assert job["created_at"].endswith("+00:00")
    assert queue.get(job["id"]) == job
    assert queue.depth() == 1
    entries = queue.client.xrange(queue.stream)
    assert [fields for _, fields in entries] == [{b"job": job["id"].encode()}]


def test_submit_with_existing_id_is_idempotent(queue: JobQueue) -> None:
    first = queue.submit("ds1", {"n_clusters": 3}, job_id="fixed")
    again = queue.submit("ds2", {"n_clusters": 9}, job_id="fixed")
    assert again == first
    assert queue.client.xlen(queue.stream) == 1


def test_get_unknown_is_none(queue: JobQueue) -> None:
    assert queue.get("nope") is None
    assert queue.cancel("nope") is None
    assert queue.delete("nope") is False
    assert committed(queue, "nope") is None


def test_claim_then_succeed_acknowledges_and_sets_ttl(queue: JobQueue) -> None:
    job = queue.submit("ds1", {"n_clusters": 2})
    claim = _claim(queue)
    assert claim == Claim(
        job_id=job["id"],
        attempt=1,
        entry_id=claim.entry_id,
        consumer="w1",
        dataset_id="ds1",
        params={"n_clusters": 2},
    )
    running = queue.get(job["id"])
    assert running is not None
    assert running["status"] == "running"
    assert running["attempts"] == 1
    assert running["started_at"] is not None
    assert queue.depth() == 0
    assert len(_pending(queue)) == 1
    assert queue.claim("w2", block_ms=50) is None

    assert queue.succeed(claim, {"inertia": 1.5, "attempt": 1}) is True
    done = queue.get(job["id"])
    assert done is not None
    assert done["status"] == "succeeded"
    assert done["finished_at"] is not None
    assert done["progress"]["fraction"] == 1.0
    assert committed(queue, job["id"]) == {"inertia": 1.5, "attempt": 1}
    assert _pending(queue) == []
    assert queue.client.xlen(queue.stream) == 0
    ttl = queue.client.ttl(queue.job_key(job["id"]))
    assert 0 < ttl <= queue.ttl_s
    # a finished job is never handed out again, and a second succeed changes nothing
    assert queue.claim("w2", block_ms=50) is None
    assert queue.succeed(claim, {"inertia": 99.0}) is False
    assert committed(queue, job["id"]) == {"inertia": 1.5, "attempt": 1}


def test_unfinished_job_has_no_ttl(queue: JobQueue) -> None:
    job = queue.submit("ds1", {})
    _claim(queue)
    assert queue.client.ttl(queue.job_key(job["id"])) == -1


def test_stale_claim_is_fenced_out_after_reclaim(make_queue: MakeQueue) -> None:
    queue = make_queue(lease_s=0.2)
    job = queue.submit("ds1", {})
    stale = _claim(queue, "a")
    time.sleep(0.3)  # a's lease lapses without a renewal
    fresh = _claim(queue, "b")
    assert (fresh.job_id, fresh.attempt) == (job["id"], 2)

    assert queue.renew(stale) is False
    owners = [p["consumer"] for p in _pending(queue)]
    assert owners == [b"b"]  # the stale renew did not pull the entry back
    assert queue.report_progress(stale, fraction=0.5, sigma=1, iteration=3, objective=2) is False
    assert queue.stop_reason(stale) == "fenced"
    assert queue.succeed(stale, {"who": "a"}) is False
    assert queue.fail(stale, "boom", retryable=False) == "running"
    assert queue.mark_canceled(stale) is False
    current = queue.get(job["id"])
    assert current is not None
    assert current["status"] == "running"
    assert current["error"] is None

    assert queue.succeed(fresh, {"who": "b"}) is True
    assert committed(queue, job["id"]) == {"who": "b"}
    assert queue.succeed(stale, {"who": "a"}) is False
    assert committed(queue, job["id"]) == {"who": "b"}


def test_dead_worker_job_is_reclaimed_and_succeeds_once(make_queue: MakeQueue) -> None:
    # A lease of a second: the check that it is still held runs well within it even on a
    # loaded machine (a 0.2 s lease lapsed there before the check once).
    queue = make_queue(lease_s=1.0)
    job = queue.submit("ds1", {})
    _claim(queue, "dies")  # never renewed, never acknowledged
    assert queue.claim("other", block_ms=50) is None  # lease still held
    time.sleep(1.1)
    claim = _claim(queue, "other")
    assert claim.attempt == 2
    assert queue.succeed(claim, {"ok": True}) is True
    time.sleep(1.1)
    assert queue.claim("third", block_ms=50) is None
    done = queue.get(job["id"])
    assert done is not None
    assert (done["status"], done["attempts"]) == ("succeeded", 2)
    assert _pending(queue) == []


def test_renewed_lease_is_not_reclaimed(make_queue: MakeQueue) -> None:
    queue = make_queue(lease_s=0.5)
    queue.submit("ds1", {})
    claim = _claim(queue, "long")
    deadline = time.monotonic() + 1.6  # over three lease windows
    while time.monotonic() < deadline:
        assert queue.renew(claim) is True
        assert queue.claim("thief", block_ms=20) is None
        time.sleep(0.05)
    time.sleep(0.6)  # stop renewing: now it is up for grabs
    taken = _claim(queue, "thief")
    assert taken.attempt == 2
    assert queue.renew(claim) is False


def test_retryable_failure_requeues_then_dead_letters(queue: JobQueue) -> None:
    job = queue.submit("ds1", {})
    statuses = []
    for attempt in (1, 2, 3):
        claim = _claim(queue, f"w{attempt}")
        assert claim.attempt == attempt
        statuses.append(queue.fail(claim, f"oops {attempt}", retryable=True))
        assert _pending(queue) == []
    assert statuses == ["queued", "queued", "failed"]
    assert queue.client.xlen(queue.stream) == 0
    assert queue.claim("w4", block_ms=50) is None
    failed = queue.get(job["id"])
    assert failed is not None
    assert (failed["status"], failed["attempts"], failed["error"]) == ("failed", 3, "oops 3")
    assert failed["finished_at"] is not None
    assert [d["job_id"] for d in queue.dead_letters()[0]] == [job["id"]]
    assert queue.dead_letters()[0][0]["error"] == "oops 3"


def test_requeued_job_shows_last_error_while_queued(queue: JobQueue) -> None:
    job = queue.submit("ds1", {})
    queue.fail(_claim(queue), "transient", retryable=True)
    queued = queue.get(job["id"])
    assert queued is not None
    assert (queued["status"], queued["error"], queued["attempts"]) == ("queued", "transient", 1)
    assert queue.depth() == 1
    assert queue.succeed(_claim(queue), {}) is True
    done = queue.get(job["id"])
    assert done is not None
    assert done["error"] is None


def test_repeatedly_dying_workers_dead_letter_the_job(make_queue: MakeQueue) -> None:
    queue = make_queue(lease_s=0.1, max_attempts=2)
    job = queue.submit("ds1", {})
    for attempt in (1, 2):
        assert _claim(queue, f"dies{attempt}").attempt == attempt
        time.sleep(0.15)
    assert queue.claim("next", block_ms=50) is None
    failed = queue.get(job["id"])
    assert failed is not None
    assert failed["status"] == "failed"
    assert failed["attempts"] == 2
    assert "died" in failed["error"]
    assert queue.dead_letters()[0][0]["job_id"] == job["id"]
    assert _pending(queue) == []


def test_bad_input_fails_at_once(queue: JobQueue) -> None:
    job = queue.submit("ds1", {"n_clusters": 0})
    claim = _claim(queue)
    assert queue.fail(claim, "n_clusters must be >= 1", retryable=False) == "failed"
    failed = queue.get(job["id"])
    assert failed is not None
    assert (failed["status"], failed["attempts"]) == ("failed", 1)
    assert failed["error"] == "n_clusters must be >= 1"
    assert queue.dead_letters()[0][0]["job_id"] == job["id"]
    assert queue.claim("w2", block_ms=50) is None


def test_cancel_queued_job_never_runs(queue: JobQueue) -> None:
    job = queue.submit("ds1", {})
    canceled = queue.cancel(job["id"])
    assert canceled is not None
    assert canceled["status"] == "canceled"
    assert canceled["finished_at"] is not None
    assert queue.depth() == 0
    assert queue.claim("w1", block_ms=50) is None
    assert queue.client.xlen(queue.stream) == 0  # the skipped entry was acknowledged
    after = queue.get(job["id"])
    assert after is not None
    assert (after["status"], after["attempts"]) == ("canceled", 0)


def test_cancel_running_job_flags_it_for_the_worker(queue: JobQueue) -> None:
    job = queue.submit("ds1", {})
    claim = _claim(queue)
    assert queue.stop_reason(claim) is None
    flagged = queue.cancel(job["id"])
    assert flagged is not None
    assert flagged["status"] == "running"
    assert queue.stop_reason(claim) == "canceled"
    assert queue.report_progress(claim, fraction=0.1, sigma=1, iteration=1, objective=1) is False
    assert queue.renew(claim) is False
    assert queue.succeed(claim, {}) is False
    assert queue.mark_canceled(claim) is True
    done = queue.get(job["id"])
    assert done is not None
    assert done["status"] == "canceled"
    assert done["finished_at"] is not None
    assert _pending(queue) == []
    assert queue.client.ttl(queue.job_key(job["id"])) > 0


def test_cancel_finished_job_is_unchanged(queue: JobQueue) -> None:
    job = queue.submit("ds1", {})
    queue.succeed(_claim(queue), {})
    before = queue.get(job["id"])
    assert queue.cancel(job["id"]) == before


def test_cancel_of_a_dead_workers_job_ends_at_reclaim(make_queue: MakeQueue) -> None:
    queue = make_queue(lease_s=0.1)
    job = queue.submit("ds1", {})
    _claim(queue, "dies")
    queue.cancel(job["id"])
    time.sleep(0.15)
    assert queue.claim("other", block_ms=50) is None
    done = queue.get(job["id"])
    assert done is not None
    assert done["status"] == "canceled"
    assert _pending(queue) == []


def test_failure_with_pending_cancel_cancels(queue: JobQueue) -> None:
    job = queue.submit("ds1", {})
    claim = _claim(queue)
    queue.cancel(job["id"])
    assert queue.fail(claim, "boom", retryable=True) == "canceled"
    assert queue.claim("w2", block_ms=50) is None


def test_progress_is_stored_and_json_safe(queue: JobQueue) -> None:
    job = queue.submit("ds1", {})
    claim = _claim(queue)
    assert queue.report_progress(claim, fraction=0.25, sigma=3.5, iteration=7, objective=12.0)
    current = queue.get(job["id"])
    assert current is not None
    assert current["progress"] == {
        "fraction": 0.25,
        "sigma": 3.5,
        "iteration": 7,
        "objective": 12.0,
    }
    assert queue.report_progress(claim, fraction=0.5, sigma=0.0, iteration=8, objective=math.nan)
    current = queue.get(job["id"])
    assert current is not None
    assert current["progress"]["objective"] is None
    assert current["progress"]["iteration"] == 8


def test_reclaim_resets_progress(make_queue: MakeQueue) -> None:
    queue = make_queue(lease_s=0.1)
    job = queue.submit("ds1", {})
    queue.report_progress(_claim(queue, "a"), fraction=0.9, sigma=1, iteration=50, objective=1)
    time.sleep(0.15)
    _claim(queue, "b")
    current = queue.get(job["id"])
    assert current is not None
    assert current["progress"]["iteration"] is None


def test_list_pages_newest_first_and_filters_by_status(queue: JobQueue) -> None:
    ids = [queue.submit("ds", {"i": i})["id"] for i in range(5)]
    queue.succeed(_claim(queue), {})  # the oldest
    _claim(queue)  # the second oldest, running
    jobs, total = queue.list()
    assert total == 5
    assert [j["id"] for j in jobs] == ids[::-1]
    page, total = queue.list(offset=1, limit=2)
    assert (total, [j["id"] for j in page]) == (5, [ids[3], ids[2]])
    queued, total = queue.list(status="queued")
    assert (total, [j["id"] for j in queued]) == (3, ids[:1:-1])
    assert [j["id"] for j in queue.list(status="running")[0]] == [ids[1]]
    assert [j["id"] for j in queue.list(status="succeeded")[0]] == [ids[0]]
    assert queue.list(offset=10)[0] == []
    assert queue.list(limit=0) == ([], 5)
    assert queue.status_counts() == {
        "queued": 3,
        "running": 1,
        "succeeded": 1,
        "failed": 0,
        "canceled": 0,
    }
    with pytest.raises(ValueError, match="status must be one of"):
        queue.list(status="bogus")


def test_finished_jobs_expire_and_leave_the_indexes(make_queue: MakeQueue) -> None:
    queue = make_queue(ttl_s=1)
    done = queue.submit("ds", {})["id"]
    kept = queue.submit("ds", {})["id"]
    queue.succeed(_claim(queue), {})
    assert queue.status_counts()["succeeded"] == 1
    time.sleep(1.3)
    assert queue.get(done) is None
    jobs, total = queue.list()
    assert (total, [j["id"] for j in jobs]) == (1, [kept])
    assert queue.status_counts()["succeeded"] == 0
    assert queue.get(kept) is not None  # unfinished jobs never expire


def test_delete_queued_and_running_jobs(queue: JobQueue) -> None:
    queued = queue.submit("ds", {})["id"]
    assert queue.delete(queued) is True
    assert queue.get(queued) is None
    assert queue.list() == ([], 0)
    assert queue.claim("w1", block_ms=50) is None
    assert queue.client.xlen(queue.stream) == 0

    running = queue.submit("ds", {})["id"]
    claim = _claim(queue)
    assert queue.delete(running) is True
    assert queue.stop_reason(claim) == "deleted"
    assert queue.renew(claim) is False
    assert queue.report_progress(claim, fraction=1, sigma=0, iteration=1, objective=0) is False
    assert queue.succeed(claim, {}) is False
    assert queue.mark_canceled(claim) is False
    assert _pending(queue) == []  # the orphaned entry was acknowledged
    assert queue.get(running) is None
    assert queue.status_counts()["running"] == 0


def test_workers_alive_follows_heartbeats(make_queue: MakeQueue) -> None:
    queue = make_queue(worker_ttl_s=1.0)
    assert queue.workers_alive() == 0
    queue.register_worker("a")
    queue.register_worker("b")
    assert queue.workers_alive() == 2
    queue.unregister_worker("b")
    assert queue.workers_alive() == 1
    time.sleep(1.1)
    assert queue.workers_alive() == 0
    queue.worker_heartbeat("a")
    assert queue.workers_alive() == 1


def test_unregister_keeps_a_consumer_that_holds_entries(queue: JobQueue) -> None:
    queue.submit("ds", {})
    _claim(queue, "busy")
    queue.unregister_worker("busy")
    assert [p["consumer"] for p in _pending(queue)] == [b"busy"]


def test_claim_recreates_a_missing_group(queue: JobQueue) -> None:
    queue.client.flushdb()
    job = queue.submit("ds", {})
    assert _claim(queue).job_id == job["id"]


def test_from_settings_uses_service_settings(redis_client: redis.Redis) -> None:
    settings = Settings(key_prefix="pfx", lease_s=4.0, max_attempts=5, result_ttl_s=60)
    queue = JobQueue.from_settings(redis_client, settings)
    assert (queue.prefix, queue.lease_s, queue.max_attempts, queue.ttl_s) == ("pfx", 4.0, 5, 60)
    job = queue.submit("ds", {})
    assert redis_client.exists(f"pfx:job:{job['id']}")


def test_decoded_client_works_too(redis_server: str, redis_client: redis.Redis) -> None:
    client = redis.Redis.from_url(redis_server, decode_responses=True)
    queue = JobQueue(client, prefix="d")
    job = queue.submit("ds", {"k": 1})
    claim = _claim(queue)
    assert claim.job_id == job["id"]
    assert queue.succeed(claim, {"x": 1})
    assert queue.list(status="succeeded")[1] == 1
    client.close()


def test_release_hands_the_job_back_without_using_an_attempt(make_queue: MakeQueue) -> None:
    queue = make_queue(max_attempts=1)
    job = queue.submit("ds", {})
    first = _claim(queue, "stopping")
    assert queue.release(first) == "queued"
    assert _pending(queue) == []
    assert queue.depth() == 1
    assert queue.succeed(first, {}) is False  # the handed-back attempt is fenced out
    second = _claim(queue, "next")
    assert second.attempt == 2  # a new fencing token, yet not dead-lettered at max_attempts=1
    assert queue.fail(second, "flaky", retryable=True) == "failed"  # its one real attempt
    failed = queue.get(job["id"])
    assert failed is not None
    assert failed["status"] == "failed"


def test_release_of_a_canceled_job_cancels_it(queue: JobQueue) -> None:
    job = queue.submit("ds", {})
    claim = _claim(queue)
    queue.cancel(job["id"])
    assert queue.release(claim) == "canceled"
    assert queue.claim("w2", block_ms=50) is None


def test_stale_renew_cannot_steal_an_entry_being_reclaimed(make_queue: MakeQueue) -> None:
    queue = make_queue(lease_s=0.1)
    queue.submit("ds", {})
    stale = _claim(queue, "a")
    time.sleep(0.15)
    # b has taken the entry over but not yet raised the fencing token (mid-claim)
    queue.client.xautoclaim(queue.stream, queue.group, "b", 100, start_id="0-0", count=1)
    assert queue.renew(stale) is False
    assert [p["consumer"] for p in _pending(queue)] == [b"b"]


def test_a_claim_that_lost_its_entry_changes_nothing(make_queue: MakeQueue) -> None:
    queue = make_queue(lease_s=0.1)
    job = queue.submit("ds", {})
    # a reads the entry but stalls before starting the job ...
    ((_, [(entry_id, fields)]),) = queue.client.xreadgroup(
        queue.group, "a", {queue.stream: ">"}, count=1
    )
    time.sleep(0.15)
    taken = _claim(queue, "b")  # ... b reclaims it and starts attempt 1
    assert taken.attempt == 1
    assert queue._start(entry_id.decode(), fields, "a") is None  # a's late start is void
    current = queue.get(job["id"])
    assert current is not None
    assert current["attempts"] == 1
    assert [p["consumer"] for p in _pending(queue)] == [b"b"]


def test_reap_requeues_a_dead_workers_job_then_dead_letters(make_queue: MakeQueue) -> None:
    queue = make_queue(lease_s=0.1, max_attempts=2)
    job = queue.submit("ds", {})
    _claim(queue, "dies")
    assert queue.reap("busy") == 0  # lease still held
    time.sleep(0.15)
    assert queue.reap("busy") == 1
    requeued = queue.get(job["id"])
    assert requeued is not None
    assert (requeued["status"], requeued["attempts"]) == ("queued", 1)
    assert _pending(queue) == []
    assert queue.depth() == 1
    assert _claim(queue, "dies again").attempt == 2
    time.sleep(0.15)
    assert queue.reap("busy") == 1
    failed = queue.get(job["id"])
    assert failed is not None
    assert (failed["status"], failed["attempts"]) == ("failed", 2)
    assert "died" in failed["error"]
    assert queue.claim("w", block_ms=50) is None


def test_reap_leaves_renewed_leases_alone(make_queue: MakeQueue) -> None:
    queue = make_queue(lease_s=0.2)
    queue.submit("ds", {})
    claim = _claim(queue, "alive")
    for _ in range(4):
        time.sleep(0.1)
        assert queue.renew(claim)
        assert queue.reap("busy") == 0
    assert queue.succeed(claim, {}) is True


def test_dead_letters_page_newest_first(queue: JobQueue) -> None:
    assert queue.dead_letters() == ([], 0)
    ids = []
    for n in range(3):
        ids.append(queue.submit("ds1", {})["id"])
        assert queue.fail(_claim(queue), f"bad {n}", retryable=False) == "failed"
    items, total = queue.dead_letters(offset=1, limit=1)
    assert total == 3 and [d["job_id"] for d in items] == [ids[1]]
    newest = queue.dead_letters(limit=10)[0][0]
    assert newest["job_id"] == ids[2] and newest["error"] == "bad 2"
    assert newest["attempts"] == 1 and newest["failed_at"].endswith("+00:00")
    assert queue.dead_letters(offset=3) == ([], 3)
    assert queue.dead_letters(limit=0) == ([], 3)
    with pytest.raises(ValueError):
        queue.dead_letters(offset=-1)


# ---- tenants -------------------------------------------------------------------------------


def test_concurrent_submits_never_overshoot_the_cap(queue: JobQueue) -> None:
    def submit(_: int) -> str:
        try:
            return queue.submit("ds", {"n_clusters": 2}, tenant="t", max_active=3)["status"]
        except TooManyActiveJobs:
            return "refused"

    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(submit, range(24)))
    assert outcomes.count("queued") == 3 and outcomes.count("refused") == 21
    assert queue.active("t") == 3 and queue.active("other") == 0
    claim = queue.claim("w1", block_ms=100)
    assert claim is not None and queue.active("t") == 3  # running still counts


def test_each_tenant_has_its_own_lists_counts_and_dead_letters(queue: JobQueue) -> None:
    a = queue.submit("ds", {"n_clusters": 2}, tenant="a")
    b = queue.submit("ds", {"n_clusters": 2}, tenant="b")
    assert [job["id"] for job in queue.list(tenant="a")[0]] == [a["id"]]
    assert {job["id"] for job in queue.list()[0]} == {a["id"], b["id"]}
    assert queue.list(tenant="a", status="queued")[1] == 1
    claim = queue.claim("w1", block_ms=100)
    assert claim is not None
    queue.fail(claim, "bad input", retryable=False)
    failed = claim.job_id
    owner = "a" if failed == a["id"] else "b"
    other = "b" if owner == "a" else "a"
    assert queue.status_counts(owner)["failed"] == 1 and queue.status_counts(other)["failed"] == 0
    assert [d["job_id"] for d in queue.dead_letters(tenant=owner)[0]] == [failed]
    assert queue.dead_letters(tenant=other)[1] == 0
    assert queue.dead_letters()[0][0]["tenant"] == owner


def test_deleted_and_expired_jobs_leave_their_tenants_indexes(make_queue: MakeQueue) -> None:
    queue = make_queue(ttl_s=1)
    kept = queue.submit("ds", {"n_clusters": 2}, tenant="a")
    gone = queue.submit("ds", {"n_clusters": 2}, tenant="a")
    assert queue.delete(gone["id"])
    assert queue.list(tenant="a")[1] == 1
    queue.cancel(kept["id"])  # finished: its hash expires after the 1 s retention
    assert queue.status_counts("a")["canceled"] == 1
    time.sleep(2.2)
    assert queue.list(tenant="a")[1] == 0 and queue.status_counts("a")["canceled"] == 0
    assert not queue.client.hlen(f"{queue.prefix}:jobs:owner")
