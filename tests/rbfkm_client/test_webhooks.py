"""Webhook signatures: what the service signs, the client's helper verifies, and no more."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

import pytest
from rbfkm_client import WebhookVerificationError, verify_webhook
from rbfkm_client.webhooks import sign

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
BODY = b'{"type":"job.succeeded","data":{"id":"j1"}}'
NOW = 1_700_000_000


def headers(signature: str, msg_id: str = "job_j1_succeeded", stamp: int = NOW) -> dict:
    return {"Webhook-Id": msg_id, "Webhook-Timestamp": str(stamp), "Webhook-Signature": signature}


def test_the_signature_is_standard_webhooks_hmac_sha256() -> None:
    key = base64.b64decode(SECRET.removeprefix("whsec_"))
    expected = hmac.new(key, f"job_j1_succeeded.{NOW}.".encode() + BODY, hashlib.sha256)
    assert (
        sign(SECRET, "job_j1_succeeded", NOW, BODY)
        == "v1," + base64.b64encode(expected.digest()).decode()
    )


def test_a_signed_message_verifies_and_gives_its_event() -> None:
    signature = sign(SECRET, "job_j1_succeeded", NOW, BODY)
    event = verify_webhook(SECRET, headers(f"v1,bogus {signature}"), BODY, now=NOW + 10)
    assert event == json.loads(BODY)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"body": BODY.replace(b"j1", b"j2")}, "no webhook signature matches"),
        ({"msg_id": "job_j1_failed"}, "no webhook signature matches"),
        ({"secret": "whsec_" + base64.b64encode(b"another key, 24 bytes!!").decode()}, "matches"),
        ({"now": NOW + 301}, "replay"),
        ({"stamp": "soon"}, "not a number"),
        ({"drop": "Webhook-Signature"}, "no webhook-signature header"),
    ],
)
def test_a_forged_replayed_or_incomplete_message_is_refused(change: dict, match: str) -> None:
    signature = sign(SECRET, "job_j1_succeeded", NOW, BODY)
    sent = headers(signature, change.get("msg_id", "job_j1_succeeded"))
    if "stamp" in change:
        sent["Webhook-Timestamp"] = change["stamp"]
    sent.pop(change.get("drop", ""), None)
    with pytest.raises(WebhookVerificationError, match=match):
        verify_webhook(
            change.get("secret", SECRET), sent, change.get("body", BODY), now=change.get("now", NOW)
        )


def test_secrets_must_be_whsec_base64() -> None:
    for bad in ("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_not base64!", "whsec_c2hvcnQ="):
        with pytest.raises(ValueError, match="secret"):
            sign(bad, "id", NOW, BODY)
