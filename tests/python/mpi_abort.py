"""abort_on_failure for the tests run under mpirun (imported by the
mpi_test_*.py files; pytest puts this folder on sys.path)."""
import functools
import os
import sys
import traceback

import pytest

import viper


def abort_on_failure(fn):
    """A failure on one rank ends the whole job at once (mpirun aborts the
    others) instead of leaving its peers waiting for their timeouts, or for
    ever at a barrier the failed rank never reaches."""
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except pytest.skip.Exception:
            raise  # a skip (on every rank alike) is not a failure
        except BaseException:
            # Run with -s (CTest does): pytest's capture would swallow this.
            print(f"rank {viper.mpi.rank()}: failed, aborting the job", file=sys.stderr)
            traceback.print_exc()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)
    return wrapped
