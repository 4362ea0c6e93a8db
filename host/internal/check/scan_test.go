package check

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// TestListsOnePageAtATime: every list is paged with the chunk size and no
// request is sent while another is in flight, so the check never holds more
// than the page being decoded.
func TestListsOnePageAtATime(t *testing.T) {
	f := newFakeServer(t, "v1.35.4", "default")
	for i := range 1050 {
		f.add("/api/v1/configmaps", meta("default", fmt.Sprintf("cm-%d", i), ownedBy("v1", "ConfigMap", "parent")))
	}
	code, r, stderr := runJSON(t, "--kubeconfig", f.kubeconfig(fakeToken), "--to", "v1.36.3", "--chunk-size", "100")
	if code != ExitClean || r.Scan.Objects != 1050 {
		t.Fatalf("exit %d, %+v\n%s", code, r, stderr)
	}
	if n := f.maxInFlight.Load(); n != 1 {
		t.Errorf("%d requests in flight at once, want 1", n)
	}
	var pages int
	for _, req := range f.requests {
		if strings.HasPrefix(req, "/api/v1/configmaps?") {
			pages++
			if !strings.Contains(req, "limit=100") {
				t.Errorf("list without the chunk size: %s", req)
			}
		}
	}
	if pages != 11 {
		t.Errorf("%d pages of configmaps, want 11", pages)
	}
	if r.Scan.Requests != int64(len(f.requests)) {
		t.Errorf("report counts %d requests, the server saw %d", r.Scan.Requests, len(f.requests))
	}
}

// TestDecodesAPageAsItStreams lists one page far larger than what the check
// may hold (generated as it is written, so the server holds none of it
// either): the heap the process obtains stays a fraction of the page.
func TestDecodesAPageAsItStreams(t *testing.T) {
	const items = 200_000
	filler := strings.Repeat("x", 300)
	var written atomic.Int64
	s := newFakeServer(t, "v1.35.4", "default")
	big := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/configmaps" {
			s.ServeHTTP(w, r)
			return
		}
		bw := bufio.NewWriter(w)
		bw.WriteString(`{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{},"items":[`)
		for i := range items {
			if i > 0 {
				bw.WriteByte(',')
			}
			n, _ := fmt.Fprintf(bw, `{"metadata":{"name":"cm-%d","namespace":"default","annotations":{"filler":"%s"}}}`, i, filler)
			written.Add(int64(n))
		}
		bw.WriteString("]}")
		bw.Flush()
	}))
	t.Cleanup(big.Close)
	s.server = big
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	code, r, stderr := runJSON(t, "--kubeconfig", s.kubeconfig(fakeToken), "--to", "v1.36.3")
	runtime.ReadMemStats(&after)
	if code != ExitClean || r.Scan.Objects != items {
		t.Fatalf("exit %d, %d objects\n%s", code, r.Scan.Objects, stderr)
	}
	page := written.Load()
	grown := int64(after.HeapSys) - int64(before.HeapSys)
	t.Logf("page of %d MiB; heap obtained grew %d MiB", page>>20, grown>>20)
	if grown > page/4 {
		t.Errorf("the heap grew by %d bytes while decoding a page of %d: the page is held, not streamed", grown, page)
	}
}

// TestExpiredContinueRestartsTheList: a continue token answered 410 Gone
// restarts that list from its first page, and its objects are counted once.
func TestExpiredContinueRestartsTheList(t *testing.T) {
	f := newFakeServer(t, "v1.35.4", "extra")
	for i := range 25 {
		f.add("/apis/coordination.k8s.io/v1alpha2/leasecandidates", meta("ns", "lc-"+strconv.Itoa(i)))
	}
	f.expireOnce["/apis/coordination.k8s.io/v1alpha2/leasecandidates"] = true
	code, r, stderr := runJSON(t, "--kubeconfig", f.kubeconfig(fakeToken), "--to", "v1.36.3", "--chunk-size", "10")
	if code != ExitFindings {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	for _, fd := range r.Findings {
		if fd.Kind == KindResource && !strings.HasPrefix(fd.Summary, "25 objects in 1 namespace") {
			t.Errorf("after a restarted list: %s", fd.Summary)
		}
	}
}

// TestAFailedPageIsNoResult: a list failing after its first page makes the
// check fail with exit status 2 and no report, never a clean result.
func TestAFailedPageIsNoResult(t *testing.T) {
	f := newFakeServer(t, "v1.35.4", "default")
	for i := range 30 {
		f.add("/api/v1/secrets", meta("ns", "s-"+strconv.Itoa(i)))
	}
	f.failingLater["/api/v1/secrets"] = http.StatusInternalServerError
	code, out, stderr := run(t, "--kubeconfig", f.kubeconfig(fakeToken), "--to", "v1.36.3", "--chunk-size", "10")
	if code != ExitError || out != "" || !strings.Contains(stderr, "listing v1 secrets") || !strings.Contains(stderr, "injected failure") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}
