"""Who initialises MPI: when mpi4py did it first, viper uses that MPI (and
does not finalise it); at a thread level below MPI_THREAD_MULTIPLE viper
refuses with the reason. Each case runs in its own interpreter (MPI can be
initialised once per process), as an MPI singleton (no mpirun)."""
import os
import subprocess
import sys

import pytest

pytest.importorskip("mpi4py")


def run(code):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_COMM", "PMIX_", "PMI_"))}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_viper_uses_the_mpi_that_mpi4py_started():
    r = run("from mpi4py import MPI\n"
            "import viper\n"
            "rank, size, here = viper._viper.mpi_init()\n"
            "assert (rank, size, here) == (MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size(), False)\n"
            "viper.Publisher(tier='host').close()\n"
            "print('ok', MPI.Query_thread() == MPI.THREAD_MULTIPLE)\n")
    assert r.returncode == 0, r.stderr
    assert "ok True" in r.stdout


def test_thread_level_below_multiple_is_refused():
    r = run("import mpi4py\n"
            "mpi4py.rc.thread_level = 'single'\n"
            "from mpi4py import MPI\n"
            "import viper\n"
            "try:\n"
            "    viper.Publisher(tier='host')\n"
            "except RuntimeError as e:\n"
            "    print('refused:', e)\n")
    assert r.returncode == 0, r.stderr
    assert "refused:" in r.stdout and "MPI_THREAD_MULTIPLE" in r.stdout, r.stdout
