"""`normgen torch` on a user's own declarations (tests/user_project/*.norm), from Python.

CTest builds the extension first ("normgen torch: build a user extension", into
$NORMGEN_USER_TORCH_OPS); here it is loaded beside the catalog's library and checked against eager
PyTorch versions of the two formulas, forward (f32, bf16) and backward (f32, autograd).
"""

import os

import pytest
import torch
import torch.nn.functional as F

import normgen.torch as ngt


@pytest.fixture(scope="module")
def user():
    return ngt.load(os.environ["NORMGEN_USER_TORCH_OPS"])


def gemma_add_rms_norm(x, residual, weight, eps=1e-6):
    h = x + residual
    return h, h * torch.rsqrt((h * h).mean(-1, keepdim=True) + eps) * (1 + weight)


def layer_norm_eps_out(x, weight, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    return (x - mu) / (x.var(-1, unbiased=False, keepdim=True).sqrt() + eps) * weight


def test_layers_and_schemas(user):
    assert sorted(user.layers) == ["gemma_add_rms_norm", "layer_norm_eps_out"]
    schema = str(torch.ops.normgen.gemma_add_rms_norm.default._schema)
    assert "Tensor x, Tensor residual, Tensor weight, *, float eps=" in schema and "bool saved=False" in schema
    assert hasattr(torch.ops.normgen, "layer_norm_eps_out_backward")


def test_beside_the_catalog(user):
    catalog = os.environ.get("NORMGEN_TORCH_OPS")
    if not catalog:
        pytest.skip("no catalog library")
    cat = ngt.load(catalog)
    assert "layer_norm" in cat.layers and "layer_norm" not in user.layers


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_forward(user, dtype):
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(5, 40, generator=g, dtype=torch.float64) + 10).to(dtype)
    r = torch.randn(5, 40, generator=g, dtype=torch.float64).to(dtype)
    w = torch.randn(40, generator=g, dtype=torch.float64).to(dtype)  # weight shares x's storage type
    h, y = user.functional.gemma_add_rms_norm(x, r, w)
    h_ref, y_ref = gemma_add_rms_norm(x.double(), r.double(), w.double())
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-2, atol=3e-2)
    torch.testing.assert_close(h.double(), h_ref, **tol)
    torch.testing.assert_close(y.double(), y_ref, **tol)
    w32 = torch.rand(40, generator=g) + 0.5
    y2 = user.functional.layer_norm_eps_out(x, w32)
    torch.testing.assert_close(y2.double(), layer_norm_eps_out(x.double(), w32.double()), **tol)


def test_backward(user):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(6, 24, generator=g) + 10
    w = torch.rand(24, generator=g) + 0.5
    m = user.layer_norm_eps_out(24)
    with torch.no_grad():
        m.weight.copy_(w)
    xs = x.clone().requires_grad_()
    up = torch.randn(6, 24, generator=g, dtype=torch.float64)
    (m(xs).double() * up).sum().backward()
    xr, wr = x.double().requires_grad_(), w.double().requires_grad_()
    (layer_norm_eps_out(xr, wr) * up).sum().backward()
    torch.testing.assert_close(xs.grad.double(), xr.grad, rtol=1e-4, atol=1e-5 * xr.grad.abs().max().item())
    torch.testing.assert_close(m.weight.grad.double(), wr.grad, rtol=1e-4, atol=1e-5 * wr.grad.abs().max().item())
