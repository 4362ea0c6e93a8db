package controller

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
)

// aggregatedContentType is what API servers label aggregated discovery with.
const aggregatedContentType = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

// fakeDocument is how a fake API server answers /apis or /api.
type fakeDocument struct {
	status      int
	contentType string
	body        []byte
	etag        string // empty: the server sends no ETag and ignores If-None-Match
	// declareLength sends Content-Length up front instead of chunking a large body.
	declareLength bool
}

// aggregatedDocument is a well-formed answer with an ETag, its body ending in
// a newline like a real API server's.
func aggregatedDocument(groups map[string][]string, core bool) fakeDocument {
	body := append(discoverytest.GroupListJSON(groups, core), '\n')
	return fakeDocument{status: http.StatusOK, contentType: aggregatedContentType, body: body, etag: etagOf(body)}
}

// openAPIIndexDocument is a /openapi/v3 index listing what a server of
// version serving groups lists, each document's hash derived from the path and
// the version.
func openAPIIndexDocument(version string, groups map[string][]string) fakeDocument {
	hashes := map[string]string{}
	for _, path := range discoverytest.OpenAPIPaths(groups) {
		hashes[path] = strings.Trim(etagOf([]byte(path+"@"+version)), `"`)
	}
	body := discoverytest.OpenAPIIndexJSON(hashes)
	return fakeDocument{status: http.StatusOK, contentType: "application/json", body: body, etag: etagOf(body)}
}

func etagOf(body []byte) string {
	sum := sha256.Sum256(body)
	return `"` + strings.ToUpper(hex.EncodeToString(sum[:])) + `"`
}

// fakeAPIServer is an HTTPS server answering /readyz, /version, /apis, /api
// and /openapi/v3 the way kube-apiserver does, authenticating the controller either as a front
// proxy (client certificate from the front-proxy CA plus X-Remote-* headers) or
// by bearer token.
type fakeAPIServer struct {
	srv         *httptest.Server
	address     string
	bearerToken string
	// rotated, once set, is the serving certificate of new connections.
	rotated atomic.Pointer[tls.Certificate]

	mu      sync.Mutex
	ready   bool
	version string
	docs    map[string]fakeDocument
	// schemas are the OpenAPI v3 group-version documents by index path
	// ("apis/apps/v1"); a path without one gets a document with no kinds.
	schemas      map[string][]byte
	requests     map[string]int
	notModified  map[string]int
	failedReadyz int
	// stallReadyz is how many coming /readyz requests get no answer until
	// the client gives up; stalledReadyz counts those that did.
	stallReadyz   int
	stalledReadyz int
	lastReadyOK   time.Time
	authFailures  int
	lastHeaders   map[string]http.Header
	// certificateUser answers a SelfSubjectReview that presents only a client
	// certificate: "" refuses it with 401, system:anonymous forbids it as
	// an anonymous request does, anything else is the user it authenticates as.
	certificateUser string
	// clientCNs counts requests by the common name of the client
	// certificate of their connection.
	clientCNs map[string]int
	// listenIP is the address to listen on; "" for 127.0.0.1.
	listenIP string
}

// fakeServerOption adjusts a fake API server before it starts.
type fakeServerOption func(f *fakeAPIServer, tlsConfig *tls.Config)

// withServingCert replaces the serving certificate signed by the peer CA.
func withServingCert(cert tls.Certificate) fakeServerOption {
	return func(_ *fakeAPIServer, c *tls.Config) { c.Certificates = []tls.Certificate{cert} }
}

// onLoopback listens on another loopback address than 127.0.0.1, so that a
// test can tell servers apart by IP address, as the nodes' addresses do.
func onLoopback(ip string) fakeServerOption {
	return func(f *fakeAPIServer, _ *tls.Config) { f.listenIP = ip }
}

// withBearerToken authenticates requests by token instead of as a front proxy.
func withBearerToken(token string) fakeServerOption {
	return func(f *fakeAPIServer, c *tls.Config) {
		f.bearerToken = token
		c.ClientAuth = tls.NoClientCert
	}
}

func newFakeAPIServer(t *testing.T, pki *testPKI, version string, groups map[string][]string, opts ...fakeServerOption) *fakeAPIServer {
	t.Helper()
	f := &fakeAPIServer{
		ready:   true,
		version: version,
		docs: map[string]fakeDocument{
			pathAPIs:    aggregatedDocument(groups, false),
			pathCore:    aggregatedDocument(groups, true),
			pathOpenAPI: openAPIIndexDocument(version, groups),
		},
		schemas:     map[string][]byte{},
		requests:    map[string]int{},
		notModified: map[string]int{},
		lastHeaders: map[string]http.Header{},
		clientCNs:   map[string]int{},
	}
	clientCAs := x509.NewCertPool()
	clientCAs.AddCert(pki.frontProxy.Cert)
	tlsConfig := &tls.Config{
		Certificates: []tls.Certificate{pki.servingCert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    clientCAs,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return f.rotated.Load(), nil
		},
	}
	for _, o := range opts {
		o(f, tlsConfig)
	}
	f.srv = httptest.NewUnstartedServer(f)
	if f.listenIP != "" {
		l, err := net.Listen("tcp", net.JoinHostPort(f.listenIP, "0"))
		if err != nil {
			t.Fatal(err)
		}
		f.srv.Listener.Close()
		f.srv.Listener = l
	}
	f.srv.TLS = tlsConfig
	// Refused handshakes are what some tests expect; keep them out of the output.
	f.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	f.srv.StartTLS()
	f.address = f.srv.Listener.Addr().String()
	t.Cleanup(f.srv.Close)
	return f
}

// newSkewedPair is a PKI and fake API servers for the first two members of
// the skewed control plane, both with certificates from that PKI.
func newSkewedPair(t *testing.T) (pki *testPKI, a, b *fakeAPIServer) {
	t.Helper()
	pki = newTestPKI(t)
	plane := discoverytest.SkewedControlPlane()
	a = newFakeAPIServer(t, pki, plane[0].Version, plane[0].Groups)
	b = newFakeAPIServer(t, pki, plane[1].Version, plane[1].Groups)
	return pki, a, b
}

func (f *fakeAPIServer) url() string { return "https://" + f.address }

func (f *fakeAPIServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == pathReadyz && f.takeStall() {
		<-r.Context().Done()
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests[r.URL.Path]++
	f.lastHeaders[r.URL.Path] = r.Header.Clone()
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		f.clientCNs[r.TLS.PeerCertificates[0].Subject.CommonName]++
	}
	if r.URL.Path == pathSelfSubjectReviews && r.Method == http.MethodPost && r.Header.Get("X-Remote-User") == "" {
		f.reviewCertificate(w, r)
		return
	}
	if !f.authenticated(r) {
		f.authFailures++
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	switch r.URL.Path {
	case pathReadyz:
		if !f.ready {
			f.failedReadyz++
			http.Error(w, "[-]etcd failed: reason withheld\nreadyz check failed", http.StatusInternalServerError)
			return
		}
		f.lastReadyOK = time.Now()
		w.Write([]byte("ok"))
	case pathVersion:
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{"major": "1", "gitVersion": f.version, "platform": "linux/amd64"})
	case pathAPIs, pathCore, pathOpenAPI:
		doc := f.docs[r.URL.Path]
		if doc.etag != "" && r.Header.Get("If-None-Match") == doc.etag {
			f.notModified[r.URL.Path]++
			w.Header().Set("ETag", doc.etag)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("Content-Type", doc.contentType)
		if doc.etag != "" {
			w.Header().Set("ETag", doc.etag)
		}
		if doc.declareLength {
			w.Header().Set("Content-Length", strconv.Itoa(len(doc.body)))
		}
		w.WriteHeader(doc.status)
		w.Write(doc.body)
	default:
		f.serveSchema(w, r)
	}
}

// serveSchema answers GET /openapi/v3/<path>?hash=<hash> when the index lists
// that path with that hash, as kube-apiserver does.
func (f *fakeAPIServer) serveSchema(w http.ResponseWriter, r *http.Request) {
	path, ok := strings.CutPrefix(r.URL.Path, pathOpenAPI+"/")
	index, err := discovery.ParseOpenAPIIndex(f.docs[pathOpenAPI].body)
	if !ok || err != nil || !slices.Contains(index, discovery.OpenAPIPath{Path: path, Hash: r.URL.Query().Get("hash")}) {
		http.NotFound(w, r)
		return
	}
	body, ok := f.schemas[path]
	if !ok {
		body = []byte(`{"openapi":"3.0.0","components":{"schemas":{}}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(body)
}

// setSchema makes the server publish doc as its OpenAPI v3 document of path,
// with a hash of its own in the index.
func (f *fakeAPIServer) setSchema(path string, doc []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.schemas[path] = doc
	index, err := discovery.ParseOpenAPIIndex(f.docs[pathOpenAPI].body)
	if err != nil {
		panic(err)
	}
	hashes := map[string]string{path: strings.Trim(etagOf(doc), `"`)}
	for _, p := range index {
		if p.Path != path {
			hashes[p.Path] = p.Hash
		}
	}
	body := discoverytest.OpenAPIIndexJSON(hashes)
	f.docs[pathOpenAPI] = fakeDocument{status: http.StatusOK, contentType: "application/json", body: body, etag: etagOf(body)}
}

func (f *fakeAPIServer) authenticated(r *http.Request) bool {
	if f.bearerToken != "" {
		return r.Header.Get("Authorization") == "Bearer "+f.bearerToken && r.Header.Get("X-Remote-User") == ""
	}
	return r.TLS != nil && len(r.TLS.PeerCertificates) > 0 &&
		r.Header.Get("X-Remote-User") == RemoteUser && r.Header.Get("X-Remote-Group") == RemoteGroup
}

func (f *fakeAPIServer) takeStall() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stallReadyz == 0 {
		return false
	}
	f.stallReadyz--
	f.stalledReadyz++
	return true
}

// stall leaves the next n /readyz requests unanswered.
func (f *fakeAPIServer) stall(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stallReadyz = n
}

func (f *fakeAPIServer) stalledCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stalledReadyz
}

// reviewCertificate answers a SelfSubjectReview as kube-apiserver's x509
// authenticator would for a request with a client certificate and nothing
// else.
func (f *fakeAPIServer) reviewCertificate(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.TLS == nil || len(r.TLS.PeerCertificates) == 0 || f.certificateUser == "":
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}`))
	case f.certificateUser == anonymousUser:
		w.WriteHeader(http.StatusForbidden)
		w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"selfsubjectreviews.authentication.k8s.io is forbidden: User \"system:anonymous\" cannot create resource \"selfsubjectreviews\" in API group \"authentication.k8s.io\" at the cluster scope","reason":"Forbidden","code":403}`))
	default:
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(map[string]any{
			"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
			"status": map[string]any{"userInfo": map[string]any{"username": f.certificateUser, "groups": []string{"system:authenticated"}}},
		})
	}
}

func (f *fakeAPIServer) setCertificateUser(user string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.certificateUser = user
}

func (f *fakeAPIServer) requestsFrom(clientCN string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.clientCNs[clientCN]
}

func (f *fakeAPIServer) setReady(ready bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ready = ready
}

func (f *fakeAPIServer) setVersion(version string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.version = version
}

func (f *fakeAPIServer) setDocument(path string, doc fakeDocument) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.docs[path] = doc
}

func (f *fakeAPIServer) document(path string) fakeDocument {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.docs[path]
}

func (f *fakeAPIServer) requestCount(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[path]
}

func (f *fakeAPIServer) totalRequests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.requests {
		n += c
	}
	return n
}

func (f *fakeAPIServer) notModifiedCount(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.notModified[path]
}

func (f *fakeAPIServer) failedReadyzCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failedReadyz
}

func (f *fakeAPIServer) lastReadyAnswer() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastReadyOK
}

func (f *fakeAPIServer) authFailureCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.authFailures
}

func (f *fakeAPIServer) header(path string) http.Header {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastHeaders[path]
}

// recorder is an OnSnapshot callback that keeps every snapshot offered to it
// and can refuse the first few.
type recorder struct {
	mu     sync.Mutex
	offers []offer
	refuse int
	// onOffer runs inside the callback, before it answers.
	onOffer func(snap *discovery.Snapshot)
}

// offer is one call of the callback.
type offer struct {
	snap *discovery.Snapshot
	raw  []byte
	at   time.Time
}

func (r *recorder) OnSnapshot(_ context.Context, p Published) error {
	raw, snap := p.Raw, p.Snapshot
	r.mu.Lock()
	defer r.mu.Unlock()
	r.offers = append(r.offers, offer{snap, raw, time.Now()})
	if r.onOffer != nil {
		r.onOffer(snap)
	}
	if r.refuse > 0 {
		r.refuse--
		return errRefused
	}
	return nil
}

var errRefused = errors.New("consumer refused the snapshot")

func (r *recorder) all() []offer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.offers)
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.offers)
}

// waitOffer waits for an offered snapshot satisfying match.
func (r *recorder) waitOffer(t *testing.T, what string, match func(*discovery.Snapshot) bool) offer {
	t.Helper()
	var found offer
	waitUntil(t, what, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, o := range r.offers {
			if match(o.snap) {
				found = o
				return true
			}
		}
		return false
	})
	return found
}

// waitUntil polls cond until it holds, failing the test after a deadline far
// beyond what any condition here needs.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testOptions are fast-polling options for servers of pki, with the
// front-proxy credentials.
func testOptions(pki *testPKI, rec *recorder, servers ...*fakeAPIServer) Options {
	o := Options{
		PeerCA:                pki.peerCA,
		FrontProxyCertificate: pki.clientCert,
		PollInterval:          20 * time.Millisecond,
		RequestTimeout:        5 * time.Second,
		GracePeriod:           time.Hour,
		OnSnapshot:            rec.OnSnapshot,
		Logger:                discardLogger(),
	}
	for _, s := range servers {
		o.StaticServers = append(o.StaticServers, s.url())
	}
	return o
}

// startController runs a controller for the rest of the test.
func startController(t *testing.T, opts Options) *Controller {
	t.Helper()
	c, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	run(t, c)
	return c
}

// run runs c until the test ends.
func run(t *testing.T, c *Controller) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// metricValue reads one sample, identified by its name and labels exactly as
// exposed, from the controller's Prometheus output; absent samples are 0.
func metricValue(t *testing.T, c *Controller, series string) float64 {
	t.Helper()
	return sampleValue(t, exposition(t, c), series)
}

// sampleValue reads one sample from a Prometheus text exposition.
func sampleValue(t *testing.T, exposition, series string) float64 {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(exposition))
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if ok && name == series {
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				t.Fatalf("sample %q: %v", sc.Text(), err)
			}
			return v
		}
	}
	return 0
}

func fetchErrorSeries(address, path, reason string) string {
	return `skewgate_controller_fetch_errors_total{path="` + path + `",reason="` + reason + `",server="` + address + `"}`
}

// serverByID returns the snapshot's server with id, or nil.
func serverByID(snap *discovery.Snapshot, id string) *discovery.Server {
	for i := range snap.Servers {
		if snap.Servers[i].ID == id {
			return &snap.Servers[i]
		}
	}
	return nil
}

// snapshotIDs lists the snapshot's server IDs in order.
func snapshotIDs(snap *discovery.Snapshot) []string {
	var ids []string
	for _, s := range snap.Servers {
		ids = append(ids, s.ID)
	}
	return ids
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
