"""MPI for Viper's host and gpu tiers.

Who initialises MPI: the viper module, with MPI_THREAD_MULTIPLE (Viper's
background threads call MPI), the first time a Publisher or Subscriber needs
it (tier "host" or "gpu", or notify "push"), or when init() is called. If MPI
is already initialised (e.g. `from mpi4py import MPI` ran first; mpi4py's
default thread level is "multiple") Viper uses it as is, after checking the
thread level, and leaves finalisation to mpi4py. Importing mpi4py after Viper
initialised MPI also works: mpi4py then neither initialises nor finalises it.
Viper finalises MPI at interpreter exit only when it initialised it, after
closing its live Publishers and Subscribers.

Without `mpirun` the MPI tiers raise viper.UnavailableError saying how to
start the job; tier "pfs" with notify "poll" never touches MPI.
"""
from . import _viper


def init():
    """Initialises MPI unless it is; returns (rank, size)."""
    rank, size, _ = _viper.mpi_init()
    return rank, size


def rank():
    return init()[0]


def size():
    return init()[1]


def barrier():
    _viper.mpi_barrier()


def active():
    """True when MPI is initialised (by Viper or anyone else) and not finalised."""
    return _viper.mpi_active()


def launched():
    """True when this process was started by mpirun."""
    return _viper.mpi_launched()
