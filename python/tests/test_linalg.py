"""anvil.linalg against NumPy, and the release's sample: a complex64 8x8 system plus 8 I solved
through lu_factor + lu_solve."""
import numpy as np
import pytest

import anvil
from conftest import devices


def residual(a, x, b):
    return np.linalg.norm(a @ x - b) / (np.linalg.norm(a) * np.linalg.norm(x) + np.linalg.norm(b))


@pytest.mark.parametrize("device", devices())
def test_release_sample_complex_lu_solve(device, rng):
    # torch.linalg.lu_factor / lu_solve on complex64 (the release's example), namespace changed.
    A = anvil.tensor(rng.standard_normal((8, 8)) + 1j * rng.standard_normal((8, 8)), dtype=anvil.complex64,
                     device=device) + 8 * anvil.eye(8, dtype=anvil.complex64, device=device)
    B = anvil.randn(8, 3, dtype=anvil.complex64, device=device)
    LU, pivots = anvil.linalg.lu_factor(A)
    X = anvil.linalg.lu_solve(LU, pivots, B)
    a, b, x = A.cpu().numpy(), B.cpu().numpy(), X.cpu().numpy()
    assert np.abs(a @ x - b).max() < 1e-5
    P, L, U = anvil.lu_unpack(LU, pivots)
    np.testing.assert_allclose((P @ L @ U).cpu().numpy(), a, atol=1e-5)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_against_numpy(device, dtype, rng):
    eps = np.finfo(dtype).eps
    a = rng.standard_normal((3, 6, 6)).astype(dtype) + 6 * np.eye(6, dtype=dtype)
    b = rng.standard_normal((3, 6, 2)).astype(dtype)
    A, B = anvil.tensor(a, device=device), anvil.tensor(b, device=device)
    assert residual(a, anvil.linalg.solve(A, B).cpu().numpy(), b) < 20 * eps
    np.testing.assert_allclose(anvil.linalg.det(A).cpu().numpy(), np.linalg.det(a), rtol=100 * eps)
    sign, logabs = anvil.linalg.slogdet(A)
    ns, nl = np.linalg.slogdet(a)
    np.testing.assert_array_equal(sign.cpu().numpy(), ns)
    np.testing.assert_allclose(logabs.cpu().numpy(), nl, rtol=100 * eps)
    np.testing.assert_allclose(anvil.linalg.inv(A).cpu().numpy(), np.linalg.inv(a), rtol=1e3 * eps, atol=1e3 * eps)
    inv, info = anvil.linalg.inv_ex(A)
    assert info.cpu().tolist() == [0, 0, 0]
    spd = a @ a.transpose(0, 2, 1) + np.eye(6, dtype=dtype)
    L = anvil.linalg.cholesky(anvil.tensor(spd, device=device)).cpu().numpy()
    np.testing.assert_allclose(L, np.linalg.cholesky(spd), rtol=1e3 * eps, atol=1e3 * eps)
    Q, R = anvil.linalg.qr(A)
    np.testing.assert_allclose((Q @ R).cpu().numpy(), a, atol=1e3 * eps * 6)
    np.testing.assert_allclose(anvil.linalg.svdvals(A).cpu().numpy(), np.linalg.svd(a, compute_uv=False),
                               rtol=1e3 * eps)
    U, S, Vh = anvil.linalg.svd(A, full_matrices=False)
    np.testing.assert_allclose((U * S.unsqueeze(-2) @ Vh).cpu().numpy(), a, atol=1e3 * eps * 6)
    w = rng.standard_normal((5, 3)).astype(dtype)
    np.testing.assert_allclose(anvil.linalg.pinv(anvil.tensor(w, device=device)).cpu().numpy(), np.linalg.pinv(w),
                               rtol=1e4 * eps, atol=1e4 * eps)
    tri = np.tril(a)
    X = anvil.linalg.solve_triangular(anvil.tensor(tri, device=device), B, upper=False).cpu().numpy()
    assert residual(tri, X, b) < 20 * eps
    y = rng.standard_normal((5, 2)).astype(dtype)
    sol = anvil.linalg.lstsq(anvil.tensor(w, device=device), anvil.tensor(y, device=device)).solution
    np.testing.assert_allclose(sol.cpu().numpy(), np.linalg.lstsq(w, y, rcond=None)[0], rtol=1e4 * eps, atol=1e4 * eps)


def test_errors_as_torch():
    with pytest.raises(anvil.LinAlgError, match="singular"):
        anvil.linalg.inv(anvil.zeros(3, 3))
    with pytest.raises(RuntimeError):  # torch.linalg.LinAlgError is a RuntimeError too
        anvil.linalg.solve(anvil.zeros(2, 2), anvil.ones(2, 1))
    with pytest.raises(ValueError, match="qr"):
        anvil.linalg.qr(anvil.eye(2), mode="bogus")
    with pytest.raises(ValueError):
        anvil.linalg.solve(anvil.eye(3), anvil.ones(4, 1))
    _, info = anvil.linalg.inv_ex(anvil.zeros(2, 2))  # the _ex forms report, never raise
    assert info.item() > 0
