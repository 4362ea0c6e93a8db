package serve

import (
	"math"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/host/internal/cmdline"
)

// In node-local mode the node's own server (here kube-a, v1.35) answers
// everything it serves, a capable peer what it does not, and healthy peers
// everything while it is down.
func TestNodeLocalModeSendsEverythingTheLocalServerServesToIt(t *testing.T) {
	f := newFixture(t)
	f.cfg.LocalAPIServer = f.cfg.APIServers[0]
	f.cfg.BindAddress = ""
	s := f.startServer(t)
	if host := s.GatewayAddr().String(); !strings.HasPrefix(host, cmdline.DefaultNodeLocalBindAddress+":") {
		t.Errorf("node-local gateway listens on %s; want loopback by default", host)
	}
	client := f.gatewayClient()
	gateway := "https://" + s.GatewayAddr().String()

	servedBy := func(path string) string {
		code, header, body := get(t, client, gateway+path)
		if code != http.StatusOK {
			t.Fatalf("%s: HTTP %d: %s", path, code, body)
		}
		return header.Get("X-Served-By")
	}
	local, extra := f.servers[0].spec.ID, f.servers[2].spec.ID
	for range 6 {
		if got := servedBy("/api/v1/namespaces/x/configmaps"); got != local {
			t.Fatalf("configmaps served by %s; want the local server %s", got, local)
		}
		if got := servedBy("/apis/coordination.k8s.io/v1alpha2/namespaces/x/leasecandidates"); got != extra {
			t.Fatalf("leasecandidates served by %s; want %s, the only server serving them", got, extra)
		}
	}

	f.servers[0].ready.Store(false)
	eventually(t, "the local server marked unhealthy", func() bool {
		applied := s.applied.Load()
		if applied == nil {
			return false
		}
		for _, srv := range applied.snap.Servers {
			if srv.ID == applied.snap.Preferred {
				return !srv.Healthy
			}
		}
		return false
	})
	peers := map[string]bool{}
	for range 6 {
		peers[servedBy("/api/v1/namespaces/x/configmaps")] = true
	}
	if peers[local] || len(peers) != 2 {
		t.Errorf("with the local server down, configmaps served by %v; want both peers", peers)
	}
}

// --go-memory-limit-bytes limits the Go runtime's memory once the gateway is
// ready (its plugin compiled), and leaves a GOMEMLIMIT from the environment
// alone.
func TestGoMemoryLimitIsSetOnceReadyUnlessGOMEMLIMITIsSet(t *testing.T) {
	original := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(original) })
	for _, env := range []string{"", "off"} {
		t.Run("GOMEMLIMIT="+env, func(t *testing.T) {
			debug.SetMemoryLimit(math.MaxInt64)
			// t.Setenv restores the test process's own GOMEMLIMIT afterwards.
			t.Setenv("GOMEMLIMIT", env)
			if env == "" {
				os.Unsetenv("GOMEMLIMIT")
			}
			f := newFixture(t)
			f.cfg.LocalAPIServer = f.cfg.APIServers[0]
			f.cfg.BindAddress = ""
			const limit = 32 << 20
			f.cfg.GoMemoryLimitBytes = limit
			s, cancel, served := f.serve(t)
			eventually(t, "ready", s.Ready)
			want := int64(limit)
			if env != "" {
				want = math.MaxInt64
			}
			if got := debug.SetMemoryLimit(-1); got != want {
				t.Errorf("memory limit once ready: %d; want %d", got, want)
			}
			cancel()
			f.release()
			if err := <-served; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
	}
}

// Node-local mode collects at half the live heap once the gateway is ready
// (its plugin compiled), and leaves a GOGC from the environment alone; other
// modes keep Go's default.
func TestNodeLocalCollectorTargetIsSetOnceReadyUnlessGOGCIsSet(t *testing.T) {
	for _, tc := range []struct {
		name      string
		nodeLocal bool
		gogc      string
		want      int
	}{
		{"node-local", true, "", nodeLocalGCPercent},
		{"node-local GOGC=100", true, "100", 100},
		{"not node-local", false, "", 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			debug.SetGCPercent(100)
			// t.Setenv restores the test process's own GOGC afterwards.
			t.Setenv("GOGC", tc.gogc)
			if tc.gogc == "" {
				os.Unsetenv("GOGC")
			}
			if tc.nodeLocal {
				f.cfg.LocalAPIServer = f.cfg.APIServers[0]
				f.cfg.BindAddress = ""
			}
			s, cancel, served := f.serve(t)
			eventually(t, "ready", s.Ready)
			got := debug.SetGCPercent(100)
			if got != tc.want {
				t.Errorf("GC percent once ready: %d; want %d", got, tc.want)
			}
			cancel()
			f.release()
			if err := <-served; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
	}
}
