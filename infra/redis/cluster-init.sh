#!/bin/sh
# Creates a DC's Redis Cluster once: `cluster-init.sh host:port host:port ...`, each master with
# LC_REDIS_CLUSTER_REPLICAS replicas (default 1: six nodes are three masters and three replicas).
# Safe to run at every start of the deployment:
#   1. waits until every node answers;
#   2. creates the cluster only if no node knows another yet (fresh nodes); nodes already in a
#      cluster are never touched, so an existing cluster and its data stay as they are;
#   3. waits until every node sees the cluster ok with every slot served and every replica is in
#      sync with its master (so the first writes' WAIT is confirmed).
# Fails, naming the node to look at, when that takes more than LC_REDIS_CLUSTER_WAIT_S (default 300).
set -eu
replicas=${LC_REDIS_CLUSTER_REPLICAS:-1}
[ $# -ge $((3 * (replicas + 1))) ] || {
  echo "usage: cluster-init.sh host:port ... (three masters and their replicas at least)" >&2
  exit 2
}
deadline=$(($(date +%s) + ${LC_REDIS_CLUSTER_WAIT_S:-300}))

# A node's CLUSTER INFO field, or with a section its INFO <section> field; empty if it does not answer.
field() {
  at=$1 name=$2
  shift 2
  if [ $# -eq 0 ]; then set -- cluster info; else set -- info "$1"; fi
  redis-cli -h "${at%:*}" -p "${at##*:}" "$@" 2>/dev/null | tr -d '\r' | sed -n "s/^$name://p"
}

answers() {
  [ "$(redis-cli -h "${1%:*}" -p "${1##*:}" ping 2>/dev/null)" = PONG ]
}

ready() {
  [ "$(field "$1" cluster_state)" = ok ] &&
    [ "$(field "$1" cluster_slots_ok)" = 16384 ] &&
    { [ "$(field "$1" role replication)" = master ] ||
      [ "$(field "$1" master_link_status replication)" = up ]; }
}

# await <check> <what it waits for>: every node, until the deadline.
await() {
  for node in $nodes; do
    until $1 "$node"; do
      if [ "$(date +%s)" -ge $deadline ]; then
        echo "$node: no $2 within ${LC_REDIS_CLUSTER_WAIT_S:-300} s;" \
          "look with: redis-cli --cluster check $node" >&2
        exit 1
      fi
      sleep 1
    done
  done
}

nodes=$*
await answers answer

fresh=yes
for node in $nodes; do
  [ "$(field "$node" cluster_known_nodes)" = 1 ] || fresh=no
done
if [ $fresh = yes ]; then
  redis-cli --cluster create "$@" --cluster-replicas "$replicas" --cluster-yes
else
  echo "some of the nodes are in a cluster already: not creating one"
fi

await ready "cluster ok with every slot served and replicas in sync"
echo "cluster ok: $nodes"
