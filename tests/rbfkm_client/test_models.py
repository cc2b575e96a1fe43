"""The client's objects, and that they agree with the service's definitions."""

from __future__ import annotations

import subprocess
import sys

import scipy.sparse as sp
from rbfkm_client.models import FINISHED, csr_from_pages

from service.jobs import TERMINAL
from service.routes.jobs import csr_rows


def test_finished_statuses_are_the_services_terminal_ones() -> None:
    assert FINISHED == {status.value for status in TERMINAL}


def test_csr_pages_join_back_into_the_matrix() -> None:
    matrix = sp.random(23, 4, density=0.4, format="csr", random_state=0)
    pages = [csr_rows(matrix, offset, 5) for offset in range(0, 23, 5)]
    assert (csr_from_pages(pages) != matrix).nnz == 0


def test_the_client_imports_without_torch() -> None:
    # The client's own distribution does not depend on torch: no module of it imports it.
    code = """
import sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"torch", "rbfkm_engine", "service"}:
            raise ImportError(f"{name} is not installed")
sys.meta_path.insert(0, Refuse())
import rbfkm_client, rbfkm_client.cli, rbfkm_client.sklearn
print("torch" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr
