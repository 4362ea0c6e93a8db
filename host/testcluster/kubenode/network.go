package kubenode

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/skewgate/skewgate/host/testcluster"
)

// NetworkPrefix is the nodes' network. It exists only inside the network namespaces of the
// bridge and the nodes, so it cannot clash with the machine's own networks.
var NetworkPrefix = netip.MustParsePrefix("10.240.0.0/24")

const bridgeName = "br0"

// Network is a bridge in a network namespace of its own, with no uplink: nodes reach each other
// through it and nothing else. The bridge's own address (the first of NetworkPrefix) is where the
// test stands: DialContext connects from there.
type Network struct {
	holder *holder
	// namespace is the bridge's network namespace, open for DialContext to enter.
	namespace *os.File
	bridgeIP  netip.Addr

	mu      sync.Mutex
	names   map[string]netip.Addr
	lastIP  netip.Addr
	lastIdx int
}

func startNetwork(ctx context.Context, dir, pause string) (_ *Network, err error) {
	h, err := startHolder(ctx, "network", filepath.Join(dir, "network.log"), pause, networkNamespace)
	if err != nil {
		return nil, err
	}
	n := &Network{holder: h, names: map[string]netip.Addr{}, bridgeIP: NetworkPrefix.Addr().Next()}
	n.lastIP = n.bridgeIP
	defer func() {
		if err != nil {
			n.close()
		}
	}()
	if n.namespace, err = os.Open(fmt.Sprintf("/proc/%d/ns/net", h.proc.PID())); err != nil {
		return nil, err
	}
	bridgeAddr := netip.PrefixFrom(n.bridgeIP, NetworkPrefix.Bits()).String()
	for _, argv := range [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "link", "add", bridgeName, "type", "bridge"},
		{"ip", "addr", "add", bridgeAddr, "dev", bridgeName},
		{"ip", "link", "set", bridgeName, "up"},
	} {
		if _, err := runCommand(ctx, h.enter(hostEnv, argv...)); err != nil {
			return nil, fmt.Errorf("setting up the bridge: %w", err)
		}
	}
	return n, nil
}

// hostEnv is the environment of the machine's tools (ip, mount) run inside a namespace.
var hostEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}

// attach gives the holder's network namespace an interface eth0 on the bridge, with the next
// free address, and returns that address. The namespace gets no route beyond the bridge.
func (n *Network) attach(ctx context.Context, name string, node *holder) (netip.Addr, error) {
	n.mu.Lock()
	ip := n.lastIP.Next()
	if !NetworkPrefix.Contains(ip) || ip == lastAddress(NetworkPrefix) {
		n.mu.Unlock()
		return netip.Addr{}, fmt.Errorf("network %s is full", NetworkPrefix)
	}
	n.lastIP = ip
	n.lastIdx++
	veth := "veth" + strconv.Itoa(n.lastIdx)
	n.mu.Unlock()

	addr := netip.PrefixFrom(ip, NetworkPrefix.Bits()).String()
	steps := []struct {
		in   *holder
		argv []string
	}{
		{n.holder, []string{"ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", strconv.Itoa(node.proc.PID())}},
		{n.holder, []string{"ip", "link", "set", veth, "master", bridgeName, "up"}},
		{node, []string{"ip", "link", "set", "lo", "up"}},
		{node, []string{"ip", "addr", "add", addr, "dev", "eth0"}},
		{node, []string{"ip", "link", "set", "eth0", "up"}},
	}
	for _, s := range steps {
		if _, err := runCommand(ctx, s.in.enter(hostEnv, s.argv...)); err != nil {
			return netip.Addr{}, fmt.Errorf("attaching %s to the bridge: %w", name, err)
		}
	}
	n.setName(name, ip)
	return ip, nil
}

func lastAddress(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3]) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// setName makes name resolve to ip in DialContext.
func (n *Network) setName(name string, ip netip.Addr) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.names[name] = ip
}

// Namespaces is the bridge's network namespace.
func (n *Network) Namespaces() []Namespace { return n.holder.namespaces }

// DialContext connects from the bridge's namespace, the one place that reaches every node, as a
// net.Dialer would. Host names are those of the nodes and the control-plane endpoint; nothing is
// looked up anywhere else. It suits http.Transport.DialContext and rest.Config.Dial.
func (n *Network) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		n.mu.Lock()
		named, ok := n.names[host]
		n.mu.Unlock()
		if !ok {
			return nil, fmt.Errorf("dial %s: %q is no host of the nodes' network", address, host)
		}
		ip = named
	}
	target := net.JoinHostPort(ip.String(), port)
	var conn net.Conn
	err = n.inNamespace(func() error {
		var d net.Dialer
		var err error
		conn, err = d.DialContext(ctx, network, target)
		return err
	})
	return conn, err
}

// BridgeAddress is the bridge's own address on the nodes' network: where Listen listens and
// DialContext connects from.
func (n *Network) BridgeAddress() netip.Addr { return n.bridgeIP }

// Listen listens on TCP port at the bridge's own address, inside the bridge's namespace, where
// every node reaches it: the place of a load balancer in front of the nodes. The listener stays
// in that namespace whichever thread accepts on it.
func (n *Network) Listen(port int) (net.Listener, error) {
	var ln net.Listener
	err := n.inNamespace(func() error {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(n.bridgeIP.String(), strconv.Itoa(port)))
		return err
	})
	return ln, err
}

// Start starts a long-running process in the bridge's network namespace, where a load balancer in
// front of the nodes runs, with exactly the environment env, logging to logPath. It sees the
// machine's file system. Stop it before the cluster closes: the namespace ends with the cluster.
func (n *Network) Start(name, logPath string, env []string, argv ...string) (*testcluster.Process, error) {
	return testcluster.StartProcess(name, logPath, n.holder.enter(env, argv...))
}

// inNamespace runs create, which makes sockets, in the bridge's network namespace. A socket
// belongs to the network namespace of the thread that creates it, so create runs on a goroutine
// that keeps its thread while in the bridge's namespace. A thread that cannot return to the
// machine's namespace stays locked and ends with the goroutine.
func (n *Network) inNamespace(create func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		ours, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer ours.Close()
		if err := unix.Setns(int(n.namespace.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("entering the bridge's network namespace: %w", err)
			return
		}
		err = create()
		if unix.Setns(int(ours.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}

func (n *Network) close() {
	if n.namespace != nil {
		n.namespace.Close()
	}
	n.holder.stop()
}
