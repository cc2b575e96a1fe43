"""The layer compiled (``torch.compile``) and exported to ONNX (run by onnxruntime)."""

from __future__ import annotations

import pytest
import torch

from rbfkm_engine.nn import RBFKMeansLayer


def _compile_works() -> bool:
    """``torch.compile`` can build a CPU kernel here (it needs a C++ compiler)."""
    try:
        torch.compile(lambda t: t * 2.0)(torch.ones(2))
    except Exception:  # any failure of the toolchain: the tests below skip
        return False
    return True


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "fullgraph"),
    [
        ({"assignment": "softmax", "n_iter": 2, "learnable_sigma": True}, True),
        ({"assignment": "hard_st", "metric": "cosine"}, True),
        ({"assignment": "softmax", "kernel": "student_t"}, True),
        # The entmax package's autograd function breaks the graph: compiled in pieces.
        ({"assignment": "entmax15"}, False),
    ],
)
def test_compiled_forward_and_backward_match_eager(mode: dict, fullgraph: bool) -> None:
    if not _compile_works():
        pytest.skip("torch.compile is unavailable here")
    torch.manual_seed(0)
    layer = RBFKMeansLayer(4, 3, sigma=0.5, **mode)
    compiled = torch.compile(layer, fullgraph=fullgraph)
    x = torch.randn(2, 16, 3, requires_grad=True)
    x_eager = x.detach().clone().requires_grad_(True)
    out = compiled(x)
    ref = layer(x_eager)
    torch.testing.assert_close(out, ref)
    g = torch.randn_like(ref)
    (grad,) = torch.autograd.grad(out, x, g)
    (grad_eager,) = torch.autograd.grad(ref, x_eager, g)
    torch.testing.assert_close(grad, grad_eager)


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ("softmax", "hard", "hard_st"))
def test_onnx_export_runs_in_onnxruntime(assignment: str, tmp_path) -> None:
    pytest.importorskip("onnx")
    pytest.importorskip("onnxscript")
    ort = pytest.importorskip("onnxruntime")
    torch.manual_seed(1)
    layer = RBFKMeansLayer(5, 3, assignment=assignment, sigma=0.7).eval()
    path = tmp_path / "layer.onnx"
    n = torch.export.Dim("n")
    torch.onnx.export(
        layer,
        (torch.randn(2, 10, 3),),
        path,
        input_names=["x"],
        output_names=["responsibilities"],
        dynamic_shapes=({1: n},),
        verbose=False,
    )
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = torch.randn(2, 23, 3) * 2  # another length than the traced one
    (got,) = session.run(None, {"x": x.numpy()})
    expected = layer(x).detach().numpy()
    torch.testing.assert_close(torch.from_numpy(got), torch.from_numpy(expected))
