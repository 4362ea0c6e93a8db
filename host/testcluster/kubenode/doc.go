// Package kubenode runs real Kubernetes nodes on one machine for tests: containerd, runc and a real
// kubelet per node, control planes made by kubeadm init and join, static Pods started from images
// built locally, several Kubernetes versions side by side, and binaries swapped on a node for an
// upgrade.
//
// A Cluster owns a Network, a bridge in a network namespace of its own with no uplink, and its
// Nodes. Each node lives in its own mount, network and UTS namespaces, held open by a pause
// process: bind mounts give it its own /etc/kubernetes, /var/lib/kubelet, /var/lib/etcd,
// /var/log, /var/cache, /usr/libexec/kubernetes, /etc/hosts and /etc/resolv.conf, a tmpfs gives it its own
// /run (containerd's state and socket, runc's state), and one veth gives it an address on the
// bridge and no route anywhere else. Every process of a node (containerd, the kubelet, kubeadm,
// kubectl, crictl) enters those namespaces with nsenter; the containers' processes share the
// node's network namespace. Nodes share the machine's cgroups, so each kubelet gets a cgroupRoot of
// its own.
//
// No systemd runs here: a supervisor per node waits for the files kubeadm writes for the kubelet
// and runs the kubelet with kubeadm's flags, restarting it when it exits, as systemd would.
//
// Images are built locally (one layer per static binary) and imported into each node's containerd
// under ImageRepository, a name under the reserved .invalid domain: kubeadm and containerd find
// every image present, and any pull attempt fails on the machine itself.
//
// Close tears everything down in order (kubelet, pods, containerd, stragglers, namespaces,
// cgroups) and leaves no process, mount, cgroup or namespace behind. Everything here needs root.
package kubenode
