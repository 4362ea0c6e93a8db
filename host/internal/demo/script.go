package demo

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/skewgate/skewgate/discovery"
)

const aggregatedAccept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"

// step is one scripted request.
type step struct {
	path string
	// discovery marks GET /apis with the aggregated Accept, whose answer is
	// checked for completeness.
	discovery bool
}

// script is the fixed request sequence sent through each proxy: every
// resource and legacy group-version document only some servers serve, a few
// that all serve, and aggregated discovery.
type script struct {
	steps    []step
	requests int
	skewed   []SkewedResource
	// allGroupVersions is every group version of /apis some server serves.
	allGroupVersions []gv
}

// commonPaths are requests every Kubernetes version serves.
var commonPaths = []string{
	"/api/v1/namespaces/demo/pods",
	"/api/v1/namespaces/demo/configmaps/settings",
	"/apis/apps/v1/namespaces/demo/deployments",
	"/api/v1/namespaces",
}

func newScript(servers []*fakeAPIServer, requests int) *script {
	s := &script{requests: requests}
	servedBy := map[gvr]int{}
	gvServedBy := map[gv]int{}
	info := map[gvr]resourceInfo{}
	for _, srv := range servers {
		for k, i := range srv.resources {
			servedBy[k]++
			info[k] = i
		}
		for group, versions := range srv.versions {
			for _, v := range versions {
				gvServedBy[gv{group, v}]++
			}
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(servedBy), compareGVR) {
		if n := servedBy[k]; n < len(servers) && !strings.Contains(k.resource, "/") {
			path := resourcePath(k, info[k].namespaced)
			s.skewed = append(s.skewed, SkewedResource{Path: path, ServedBy: n, Of: len(servers)})
			s.steps = append(s.steps, step{path: path})
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(gvServedBy), compareGV) {
		if k.group != "" {
			s.allGroupVersions = append(s.allGroupVersions, k)
		}
		if n := gvServedBy[k]; n < len(servers) && k.group != "" {
			path := "/apis/" + k.group + "/" + k.version
			s.skewed = append(s.skewed, SkewedResource{Path: path, ServedBy: n, Of: len(servers), GroupVersionOnly: true})
			s.steps = append(s.steps, step{path: path})
		}
	}
	for _, p := range commonPaths {
		s.steps = append(s.steps, step{path: p})
	}
	s.steps = append(s.steps, step{path: "/apis", discovery: true})
	return s
}

func compareGVR(a, b gvr) int {
	return cmp.Or(cmp.Compare(a.group, b.group), cmp.Compare(a.version, b.version), cmp.Compare(a.resource, b.resource))
}

func compareGV(a, b gv) int {
	return cmp.Or(cmp.Compare(a.group, b.group), cmp.Compare(a.version, b.version))
}

func resourcePath(k gvr, namespaced bool) string {
	prefix := "/api/" + k.version
	if k.group != "" {
		prefix = "/apis/" + k.group + "/" + k.version
	}
	if namespaced {
		return prefix + "/namespaces/demo/" + k.resource
	}
	return prefix + "/" + k.resource
}

// run sends the script's requests, in order and cycling, to base. etag, when
// not nil, receives the ETag of the last /apis answer.
func (s *script) run(ctx context.Context, client *http.Client, base string, etag *string) Tally {
	var t Tally
	for i := range s.requests {
		st := s.steps[i%len(s.steps)]
		t.Requests++
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+st.path, nil)
		if err != nil {
			t.OtherErrors++
			continue
		}
		if st.discovery {
			req.Header.Set("Accept", aggregatedAccept)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.OtherErrors++
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case err != nil:
			t.OtherErrors++
		case resp.StatusCode == http.StatusNotFound:
			t.FalseNotFound++
		case resp.StatusCode/100 != 2:
			t.OtherErrors++
		case st.discovery:
			t.DiscoveryRequests++
			if s.complete(body) {
				t.DiscoveryComplete++
			}
			if etag != nil {
				*etag = resp.Header.Get("ETag")
			}
		}
	}
	return t
}

// complete reports whether an /apis answer lists every group version some
// server serves.
func (s *script) complete(body []byte) bool {
	list, err := discovery.ParseGroupList(body)
	if err != nil {
		return false
	}
	listed := map[gv]bool{}
	for _, g := range list.Items {
		for _, v := range g.Versions {
			listed[gv{g.Name(), v.Version}] = true
		}
	}
	for _, k := range s.allGroupVersions {
		if !listed[k] {
			return false
		}
	}
	return true
}

func printReport(w io.Writer, servers []*fakeAPIServer, urls []string, r *Report, caFile string) {
	fmt.Fprintln(w, "skewgate demo: a control plane in the middle of a rolling upgrade")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for i, s := range servers {
		if members[i].extra {
			fmt.Fprintf(tw, "  %s\t%s\t%s\textra APIs enabled\n", s.name, s.version, urls[i])
		} else {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", s.name, s.version, urls[i])
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "\nAPIs not every server serves (%d):\n", len(r.Skewed))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, sk := range r.Skewed {
		fmt.Fprintf(tw, "  %s\tserved by %d of %d\n", sk.Path, sk.ServedBy, sk.Of)
	}
	tw.Flush()

	fmt.Fprintf(w, "\nThe same %d requests through each proxy (skewed APIs, common resources, aggregated /apis):\n\n", r.Plain.Requests)
	tw = tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "\tplain round robin\tskewgate")
	fmt.Fprintf(tw, "false 404s\t%s\t%s\n", rate(r.Plain), rate(r.Skewgate))
	fmt.Fprintf(tw, "other errors\t%d\t%d\n", r.Plain.OtherErrors, r.Skewgate.OtherErrors)
	fmt.Fprintf(tw, "/apis listing every served API\t%d of %d\t%d of %d\n",
		r.Plain.DiscoveryComplete, r.Plain.DiscoveryRequests, r.Skewgate.DiscoveryComplete, r.Skewgate.DiscoveryRequests)
	fmt.Fprintf(tw, "/apis served as\tone server's own view\tmerged, ETag %s\n", shortETag(r.MergedETag))
	tw.Flush()

	fmt.Fprintf(w, "\nStatus page:  %s\n", r.StatusPageURL)
	fmt.Fprintf(w, "Gateway:      %s  (CA certificate %s, generated for this run)\n", r.GatewayURL, caFile)
}

func rate(t Tally) string {
	if t.Requests == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%.1f%%)", t.FalseNotFound, 100*t.FalseNotFoundRate())
}

func shortETag(etag string) string {
	if len(etag) > 18 {
		return etag[:17] + `…"`
	}
	return etag
}
