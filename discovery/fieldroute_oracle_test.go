package discovery

import (
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/fields"
)

// upstreamSelectorLabels is what kube-apiserver makes of a raw query's field
// selector: the first fieldSelector value of url.ParseQuery, parsed by
// fields.ParseSelector, whose requirements' fields are the labels it then
// asks the resource's field label conversion about. ok is false without a
// selector or for one it rejects with a 400.
func upstreamSelectorLabels(rawQuery string) (labels []string, ok bool) {
	query, _ := url.ParseQuery(rawQuery)
	values := query["fieldSelector"]
	if len(values) == 0 {
		return nil, false
	}
	selector, err := fields.ParseSelector(values[0])
	if err != nil {
		return nil, false
	}
	for _, r := range selector.Requirements() {
		if !slices.Contains(labels, r.Field) {
			labels = append(labels, r.Field)
		}
	}
	return labels, true
}

// differenceFromUpstreamSelector compares the servers acceptingServers
// finds with the labels upstream reads: with every label accepted by every
// server but its own, the servers accepting a selector are exactly the
// complement of its labels' servers, so any label read differently shows.
func differenceFromUpstreamSelector(rawQuery string) string {
	wantLabels, wantOK := upstreamSelectorLabels(rawQuery)
	if len(wantLabels) > 63 {
		return ""
	}
	table := make([]acceptedLabel, 0, len(wantLabels)+2)
	want := ^ServerSet(0)
	for i, label := range append(wantLabels, "metadata.name", "spec.nodeName") {
		if slices.ContainsFunc(table, func(a acceptedLabel) bool { return a.label == label }) {
			continue
		}
		table = append(table, acceptedLabel{label: label, servers: ^(ServerSet(1) << uint(i))})
		if i < len(wantLabels) {
			want &^= ServerSet(1) << uint(i)
		}
	}
	slices.SortFunc(table, func(a, b acceptedLabel) int { return strings.Compare(a.label, b.label) })
	got, ok := acceptingServers(table, rawQuery)
	switch {
	case ok != wantOK:
		return fmt.Sprintf("query %q: selector read %v; upstream %v (labels %q)", rawQuery, ok, wantOK, wantLabels)
	case ok && got != want:
		return fmt.Sprintf("query %q: accepting servers %b; want %b from upstream's labels %q", rawQuery, got, want, wantLabels)
	}
	return ""
}

var selectorQueryCases = []string{
	"", "fieldSelector", "fieldSelector=", "fieldSelector=a", "fieldSelector=a=b", "fieldSelector=a%3Db",
	"fieldSelector=spec.nodeName%3Dnode-1&limit=500&resourceVersion=0", "fieldSelector=spec.clusterIP%21%3DNone",
	"fieldSelector=spec.clusterIP!=None", "fieldSelector=a%3D%3Db", "fieldSelector=a=%3Db", "fieldSelector=a%3Db%2Cc%3Dd",
	"fieldSelector=a%3Db%5C%2Cc%3Dd", "fieldSelector=a%3Db%5C", "fieldSelector=a%5C%2Cb%3Dc", "fieldSelector=a+b%3Dc",
	"fieldSelector=a%20%3Dc", "fieldSelector=a%3Db+c", "fieldSelector=%2C%2Ca%3Db%2C", "fieldSelector=a%3Db;c",
	"fieldSelector=%zz&fieldSelector=a%3Db", "fieldSelector=a%3Db&fieldSelector=c%3Dd", "field%53elector=a%3Db",
	"fieldSelector=%C3%A9%3Db", "fieldSelector=a%3D%FF", "fieldSelector=a%3D%5C%FF", "fieldSelector=%3Db",
	"fieldSelector=a%21b%3Dc", "fieldSelector=a%3D%21%3Db", "fieldSelector=a%21%21%3Db", "fieldselector=a%3Db",
	"fieldSelector=metadata.name%3Dp,metadata.namespace!%3Dx", "x=1&fieldSelector=a%3Db&fieldSelector=",
	"fieldSelector=a%3Db%25", "fieldSelector=a%253Db", "fieldSelector=a%3Db&" + strings.Repeat("&", maxQueryParams),
}

func TestAcceptingServersReadsTheSelectorAsUpstream(t *testing.T) {
	for _, q := range selectorQueryCases {
		if diff := differenceFromUpstreamSelector(q); diff != "" {
			t.Error(diff)
		}
	}
}

func TestAcceptingServersReadsTheSelectorAsUpstreamOnRandomQueries(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 2026))
	pieces := []string{
		"fieldSelector=", "field%53elector=", "fieldSelector", "&", ";", "=", "%3D", "!", "%21", ",", "%2C",
		"\\", "%5C", "+", "%20", " ", "%", "%zz", "%2", "spec.nodeName", "metadata.name", "a", "é", "%C3%A9", "%FF",
		"\xff", "%00", "labelSelector=", "watch=1",
	}
	for i := range 100000 {
		var q strings.Builder
		for range r.IntN(10) {
			q.WriteString(randomRequestPiece(r, pieces))
		}
		if diff := differenceFromUpstreamSelector(q.String()); diff != "" {
			t.Fatalf("query %d: %s", i, diff)
		}
	}
}

func FuzzFieldSelectorRouting(f *testing.F) {
	for _, q := range selectorQueryCases[:len(selectorQueryCases)-1] {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, rawQuery string) {
		if diff := differenceFromUpstreamSelector(rawQuery); diff != "" {
			t.Error(diff)
		}
	})
}
