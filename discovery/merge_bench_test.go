package discovery

import (
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apiserver/pkg/endpoints/discovery/aggregated"
)

var mergeBenchETag string

// BenchmarkMergeAndETag merges the realistic sample as three servers (one
// v1.35, two v1.36) and computes the ETag, skewgate's way and upstream's
// (TestMergeResources, encoding/json, SHA-512, %X) on the same decoded input.
func BenchmarkMergeAndETag(b *testing.B) {
	ids := []string{sampleIDv135, sampleIDv136, sampleIDv136b}
	ours := loadSampleServers(b, ids...)
	upstream := make(map[string][]apidiscoveryv2.APIGroupDiscovery, len(ids))
	for i, id := range ids {
		name := "kube-apiserver-v1.36.json"
		if i == 0 {
			name = "kube-apiserver-v1.35.json"
		}
		raw, err := os.ReadFile(filepath.Join(mergeTestdataDir, name))
		if err != nil {
			b.Fatal(err)
		}
		var list apidiscoveryv2.APIGroupDiscoveryList
		if err := json.Unmarshal(raw, &list); err != nil {
			b.Fatal(err)
		}
		upstream[id] = list.Items
	}
	local, peers := upstream[sampleIDv135], map[string][]apidiscoveryv2.APIGroupDiscovery{
		sampleIDv136: upstream[sampleIDv136], sampleIDv136b: upstream[sampleIDv136b],
	}
	skewgate := func() string { return ETag(GroupList{Items: MergeGroups(ours, sampleIDv135)}) }
	upstreamETag := func() string {
		merged := aggregated.TestMergeResources(sampleIDv135, local, peers)
		raw, err := json.Marshal(apidiscoveryv2.APIGroupDiscoveryList{Items: merged})
		if err != nil {
			b.Fatal(err)
		}
		return fmt.Sprintf("%X", sha512.Sum512(raw))
	}
	if got, want := skewgate(), `"`+upstreamETag()+`"`; got != want {
		b.Fatalf("the two sides disagree: ETag %s, upstream %s", got, want)
	}
	b.Run("skewgate", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			mergeBenchETag = skewgate()
		}
	})
	b.Run("upstream", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			mergeBenchETag = upstreamETag()
		}
	})
}
