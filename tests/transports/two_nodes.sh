#!/usr/bin/env bash
# Runs an MPI job as two "nodes" on this one machine: mpirun reads a
# two-entry hostfile (viper-node-a, viper-node-b) and starts each node's
# daemon through an rsh agent that puts it in its own UTS namespace with that
# hostname (unshare --uts). Open MPI then maps the ranks to two nodes: the
# shared-memory BTL is not used between them (TCP carries their messages)
# and MPI_Get_processor_name differs, so Viper takes its cross-node paths
# (shm's two-sided stream, the node fan-out's relays) for real.
# usage: two_nodes.sh MPIEXEC RANKS_ON_A RANKS_ON_B COMMAND [ARGS...]
# Exit 77 (CTest: skipped) where this machine does not allow a private UTS
# namespace (unprivileged containers).
set -u
mpiexec=$1 on_a=$2 on_b=$3
shift 3
if ! out=$(unshare --uts true 2>&1); then
  echo "skipped: unshare --uts is not permitted here ($out); two nodes need their own hostnames"
  exit 77
fi
dir=$(mktemp -d "${TMPDIR:-/tmp}/viper-two-nodes.XXXXXX")
trap 'rm -rf "$dir"' EXIT
printf 'viper-node-a slots=%d\nviper-node-b slots=%d\n' "$on_a" "$on_b" >"$dir/hosts"
# Open MPI calls the agent as `AGENT NODE COMMAND-LINE...` (what it would
# hand ssh); the command line is run by sh, as a remote shell would.
cat >"$dir/agent" <<'AGENT'
#!/bin/sh
node=$1
shift
exec unshare --uts /bin/sh -c 'hostname "$0" && exec /bin/sh -c "$1"' "$node" "$*"
AGENT
chmod +x "$dir/agent"
# The ranks get the VIPER_TEST_* variables of this environment.
forward=()
for v in $(compgen -e | grep '^VIPER_TEST_'); do forward+=(-x "$v"); done
"$mpiexec" --hostfile "$dir/hosts" --mca plm_rsh_agent "$dir/agent" --mca btl tcp,self \
  --oversubscribe "${forward[@]}" -np $((on_a + on_b)) "$@"
