#!/bin/sh
# Starts one Redis Cluster node: `cluster-node.sh <command starting redis-server with
# redis-cluster.conf>`; in the deployments the image's `docker-entrypoint.sh redis-server ...`,
# which hands the data dir (nodes.conf included) to the redis user and runs redis-server as it.
#
# LC_REDIS_HOSTNAME (required): the node's stable DNS name (its Compose service, or its StatefulSet
# pod under the headless Service). The node announces it, and redis-cluster.conf has clients
# redirected to names, so they never chase an address a recreated container or pod no longer has.
#
# The nodes themselves still talk over the cluster bus by IP (Redis 7.0 has no names there), and
# nodes.conf keeps the IPs of the last run. A node restarted alone is found again: it dials the
# others at their unchanged addresses and they learn its new one. But when every node comes back
# with a new IP (a full restart, `docker compose down` then `up`) nobody reaches anybody and the
# cluster stays down. So before Redis starts, every peer address in nodes.conf is replaced by what
# the peer's name resolves to now; a peer not resolvable yet is learnt by gossip from nodes started
# after it.
#
# LC_REDIS_NODES_CONF: where nodes.conf is (default /data/nodes.conf, the `dir` the deployments use).
set -eu
: "${LC_REDIS_HOSTNAME:?set it to the stable DNS name of this node}"
conf=${LC_REDIS_NODES_CONF:-/data/nodes.conf}

if [ -s "$conf" ]; then
  # A line: <id> <ip>:<port>@<bus port>,<hostname>[,<aux>...] <flags> ... (the last line is `vars`).
  while read -r id addr rest; do
    case $addr in
      *,*)
        host=${addr#*,}
        host=${host%%,*}
        ip=
        if [ -n "$host" ]; then ip=$(getent hosts "$host" | awk '{ print $1; exit }'); fi
        # After the last ':' of the address (IPv6 has more): the ports, the name and the rest.
        if [ -n "$ip" ]; then addr="$ip:${addr##*:}"; fi
        ;;
    esac
    printf '%s %s %s\n' "$id" "$addr" "$rest"
  done <"$conf" >"$conf.tmp"
  mv "$conf.tmp" "$conf"
fi

exec "$@" --cluster-announce-hostname "$LC_REDIS_HOSTNAME"
