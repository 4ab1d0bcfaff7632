# Sourced by build.sh, sanitize.sh and fuzz.sh: when ccache is installed
# (install-deps.sh installs it), sets `launcher` to the CMake arguments that
# compile C and C++ through it, keyed so that a checkout anywhere (a CI
# clone, a worktree) hits what another built: paths relative to the
# checkout's root (CCACHE_BASEDIR) and the build directory left out of the
# key (CCACHE_NOHASHDIR; debug info then names the first checkout's build
# directory). Expects `root` set. CUDA sources are not cached.
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
  export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
  export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-10G}"
fi
