// Package testcluster runs real Kubernetes control planes for tests and benchmarks: one etcd and
// any number of kube-apiservers of possibly different versions, all on loopback, with a generated
// PKI whose credentials are available both in memory and as files (PKI.Files).
//
// Binaries are built from the Go module proxy on first use and cached under
// ${XDG_CACHE_HOME:-$HOME/.cache}/skewgate/bin, keyed by component and version, the commands of one
// module version by one go build (see EnsureBinaries). Real kubeadm nodes, with containerd and real
// kubelets, are package kubenode's.
// Every kube-apiserver runs in its own UTS namespace so that its host name, and therefore its
// server ID, is chosen by the caller rather than inherited from the machine. StartProcess and
// FreePorts give processes run next to the cluster (proxies in front of it) the same lifecycle
// as the servers. Cluster.StartKubelet registers a stand-in kubelet, reached by the servers over
// verified TLS, for exec, attach, port-forward and logs.
//
// Only this module's tests, benchmarks and test commands import it, yet it is not internal: the
// benchmark harness (bench/cmd/skewbench) starts its clusters too, and Go lets a package under
// host/internal/ be imported only from host/; the module root, the only common ancestor, keeps no
// internal/ directory. No shipped binary links it.
package testcluster
