"""Calls whose working copies do not fit under an address-space cap raise
``LocusMemoryError`` (a ``MemoryError``); the interpreter survives and the
package keeps working. Each case runs in a subprocess under
``RLIMIT_AS``: the input is allocated first, then the cap is set a little
above what the process holds, so the input fits and the working copies
(transposed, padded keys; the imputation's values and mask) do not.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

resource = pytest.importorskip("resource")

# Set in the subprocess: the input, then the cap (300 MB above what the
# process holds once the input and the thread pool exist), then the call.
PRELUDE = """
import resource
import numpy as np, locus

def held() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize")

def cap() -> None:
    locus.self_local_mean(np.zeros((4, 2), np.float32), bandwidth=1.0, backend="cpu")
    limit = held() + 300_000_000
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

def expect_memory_error(call) -> None:
    try:
        call()
    except locus.LocusMemoryError as e:
        assert isinstance(e, MemoryError)
        print("LocusMemoryError:", e)
    else:
        raise AssertionError("no LocusMemoryError")
    # The interpreter and the package still work.
    small = locus.self_local_mean(np.eye(3, dtype=np.float32), bandwidth=1.0, backend="cpu")
    assert small.shape == (3, 3)
    print("survived")
"""


def _run(code: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, NODEVICE_SELECT="1", RAYON_NUM_THREADS="2", MALLOC_ARENA_MAX="2")
    return subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc (Linux)")
def test_self_local_mean_past_the_cap_is_a_memory_error() -> None:
    # 10 × 10^7 keys (400 MB): each transposed copy (keys, and the keys as
    # values) is padded to 16 rows, 640 MB.
    r = _run(
        """
        x = np.zeros((10, 10**7), np.float32)
        cap()
        expect_memory_error(lambda: locus.self_local_mean(x, bandwidth=1.0, backend="cpu"))
        """
    )
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert "LocusMemoryError: local_mean: transposed keys needs" in r.stdout, r.stdout
    assert "survived" in r.stdout


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc (Linux)")
def test_impute_past_the_cap_is_a_memory_error() -> None:
    # 10^6 × 100 rows (400 MB): the values and their mask take 800 MB.
    r = _run(
        """
        x = np.zeros((10**6, 100), np.float32)
        x[0, 0] = np.nan
        cap()
        expect_memory_error(lambda: locus.impute(x, bandwidth=1.0, backend="cpu"))
        """
    )
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert "LocusMemoryError: impute: values and mask needs 800000000 bytes" in r.stdout, r.stdout
    assert "survived" in r.stdout
