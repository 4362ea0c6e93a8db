package rehearsal

import (
	"crypto/tls"
	"crypto/x509/pkix"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// A client keeps the server its connection was given; each new connection takes the next healthy
// server; the client's own certificate reaches the server, since TLS passes through.
func TestTCPBalancerKeepsEachConnectionOnTheHealthyServerItWasGivenInTurn(t *testing.T) {
	pki, ca, serving := kubeadmPKI(t)
	backends := backendsWithOneDown(t, 2, serving, func(i int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			cn := ""
			if len(r.TLS.PeerCertificates) > 0 {
				cn = r.TLS.PeerCertificates[0].Subject.CommonName
			}
			w.Header().Set("Backend", strconv.Itoa(i))
			w.Header().Set("Client-Certificate", cn)
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := serveTCP(ln, (&net.Dialer{}).DialContext, backends, func(path string) string { return filepath.Join(pki, path) }, t)
	t.Cleanup(func() { b.Close() })
	awaitHealthy(t, b.pool)

	alice := mustClient(t, ca, pkix.Name{CommonName: "alice"})
	var connections [][]string
	for range 3 {
		// One client, one connection: HTTP/1.1 keep-alive here, HTTP/2 for client-go.
		client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1,
			TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{alice}}}}
		var got []string
		for range 3 {
			resp, err := client.Get("https://" + ln.Addr().String() + "/api/v1/services?fieldSelector=spec.clusterIP%21%3DNone")
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if cn := resp.Header.Get("Client-Certificate"); cn != "alice" {
				t.Errorf("the server saw client certificate %q, want the client's own (alice)", cn)
			}
			got = append(got, resp.Header.Get("Backend"))
		}
		client.CloseIdleConnections()
		connections = append(connections, got)
	}
	want := [][]string{{"0", "0", "0"}, {"1", "1", "1"}, {"0", "0", "0"}}
	if !slices.EqualFunc(connections, want, slices.Equal) {
		t.Errorf("servers per connection %v, want %v: each connection on one server, the healthy ones in turn", connections, want)
	}
}
