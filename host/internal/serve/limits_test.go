package serve

import (
	"bytes"
	"crypto/tls"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/skewgate/skewgate/host/internal/logtest"
)

func TestMetricsListenerOffLoopbackWarnsThatItIsUnauthenticated(t *testing.T) {
	for _, tc := range []struct {
		address string
		warn    bool
	}{
		{"127.0.0.1:0", false},
		{"[::1]:0", false},
		{"localhost:0", false},
		{"0.0.0.0:0", true},
		{":0", true},
		{"10.0.0.1:9090", true},
		{"metrics.example:9090", true},
	} {
		t.Run(tc.address, func(t *testing.T) {
			f := newFixture(t)
			var logs bytes.Buffer
			f.cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			f.cfg.MetricsBindAddress = tc.address
			if _, err := New(f.cfg); err != nil {
				t.Fatal(err)
			}
			out := logs.String()
			warned := strings.Contains(out, "--metrics-bind-address is not a loopback address") &&
				strings.Contains(out, "/debug/snapshot") && strings.Contains(out, "without authentication")
			if warned != tc.warn {
				t.Errorf("warned = %v, want %v:\n%s", warned, tc.warn, out)
			}
		})
	}
}

func TestGatewayAnswers431ToHeadersBeyondSixtyKiB(t *testing.T) {
	f := newFixture(t)
	s := f.startServer(t)
	// HTTP/1.1: an HTTP/2 client refuses to send more than the server's
	// advertised limit itself.
	transport := f.gatewayTransport()
	transport.TLSClientConfig.NextProtos = []string{"http/1.1"}
	transport.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	client := &http.Client{Timeout: 10 * time.Second, Transport: transport}
	for _, tc := range []struct {
		name string
		size int
		want int
	}{
		{"50 KiB", 50 << 10, http.StatusOK},
		{"70 KiB", 70 << 10, http.StatusRequestHeaderFieldsTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, "https://"+s.GatewayAddr().String()+"/api/v1/namespaces/x/configmaps", nil)
			req.Header.Set("X-Padding", strings.Repeat("a", tc.size))
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.want)
			}
		})
	}
}

func TestRequestTimeoutAnswersASlowRequest504(t *testing.T) {
	f := newFixture(t)
	f.cfg.RequestTimeout = 300 * time.Millisecond
	s := f.startServer(t)
	client := f.gatewayClient()
	client.Timeout = 30 * time.Second
	if code, _, body := get(t, client, "https://"+s.GatewayAddr().String()+"/slow"); code != http.StatusGatewayTimeout {
		t.Errorf("a request its server does not answer: %d %s, want 504 after --request-timeout", code, body)
	}
}

func TestFrontProxyModeWarnsWhenTheProxyCertificateAloneIsAUser(t *testing.T) {
	const warning = "the front-proxy client certificate authenticates as a user on its own"
	for _, mode := range []string{frontProxyMode, passthroughMode} {
		t.Run(mode, func(t *testing.T) {
			f := newFixture(t)
			f.cfg.IdentityMode = mode
			f.cfg.ClientCAFile = f.cfg.PeerCAFile
			logs := &logtest.Buffer{}
			f.cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
			s := f.startServer(t)
			// Several polls after the first snapshot.
			probes := f.servers[0].requestsFrom("front-proxy-client")
			eventually(t, "more polls", func() bool { return f.servers[0].requestsFrom("front-proxy-client") > probes+8 })
			warned := strings.Contains(logs.String(), warning)
			if warned != (mode == frontProxyMode) {
				t.Errorf("warned = %v in %s mode:\n%s", warned, mode, logs)
			}
			_, _, metrics := get(t, &http.Client{Timeout: 10 * time.Second}, "http://"+s.MetricsAddr().String()+"/metrics")
			want := "skewgate_controller_front_proxy_certificate_authenticates 0"
			if mode == frontProxyMode {
				want = "skewgate_controller_front_proxy_certificate_authenticates 1"
			}
			if !strings.Contains(metrics, want) {
				t.Errorf("metrics lack %q", want)
			}
		})
	}
}

func TestGatewayBoundsWhatOneHTTP2ConnectionMakesItHold(t *testing.T) {
	f := newFixture(t)
	s, err := New(f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	h2 := s.gatewayServer.HTTP2
	if h2 == nil || h2.MaxConcurrentStreams != 100 || h2.MaxReceiveBufferPerConnection != 1<<20 || h2.MaxReceiveBufferPerStream > h2.MaxReceiveBufferPerConnection {
		t.Errorf("HTTP/2 settings %+v; want 100 streams sharing a 1 MiB receive window", h2)
	}
}

func TestInFlightLimitAnswers429ThroughTheServer(t *testing.T) {
	f := newFixture(t)
	f.cfg.MaxRequestsInFlight = 1
	s := f.startServer(t)
	client := f.gatewayClient()
	slow := f.slowRequest(t, client, "https://"+s.GatewayAddr().String())
	code, header, body := get(t, client, "https://"+s.GatewayAddr().String()+"/api/v1/namespaces/x/configmaps")
	if code != http.StatusTooManyRequests || header.Get("Retry-After") == "" || !strings.Contains(body, `"reason":"TooManyRequests"`) {
		t.Errorf("a request beyond --max-requests-inflight: %d, Retry-After %q, %s; want 429 with Retry-After and a Status", code, header.Get("Retry-After"), body)
	}
	f.release()
	if code := <-slow; code != http.StatusOK {
		t.Errorf("the admitted request: %d", code)
	}
}
