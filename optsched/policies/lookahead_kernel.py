"""MC-SF's KV look-ahead test (:func:`optsched.policies.orders.lookahead_fits`) as a numba kernel.

The compiled engine (:mod:`.fastengine`) writes each request's projection (peak p_j, iterations
left d_j) into two scratch arrays; :func:`fits` sorts them in place by d_j, descending (heapsort:
the kernel allocates nothing), and checks sum over {d_j >= k} of (p_j - d_j + k) <= capacity at
every k = d_j, as the reference. The check depends only on the groups of equal d_j, so any sort by
d_j gives the reference's answer.
"""

from __future__ import annotations

from numba import njit

__all__ = ["fits"]


@njit(cache=True, _nrt=False)
def _sift(peak, left, root, end):  # noqa: ANN001, ANN202 - numba kernel
    """Sift ``root`` down the min-heap on ``left[:end]`` (``peak`` moves along)."""
    while 2 * root + 1 < end:
        child = 2 * root + 1
        if child + 1 < end and left[child + 1] < left[child]:
            child += 1
        if left[root] <= left[child]:
            return
        left[root], left[child] = left[child], left[root]
        peak[root], peak[child] = peak[child], peak[root]
        root = child


@njit(cache=True, _nrt=False)
def fits(peak, left, n, capacity):  # noqa: ANN001, ANN201 - numba kernel
    """Whether the ``n`` projections ``(peak[j], left[j])`` fit in ``capacity`` KV slots at every
    future iteration; ``peak[:n]`` and ``left[:n]`` are reordered (by ``left``, descending)."""
    for root in range(n // 2 - 1, -1, -1):
        _sift(peak, left, root, n)
    for end in range(n - 1, 0, -1):
        left[0], left[end] = left[end], left[0]
        peak[0], peak[end] = peak[end], peak[0]
        _sift(peak, left, 0, end)
    base = 0
    for x in range(n):
        base += peak[x] - left[x]
        if (x + 1 == n or left[x + 1] != left[x]) and base + left[x] * (x + 1) > capacity:
            return False
    return True
