"""Webhooks: a job's ``callback_url`` is POSTed once when the job ends.

When: the queue script that ends a job (succeeded, failed, canceled: ``finish`` in
:mod:`service.lua`) adds the job to the sorted set ``{p}:webhooks:due``, in the same atomic
step. A job ends once (the queue's fencing), so it is queued once, whichever worker or
attempt ended it: a worker killed mid-job changes nothing, the attempt that finishes it
queues the webhook.

Who: every worker process runs a :class:`WebhookSender` thread. A sender *takes* a due job
by pushing its score a lease into the future (one script: two senders never take the same
job), POSTs, and then, in one script, records the try on the job (``webhook`` of
``GET /v1/jobs/{id}``) and either drops the job from the set (delivered, or out of tries)
or schedules the next try, ``RBFKM_WEBHOOK_BACKOFF_S`` doubled each time (capped at an
hour), up to ``RBFKM_WEBHOOK_MAX_ATTEMPTS`` tries. Everything lives in Redis (its AOF), so
a sender that dies mid-delivery loses nothing: the job is due again once its lease lapses.
A receiver may then see one message twice (sent, but its record was lost with the sender):
every try of one job's webhook has the same ``webhook-id`` (job id and final status), by
which receivers deduplicate, as Standard Webhooks prescribes.

What: ``{"type": "job.<status>", "timestamp", "data": <the job as GET /v1/jobs/{id}>}``,
signed with the tenant's secret (``RBFKM_WEBHOOK_SECRETS``) by
:func:`rbfkm_client.webhooks.sign`; the receiver checks it with
:func:`rbfkm_client.verify_webhook`. The URL goes through :mod:`service.urls` on every try
(a host that now resolves to a private address is refused), and redirects are not
followed. A job deleted before its webhook went out has none.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

import httpx
import redis
from rbfkm_client.webhooks import ID_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, sign

from service.common import now_stamps
from service.errors import NotConfigured, UnsafeUrl
from service.jobs import webhook_record
from service.logs import OutageLog
from service.queue import JobQueue
from service.settings import Settings
from service.urls import Allowlist, check_url, pinned_request

log = logging.getLogger(__name__)

#: The longest wait between two tries.
MAX_BACKOFF_S = 3600.0

# KEYS[1] the due set; ARGV now, lease: the first due job, its score pushed past the lease.
_TAKE = """
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 1)
if #ids == 0 then return false end
redis.call('ZADD', KEYS[1], tonumber(ARGV[1]) + tonumber(ARGV[2]), ids[1])
return ids[1]
"""

# KEYS[1] the job hash, KEYS[2] the due set; ARGV job id, record (JSON), next try's time
# ('' for none): the record kept on the job, and the job's place in the set.
_RECORD = """
if ARGV[2] ~= '' and redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HSET', KEYS[1], 'webhook', ARGV[2])
end
if ARGV[3] == '' then
  redis.call('ZREM', KEYS[2], ARGV[1])
else
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
end
return 1
"""


def check_callback(url: str, settings: Settings, tenant: str) -> None:
    """Refuse a job's ``callback_url`` the service could not send to: no secret to sign
    with for the tenant, or a host that is not public (not allowed by the operator)."""
    field = "body.callback_url"
    if settings.for_tenant(settings.webhook_secrets, tenant) is None:
        raise NotConfigured(
            f"this server has no webhook secret for tenant {tenant!r} "
            "(RBFKM_WEBHOOK_SECRETS), so it cannot sign webhooks; ask its operator, or "
            "leave callback_url out and follow GET /v1/jobs/{id}/events",
            field,
            "no webhook secret",
        )
    check_url(url, Allowlist.parse(settings.url_allowlist), field=field)


def message_id(job: dict[str, Any]) -> str:
    """The ``webhook-id`` of a job's end: the same on every try, one per job and status."""
    return f"job_{job['id']}_{job['status']}"


def payload(job: dict[str, Any]) -> bytes:
    """The body of a job's webhook (the job as the API serves it, its webhook left out)."""
    from service.schemas import Job

    data = Job.model_validate(job).model_dump(mode="json", exclude={"webhook"})
    event = {"type": f"job.{job['status']}", "timestamp": job.get("finished_at"), "data": data}
    return json.dumps(event, separators=(",", ":")).encode()


def backoff_s(tries: int, base_s: float) -> float:
    """The wait after the ``tries``-th failed try."""
    return min(MAX_BACKOFF_S, base_s * 2 ** (tries - 1))


class WebhookSender:
    """Sends the due webhooks of one deployment (any number of senders may share it)."""

    def __init__(self, queue: JobQueue, settings: Settings) -> None:
        self.queue = queue
        self.settings = settings
        self.allowlist = Allowlist.parse(settings.url_allowlist)
        self.due = f"{queue.prefix}:webhooks:due"
        self.lease_s = max(30.0, 3 * settings.webhook_timeout_s)
        self._take = queue.client.register_script(_TAKE)
        self._record = queue.client.register_script(_RECORD)
        self.outage = OutageLog(log)

    def send_due(self, http: httpx.Client, limit: int = 100) -> int:
        """Try every webhook due now (at most ``limit``); how many were tried."""
        tried = 0
        while tried < limit:
            job_id = self._take(keys=[self.due], args=[f"{time.time():.6f}", self.lease_s])
            if job_id is None:
                break
            self.deliver(http, job_id.decode() if isinstance(job_id, bytes) else job_id)
            tried += 1
        return tried

    def deliver(self, http: httpx.Client, job_id: str) -> None:
        """One try of a job's webhook, recorded on the job."""
        job = self.queue.get(job_id)
        url = (job or {}).get("params", {}).get("callback_url")
        if job is None or not url:  # deleted (or expired) meanwhile: nothing to say
            self._finish(job_id, None, "")
            return
        record = job.get("webhook") or webhook_record(None, url)
        if record.get("delivered"):  # recorded by a sender that died before dropping it
            self._finish(job_id, record, "")
            return
        outcome = self._post(http, job, url)
        record["deliveries"].append(
            {"attempt": len(record["deliveries"]) + 1, "at": now_stamps()[0], **outcome}
        )
        ok = 200 <= outcome.get("status_code", 0) < 300
        tries = len(record["deliveries"])
        record["delivered"] = ok
        done = ok or tries >= self.settings.webhook_max_attempts
        next_at = "" if done else f"{time.time() + backoff_s(tries, self._base_s()):.6f}"
        self._finish(job_id, record, next_at)
        log.info("webhook of job %s, try %d: %s", job_id, tries, outcome)

    def _base_s(self) -> float:
        return self.settings.webhook_backoff_s

    def _post(self, http: httpx.Client, job: dict[str, Any], url: str) -> dict[str, Any]:
        """POST the job's webhook; ``{"status_code": N}`` or ``{"error": "..."}``."""
        secret = self.settings.for_tenant(self.settings.webhook_secrets, job["tenant"])
        if secret is None:
            return {"error": f"no webhook secret for tenant {job['tenant']!r}"}
        body = payload(job)
        msg_id, stamp = message_id(job), int(time.time())
        headers = {
            "Content-Type": "application/json",
            ID_HEADER: msg_id,
            TIMESTAMP_HEADER: str(stamp),
            SIGNATURE_HEADER: sign(secret, msg_id, stamp, body),
        }
        try:
            target = check_url(url, self.allowlist, field="body.callback_url")
            response = pinned_request(http, "POST", target, headers=headers, content=body)
        except UnsafeUrl as exc:
            return {"error": exc.detail}
        except httpx.HTTPError as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}
        return {"status_code": response.status_code}

    def _finish(self, job_id: str, record: dict[str, Any] | None, next_at: str) -> None:
        self._record(
            keys=[self.queue.job_key(job_id), self.due],
            args=[job_id, json.dumps(record) if record is not None else "", next_at],
        )

    def run(self, stop: threading.Event, poll_s: float = 0.25) -> None:
        """Send due webhooks until ``stop`` is set (a worker's background thread)."""
        with httpx.Client(timeout=self.settings.webhook_timeout_s) as http:
            while not stop.wait(poll_s):
                try:
                    self.send_due(http)
                except redis.RedisError as exc:
                    self.outage.failure(exc, "webhooks")
                except Exception:
                    log.exception("webhooks: unexpected error")
                else:
                    self.outage.success()


def start_sender(queue: JobQueue, settings: Settings, stop: threading.Event) -> threading.Thread:
    """A daemon thread that sends webhooks until ``stop`` is set."""
    sender = WebhookSender(queue, settings)
    thread = threading.Thread(target=sender.run, args=(stop,), name="webhooks", daemon=True)
    thread.start()
    return thread
