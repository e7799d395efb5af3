"""The check of calls given a kattn.Workspace, for the single-process and the distributed tests."""
import numpy as np

import kattn


def expect_reused(step):
    """step(**kw) (a tuple of arrays) without a workspace, then twice with one: the same results
    each time, and no allocation in the second call; release() then frees it all."""
    fresh = step()
    ws = kattn.Workspace()
    first = step(workspace=ws)
    allocated, held = ws.allocations, ws.bytes
    again = step(workspace=ws)
    for a, b, c in zip(fresh, first, again):
        assert np.array_equal(a, b) and np.array_equal(a, c)
    assert allocated > 0 and ws.allocations == allocated and ws.bytes == held > 0
    ws.release()
    assert ws.bytes == 0
