#!/bin/sh
# Points kube-controller-manager and kube-scheduler at the node-local skewgate
# by editing kubeadm's kubeconfigs in place: the server becomes
# https://127.0.0.1:16443, verified as "kubernetes" (a name kubeadm's
# apiserver.crt carries) against the same cluster CA. Credentials are kept.
#
#   KUBERNETES_DIR  where kubeadm keeps its kubeconfigs (default /etc/kubernetes)
#   SKEWGATE_PORT   skewgate's --secure-port (default 16443)
#
# The components read their kubeconfig only when they start; restart them
# afterwards (see README.md, which also says how to undo this).
set -eu
dir=${KUBERNETES_DIR:-/etc/kubernetes}
port=${SKEWGATE_PORT:-16443}
for conf in controller-manager.conf scheduler.conf; do
	kubectl config set-cluster kubernetes --kubeconfig="$dir/$conf" \
		--server="https://127.0.0.1:$port" --tls-server-name=kubernetes
done
