package check

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/fixtures"
)

// fakeToken is the bearer token fake API servers accept.
const fakeToken = "check-test-token"

// fakeServer is an API server for unit tests: it serves captured discovery
// documents and lists of the objects it was given, paged by limit and
// continue, and records every request. It fails the test when a client has
// two requests in flight.
type fakeServer struct {
	t       *testing.T
	version string
	apis    []byte
	core    []byte
	uid     string
	// reportedVersion, when set, is the gitVersion /version answers instead.
	reportedVersion string
	// openAPI holds OpenAPI v3 documents by index path ("apis/apps/v1").
	openAPI map[string]string

	mu sync.Mutex
	// objects are whole objects by collection path (/api/v1/configmaps).
	objects map[string][]json.RawMessage
	// refusedSelectors are field-selector labels a collection answers 400 to.
	refusedSelectors map[string][]string
	// failing answers a collection with this status; failingLater only its
	// pages after the first.
	failing, failingLater map[string]int
	// expireOnce answers the first continued page of a collection 410.
	expireOnce map[string]bool
	requests   []string

	inFlight, maxInFlight atomic.Int32
	server                *httptest.Server
}

// newFakeServer serves the captured documents of a pinned version and
// profile ("default" or "extra").
func newFakeServer(t *testing.T, version, profile string) *fakeServer {
	t.Helper()
	servers, err := fixtures.Servers(profile, version)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeServer{
		t: t, version: version, apis: servers[0].APIs, core: servers[0].API, uid: "uid-" + version + "-" + profile,
		objects: map[string][]json.RawMessage{}, refusedSelectors: map[string][]string{}, failing: map[string]int{}, failingLater: map[string]int{},
		expireOnce: map[string]bool{},
	}
	f.server = httptest.NewTLSServer(f)
	t.Cleanup(f.server.Close)
	return f
}

// add stores objects of a collection.
func (f *fakeServer) add(collection string, objects ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, o := range objects {
		raw, err := json.Marshal(o)
		if err != nil {
			f.t.Fatal(err)
		}
		f.objects[collection] = append(f.objects[collection], raw)
	}
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if n := f.inFlight.Add(1); n > f.maxInFlight.Load() {
		f.maxInFlight.Store(n)
	}
	defer f.inFlight.Add(-1)
	f.mu.Lock()
	f.requests = append(f.requests, r.URL.RequestURI())
	f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+fakeToken {
		writeFakeStatus(w, http.StatusUnauthorized, "Unauthorized")
		return
	}
	switch r.URL.Path {
	case "/version":
		v := f.version
		if f.reportedVersion != "" {
			v = f.reportedVersion
		}
		fmt.Fprintf(w, `{"gitVersion":%q}`, v)
		return
	case "/apis", "/api":
		body := f.apis
		if r.URL.Path == "/api" {
			body = f.core
		}
		w.Header().Set("Content-Type", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
		_, _ = w.Write(body)
		return
	case "/openapi/v3":
		index := map[string]any{}
		for path, doc := range f.openAPI {
			index[path] = map[string]string{"serverRelativeURL": fmt.Sprintf("/openapi/v3/%s?hash=%X", path, sha256.Sum256([]byte(doc)))}
		}
		body, _ := json.Marshal(map[string]any{"paths": index})
		_, _ = w.Write(body)
		return
	case "/api/v1/namespaces/kube-system":
		fmt.Fprintf(w, `{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"kube-system","uid":%q}}`, f.uid)
		return
	}
	if doc, ok := f.openAPI[strings.TrimPrefix(r.URL.Path, "/openapi/v3/")]; ok {
		_, _ = io.WriteString(w, doc)
		return
	}
	f.serveList(w, r)
}

func (f *fakeServer) serveList(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	items, known := f.objects[r.URL.Path]
	refused, failing, failingLater, expire := f.refusedSelectors[r.URL.Path], f.failing[r.URL.Path], f.failingLater[r.URL.Path], f.expireOnce[r.URL.Path]
	f.mu.Unlock()
	if !known && !f.serves(r.URL.Path) {
		writeFakeStatus(w, http.StatusNotFound, "the server could not find the requested resource")
		return
	}
	q := r.URL.Query()
	if sel := q.Get("fieldSelector"); sel != "" {
		label, _, _ := strings.Cut(strings.Split(sel, ",")[0], "=")
		label = strings.TrimSuffix(label, "!")
		if slices.Contains(refused, label) {
			writeFakeStatus(w, http.StatusBadRequest, fmt.Sprintf("%q is not a known field selector: only \"metadata.name\", \"metadata.namespace\"", label))
			return
		}
		items = nil
	}
	start := 0
	if c := q.Get("continue"); c != "" {
		if expire {
			f.mu.Lock()
			f.expireOnce[r.URL.Path] = false
			f.mu.Unlock()
			writeFakeStatus(w, http.StatusGone, "The provided continue parameter is too old")
			return
		}
		start, _ = strconv.Atoi(c)
	}
	if failingLater != 0 && start > 0 {
		failing = failingLater
	}
	if failing != 0 {
		writeFakeStatus(w, failing, "injected failure")
		return
	}
	end := len(items)
	if limit, _ := strconv.Atoi(q.Get("limit")); limit > 0 && start+limit < end {
		end = start + limit
	}
	next := ""
	if end < len(items) {
		next = strconv.Itoa(end)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"7","continue":%q},"items":[`, next)
	for i, it := range items[start:end] {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(it)
	}
	b.WriteString("]}")
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b.Bytes())
}

// serveGroupVersion adds a group version with one resource to the fake's
// /apis, as a CRD or an aggregated API adds it to a real server's.
func (f *fakeServer) serveGroupVersion(group, version, resource, kind string, namespaced bool) {
	list, err := discovery.ParseGroupList(f.apis)
	if err != nil {
		f.t.Fatal(err)
	}
	scope := "Cluster"
	if namespaced {
		scope = "Namespaced"
	}
	list = discovery.GroupList{Items: append(slices.Clone(list.Items), discovery.Group{
		Meta: discovery.ObjectMeta{Name: group},
		Versions: []discovery.Version{{Version: version, Freshness: "Current", Resources: []discovery.Resource{{
			Resource: resource, ResponseKind: &discovery.GVK{Group: group, Version: version, Kind: kind}, Scope: scope,
			SingularResource: strings.ToLower(kind), Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"},
		}}}},
	})}
	f.apis = list.AppendJSON(nil, true)
}

// serves reports whether the documents list the collection at path.
func (f *fakeServer) serves(path string) bool {
	for _, doc := range [][]byte{f.apis, f.core} {
		list, err := discovery.ParseGroupList(doc)
		if err != nil {
			f.t.Error(err)
			return false
		}
		api := apiFromDiscovery(list)
		for _, r := range api.resources {
			if r.path() == path {
				return true
			}
		}
	}
	return false
}

func writeFakeStatus(w http.ResponseWriter, code int, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":%q,"code":%d}`, message, code)
}

// kubeconfig writes a kubeconfig naming the fake server with its CA and the
// token (or another token).
func (f *fakeServer) kubeconfig(token string) string {
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.server.Certificate().Raw})
	path := filepath.Join(f.t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: fake
  user:
    token: %s
contexts:
- name: fake
  context: {cluster: fake, user: fake}
current-context: fake
`, f.server.URL, b64(ca), token)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		f.t.Fatal(err)
	}
	return path
}

// meta builds an object with the given metadata fields.
func meta(namespace, name string, extra ...func(map[string]any)) map[string]any {
	m := map[string]any{"name": name, "uid": "uid-" + namespace + "-" + name}
	if namespace != "" {
		m["namespace"] = namespace
	}
	for _, e := range extra {
		e(m)
	}
	return map[string]any{"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": m}
}

func ownedBy(apiVersion, kind, name string) func(map[string]any) {
	return func(m map[string]any) {
		refs, _ := m["ownerReferences"].([]any)
		m["ownerReferences"] = append(refs, map[string]any{"apiVersion": apiVersion, "kind": kind, "name": name, "uid": "uid-" + name})
	}
}

func writtenBy(manager, apiVersion string) func(map[string]any) {
	return func(m map[string]any) {
		entries, _ := m["managedFields"].([]any)
		m["managedFields"] = append(entries, map[string]any{"manager": manager, "operation": "Update", "apiVersion": apiVersion,
			"time": "2026-01-02T03:04:05Z", "fieldsType": "FieldsV1", "fieldsV1": map[string]any{"f:spec": map[string]any{}}})
	}
}

func annotated(key, value string) func(map[string]any) {
	return func(m map[string]any) { m["annotations"] = map[string]any{key: value} }
}

func labelled(key, value string) func(map[string]any) {
	return func(m map[string]any) { m["labels"] = map[string]any{key: value} }
}

// run runs the check with args and returns its exit status and output.
func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	o := NewOptions()
	fs := newTestFlagSet(o)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if errs := o.Validate(); len(errs) > 0 {
		t.Fatalf("options %v: %v", args, errs)
	}
	var out, errOut bytes.Buffer
	code = Run(context.Background(), o, &out, &errOut)
	return code, out.String(), errOut.String()
}

// runJSON runs the check with -o json and decodes the report.
func runJSON(t *testing.T, args ...string) (int, *Report, string) {
	t.Helper()
	code, out, errOut := run(t, append(args, "-o", "json")...)
	if code == ExitError {
		return code, nil, errOut
	}
	var r Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("report is not JSON: %v\n%s\n%s", err, out, errOut)
	}
	return code, &r, errOut
}
