package serve

import (
	"crypto/tls"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skewgate/skewgate/host/internal/hostileclient"
)

// leaseCandidates is served by one server of the fixture only.
const leaseCandidates = "/apis/coordination.k8s.io/v1alpha2/namespaces/default/leasecandidates"

// clientFrom is a client of the gateway whose connections come from the
// loopback address source.
func (f *fixture) clientFrom(t *testing.T, source string) *http.Client {
	transport := f.gatewayTransport()
	transport.ForceAttemptHTTP2 = true
	transport.DialContext = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}}).DialContext
	t.Cleanup(transport.CloseIdleConnections)
	return &http.Client{Timeout: 10 * time.Second, Transport: transport}
}

// paced sends a GET of path every interval for duration and counts the
// answers by status (0: no answer).
func paced(client *http.Client, url string, interval, duration time.Duration) map[int]int {
	statuses := map[int]int{}
	for end := time.Now().Add(duration); time.Now().Before(end); time.Sleep(interval) {
		resp, err := client.Get(url)
		if err != nil {
			statuses[0]++
			continue
		}
		resp.Body.Close()
		statuses[resp.StatusCode]++
	}
	return statuses
}

func allHealthy(s *Server) bool {
	cur := s.applied.Load()
	if cur == nil {
		return false
	}
	for _, srv := range cur.snap.Servers {
		if !srv.Healthy {
			return false
		}
	}
	return true
}

// An anonymous client sending, twice a second, the requests that used to
// mark healthy servers lost (an invalid :authority, a malformed chunked body,
// an HTTP/2 body shorter than announced) takes no server out of routing: a
// client of the resource only one server serves is answered every time.
func TestHostileRequestsLeaveEveryServerHealthyForOtherClients(t *testing.T) {
	f := newFixture(t)
	s := f.startServer(t)
	addr := s.GatewayAddr().String()
	anonymous := &tls.Config{RootCAs: f.ca.Pool()}
	stop := make(chan struct{})
	var attacks sync.WaitGroup
	var mu sync.Mutex
	hostile := map[int]int{}
	attacks.Add(1)
	go func() {
		defer attacks.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
			for _, attack := range []func() (int, error){
				func() (int, error) {
					return hostileclient.HTTP1(addr, anonymous, hostileclient.MalformedChunkedBody(leaseCandidates), 5*time.Second)
				},
				func() (int, error) {
					return hostileclient.H2Stream(addr, anonymous, 5*time.Second, func(c *hostileclient.H2Conn) (uint32, error) { return c.Get("a b", leaseCandidates) })
				},
				func() (int, error) {
					return hostileclient.H2Stream(addr, anonymous, 5*time.Second, func(c *hostileclient.H2Conn) (uint32, error) {
						return c.ShortBody(leaseCandidates, 2_000_000, []byte(`{"kind":1}`))
					})
				},
			} {
				status, _ := attack()
				mu.Lock()
				hostile[status]++
				mu.Unlock()
			}
		}
	}()
	statuses := paced(f.clientFrom(t, "127.0.0.2"), "https://"+addr+leaseCandidates, 50*time.Millisecond, 4*time.Second)
	close(stop)
	attacks.Wait()
	t.Logf("the client's answers by status: %v; the hostile requests': %v", statuses, hostile)
	if len(statuses) != 1 || statuses[http.StatusOK] == 0 {
		t.Errorf("the client's answers by status: %v; want every one 200", statuses)
	}
	// The gateway refuses them (400), or the server answers before it
	// reads the body it was never sent whole (the fixture's 200).
	total := 0
	for _, n := range hostile {
		total += n
	}
	if hostile[http.StatusBadRequest] == 0 || hostile[http.StatusBadRequest]+hostile[http.StatusOK] != total {
		t.Errorf("the hostile requests' answers by status: %v; want 400s, or the server's 200", hostile)
	}
	if !allHealthy(s) {
		t.Errorf("servers marked unhealthy: %+v", s.applied.Load().snap.Servers)
	}
}

// Four connections of 100 streams that never open their flow-control window
// used to hold every read-only place past the request timeout, and other
// clients got 429. Now the attacker holds at most its address's share, its
// streams are reset at the request timeout, and another client is always
// served.
func TestZeroWindowClientsAreCutAtTheDeadlineAndOthersAreServed(t *testing.T) {
	f := newFixture(t)
	f.cfg.RequestTimeout = 2 * time.Second
	s := f.startServer(t)
	addr := s.GatewayAddr().String()
	var attackers []*hostileclient.H2Conn
	var streams []uint32
	for range 4 {
		c, err := hostileclient.DialH2(addr, &tls.Config{RootCAs: f.ca.Pool()}, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		attackers = append(attackers, c)
		for range 100 {
			id, err := c.Get("kubernetes", "/api/v1/namespaces/default/configmaps")
			if err != nil {
				t.Fatal(err)
			}
			streams = append(streams, id)
		}
	}
	started := time.Now()
	eventually(t, "the attacker to hold its places", func() bool {
		return metricValue(t, s, `skewgate_gateway_requests_in_flight{request_kind="readOnly"}`) >= 100
	})
	statuses := paced(f.clientFrom(t, "127.0.0.2"), "https://"+addr+"/api/v1/namespaces/default/configmaps", 50*time.Millisecond, 3*time.Second)
	if len(statuses) != 1 || statuses[http.StatusOK] == 0 {
		t.Errorf("another client's answers by status while the attacker holds its streams: %v; want every one 200", statuses)
	}
	eventuallyMetric(t, s, `skewgate_gateway_requests_in_flight{request_kind="readOnly"} 0`)
	t.Logf("the attacker's places were free %v after it opened its streams (request timeout %v)", time.Since(started).Round(100*time.Millisecond), f.cfg.RequestTimeout)
	reset := 0
	for i, c := range attackers {
		for _, id := range streams[i*100 : (i+1)*100] {
			if c.Reset(id) {
				reset++
			}
		}
	}
	if reset == 0 {
		t.Error("no stream of the attacker was reset")
	}
	t.Logf("%d of the attacker's %d streams were reset", reset, len(streams))
}

// metricValue is the value of the series named as /metrics writes it.
func metricValue(t *testing.T, s *Server, series string) float64 {
	t.Helper()
	_, _, metrics := get(t, &http.Client{Timeout: 10 * time.Second}, "http://"+s.MetricsAddr().String()+"/metrics")
	for line := range strings.SplitSeq(metrics, "\n") {
		if value, ok := strings.CutPrefix(line, series+" "); ok {
			v, _ := strconv.ParseFloat(value, 64)
			return v
		}
	}
	return 0
}
