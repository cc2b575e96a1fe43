"""The job-status enum: the one list of states, and the two sets everything else reads."""

from __future__ import annotations

import json

from service.jobs import STATUSES, TERMINAL, UNFINISHED, JobStatus
from service.schemas import Job


def test_statuses_in_life_cycle_order() -> None:
    assert [s.value for s in STATUSES] == ["queued", "running", "succeeded", "failed", "canceled"]


def test_terminal_and_unfinished_partition_the_statuses() -> None:
    assert TERMINAL | UNFINISHED == set(STATUSES)
    assert not TERMINAL & UNFINISHED
    assert UNFINISHED == {JobStatus.QUEUED, JobStatus.RUNNING}


def test_members_are_their_values_as_strings() -> None:
    assert JobStatus.RUNNING == "running" and "running" in UNFINISHED
    assert str(JobStatus.FAILED) == f"{JobStatus.FAILED}" == "failed"
    assert json.dumps({"status": JobStatus.CANCELED}) == '{"status": "canceled"}'
    assert JobStatus("succeeded") is JobStatus.SUCCEEDED


def test_the_job_schema_documents_exactly_these_statuses() -> None:
    schema = Job.model_json_schema()
    assert schema["$defs"]["JobStatus"]["enum"] == [s.value for s in STATUSES]
