package micro

import (
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apiserver/pkg/endpoints/discovery/aggregated"

	"github.com/skewgate/skewgate/discovery"
)

// mergeInput is the captured plane's /apis documents, decoded once for each
// side. Both sides merge as the server with the lowest ID, the view skewgate
// serves.
type mergeInput struct {
	localID  string
	ours     []discovery.ServerGroups
	local    []apidiscoveryv2.APIGroupDiscovery
	peers    map[string][]apidiscoveryv2.APIGroupDiscovery
	servers  int
	byteSize int
}

func newMergeInput(tb testing.TB) *mergeInput {
	tb.Helper()
	plane := capturedPlane(tb)
	in := &mergeInput{peers: map[string][]apidiscoveryv2.APIGroupDiscovery{}, servers: len(plane)}
	ids := make([]string, 0, len(plane))
	for _, s := range plane {
		ids = append(ids, s.ID)
	}
	in.localID = slices.Min(ids)
	for _, s := range plane {
		list, err := discovery.ParseGroupList(s.APIs)
		if err != nil {
			tb.Fatal(err)
		}
		in.ours = append(in.ours, discovery.ServerGroups{ServerID: s.ID, Groups: list.Items})
		var upstream apidiscoveryv2.APIGroupDiscoveryList
		if err := json.Unmarshal(s.APIs, &upstream); err != nil {
			tb.Fatal(err)
		}
		if s.ID == in.localID {
			in.local = upstream.Items
		} else {
			in.peers[s.ID] = upstream.Items
		}
		in.byteSize += len(s.APIs)
	}
	return in
}

func (in *mergeInput) skewgateETag() string {
	return discovery.ETag(discovery.GroupList{Items: discovery.MergeGroups(in.ours, in.localID)})
}

// upstreamETag is what a peer-aggregated kube-apiserver computes on a cache
// miss: mergeResources, then calculateETag's JSON encoding, SHA-512 and %X.
func (in *mergeInput) upstreamETag() (string, error) {
	merged := aggregated.TestMergeResources(in.localID, in.local, in.peers)
	raw, err := json.Marshal(apidiscoveryv2.APIGroupDiscoveryList{Items: merged})
	if err != nil {
		return "", err
	}
	return strconv.Quote(fmt.Sprintf("%X", sha512.Sum512(raw))), nil
}

func TestMergeBenchmarkSidesProduceTheSameETag(t *testing.T) {
	in := newMergeInput(t)
	want, err := in.upstreamETag()
	if err != nil {
		t.Fatal(err)
	}
	if got := in.skewgateETag(); got != want {
		t.Errorf("skewgate ETag %s; upstream %s", got, want)
	}
}

var mergeSinkETag string

// BenchmarkMergeAndETag merges the /apis documents of three real servers
// (v1.35.4, v1.36.3, v1.37.2) and computes the ETag, skewgate's way and
// upstream's, on the same decoded documents.
func BenchmarkMergeAndETag(b *testing.B) {
	in := newMergeInput(b)
	b.Run("skewgate", func(b *testing.B) {
		b.SetBytes(int64(in.byteSize))
		b.ReportAllocs()
		for b.Loop() {
			mergeSinkETag = in.skewgateETag()
		}
	})
	b.Run("upstream", func(b *testing.B) {
		b.SetBytes(int64(in.byteSize))
		b.ReportAllocs()
		for b.Loop() {
			etag, err := in.upstreamETag()
			if err != nil {
				b.Fatal(err)
			}
			mergeSinkETag = etag
		}
	})
}
