package discovery

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
)

// groupListFromUpstream converts upstream's typed list field by field, keeping
// nil and empty slices apart, so the encoder is tested without the parser.
func groupListFromUpstream(items []apidiscoveryv2.APIGroupDiscovery) GroupList {
	var list GroupList
	if items != nil {
		list.Items = make([]Group, 0, len(items))
	}
	gvkPointer := func(in *metav1.GroupVersionKind) *GVK {
		if in == nil {
			return nil
		}
		return &GVK{Group: in.Group, Version: in.Version, Kind: in.Kind}
	}
	for _, g := range items {
		group := Group{
			Type: TypeMeta{Kind: g.Kind, APIVersion: g.APIVersion},
			Meta: ObjectMeta{Name: g.Name, Labels: g.Labels, Annotations: g.Annotations},
		}
		group.Versions = convertSlice(g.Versions, func(v apidiscoveryv2.APIVersionDiscovery) Version {
			return Version{
				Version:   v.Version,
				Freshness: string(v.Freshness),
				Resources: convertSlice(v.Resources, func(r apidiscoveryv2.APIResourceDiscovery) Resource {
					return Resource{
						Resource:         r.Resource,
						ResponseKind:     gvkPointer(r.ResponseKind),
						Scope:            string(r.Scope),
						SingularResource: r.SingularResource,
						Verbs:            r.Verbs,
						ShortNames:       r.ShortNames,
						Categories:       r.Categories,
						Subresources: convertSlice(r.Subresources, func(s apidiscoveryv2.APISubresourceDiscovery) Subresource {
							return Subresource{
								Subresource:  s.Subresource,
								ResponseKind: gvkPointer(s.ResponseKind),
								Verbs:        s.Verbs,
								AcceptedTypes: convertSlice(s.AcceptedTypes, func(gvk metav1.GroupVersionKind) GVK {
									return GVK{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind}
								}),
							}
						}),
					}
				}),
			}
		})
		list.Items = append(list.Items, group)
	}
	return list
}

func convertSlice[In, Out any](in []In, convert func(In) Out) []Out {
	if in == nil {
		return nil
	}
	out := make([]Out, len(in))
	for i := range in {
		out[i] = convert(in[i])
	}
	return out
}

func TestAppendJSONMatchesEncodingJSONOnRandomLists(t *testing.T) {
	for seed := range uint64(2000) {
		gen := newDiscoveryGen(seed)
		items := gen.groups()
		if len(items) == 0 && gen.chance(50) {
			items = nil
		}
		list := groupListFromUpstream(items)
		for _, withTypeMeta := range []bool{false, true} {
			upstream := apidiscoveryv2.APIGroupDiscoveryList{Items: items}
			if withTypeMeta {
				upstream.TypeMeta = metav1.TypeMeta{Kind: "APIGroupDiscoveryList", APIVersion: "apidiscovery.k8s.io/v2"}
			}
			want, err := json.Marshal(upstream)
			if err != nil {
				t.Fatal(err)
			}
			if got := list.AppendJSON(nil, withTypeMeta); !bytes.Equal(got, want) {
				t.Fatalf("seed %d, withTypeMeta %v:\n got %s\nwant %s", seed, withTypeMeta, got, want)
			}
		}
	}
}

func TestAppendJSONAppendsToDst(t *testing.T) {
	got := GroupList{}.AppendJSON([]byte("prefix:"), false)
	if want := `prefix:{"metadata":{},"items":null}`; string(got) != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

func TestAppendJSONStringEscapesLikeEncodingJSON(t *testing.T) {
	inputs := []string{
		"", "plain", "<script>&</script>", "\u2028\u2029", "a\u2028b\u2029c", "\"\\/", "\x7f\x80\xff", "\xc3", "\xc3\xa9",
		"\xed\xa0\x80", "\xef\xbf\xbd", "\xf4\x90\x80\x80", "🙂", "tab\there\nnew\rret\bbs\fff\x00nul\x1fus",
	}
	for b := range 256 {
		inputs = append(inputs, string([]byte{byte(b)}), "x"+string([]byte{byte(b)})+"y")
	}
	for _, s := range inputs {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Errorf("appendJSONString(%q) = %s, want %s", s, got, want)
		}
	}
}

func TestUnquoteJSONDecodesLikeEncodingJSON(t *testing.T) {
	tokens := []string{
		`""`, `"plain"`, `"\u00e9"`, `"\u00E9"`, `"\ud83d\ude00"`, `"\ud800"`, `"\udc00"`, `"\ud800\u0041"`,
		`"\udc00\ud800"`, `"\ud800\ud800\udc00"`, `"\ud800x"`, `"\/\\\"\b\f\n\r\t"`, `"\u0000"`, `"\u2028"`,
		"\"raw\xffbyte\"", "\"\xed\xa0\x80\"", "\"\xc3\"", "\"\xe6\x97\xa5\xe6\x9c\xac\"", `"\ud83d"`, `"\ud83d\\u0041"`,
	}
	for _, tok := range tokens {
		var want string
		if err := json.Unmarshal([]byte(tok), &want); err != nil {
			t.Fatalf("token %q: %v", tok, err)
		}
		if got := unquoteJSON(tok); got != want {
			t.Errorf("unquoteJSON(%q) = %q, want %q", tok, got, want)
		}
	}
}

func TestResponseBodyMatchesAPIServerSerializer(t *testing.T) {
	for seed := range uint64(200) {
		items := newDiscoveryGen(seed).groups()
		list := groupListFromUpstream(items)
		upstream := &apidiscoveryv2.APIGroupDiscoveryList{
			TypeMeta: metav1.TypeMeta{Kind: "APIGroupDiscoveryList", APIVersion: "apidiscovery.k8s.io/v2"},
			Items:    items,
		}
		for _, opts := range []k8sjson.SerializerOptions{{}, {StreamingCollectionsEncoding: true}} {
			var want bytes.Buffer
			if err := k8sjson.NewSerializerWithOptions(k8sjson.DefaultMetaFactory, nil, nil, opts).Encode(upstream, &want); err != nil {
				t.Fatal(err)
			}
			got := ResponseBody(list)
			if !bytes.Equal(got, want.Bytes()) {
				t.Fatalf("seed %d, %+v:\n got %q\nwant %q", seed, opts, got, want.Bytes())
			}
		}
	}
}

func TestParseGroupListReportsWhereADocumentIsWrong(t *testing.T) {
	const apps = `{"metadata":{"name":"apps"},"versions":[{"version":"v1","resources":[%s]}]}`
	resource := func(members string) string { return fmt.Sprintf(`{"items":[`+apps+`]}`, members) }
	tests := []struct {
		name, doc, want string
	}{
		{"not JSON", `{"items":[}`, "not valid JSON"},
		{"trailing garbage", `{"items":[]} x`, "not valid JSON"},
		{"too deep", strings.Repeat("[", maxJSONNesting+1) + strings.Repeat("]", maxJSONNesting+1), "nested deeper than 10000 levels"},
		{"not an object", `[]`, "must be a JSON object, got an array"},
		{"items not an array", `{"items":{}}`, `"items" must be an array of objects, got an object`},
		{"item not an object", `{"items":[{"metadata":{"name":"a"}},1]}`, `items[1]: must be an object, got a number`},
		{"duplicate items", `{"items":[],"items":[]}`, `"items" appears more than once`},
		{"metadata not an object", `{"items":[{"metadata":[]}]}`, `items[0]: "metadata" must be an object, got an array`},
		{"name not a string", `{"items":[{"metadata":{"name":7}}]}`, `items[0].metadata: "name" must be a string, got a number`},
		{"unsupported metadata", `{"items":[{"metadata":{"name":"apps","uid":"1234"}}]}`, `items[0] (apps).metadata: "uid" is not supported in discovery metadata`},
		{"creation timestamp", `{"items":[{"metadata":{"name":"apps","creationTimestamp":"2024-01-01T00:00:00Z"}}]}`, `items[0] (apps).metadata: "creationTimestamp" is not supported in discovery metadata (only null)`},
		{"generation", `{"items":[{"metadata":{"name":"apps","generation":0}}]}`, `items[0] (apps).metadata: "generation" is not supported in discovery metadata`},
		{"label not a string", `{"items":[{"metadata":{"name":"apps","labels":{"a":1}}}]}`, `items[0] (apps).metadata: "labels": "a" must be a string, got a number`},
		{"duplicate label", `{"items":[{"metadata":{"name":"apps","labels":{"a":"1","a":"2"}}}]}`, `items[0] (apps).metadata: "labels": "a" appears more than once`},
		{"annotations not an object", `{"items":[{"metadata":{"name":"apps","annotations":"x"}}]}`, `items[0] (apps).metadata: "annotations" must be an object of strings, got a string`},
		{"group kind not a string", `{"items":[{"kind":true,"metadata":{"name":"apps"}}]}`, `items[0] (apps): "kind" must be a string, got a boolean`},
		{"duplicate versions", `{"items":[{"metadata":{"name":"apps"},"versions":[],"versions":[]}]}`, `items[0] (apps): "versions" appears more than once`},
		{"version missing", `{"items":[{"metadata":{"name":"apps"},"versions":[{"resources":[]}]}]}`, `items[0] (apps).versions[0]: "version" is required`},
		{"version empty", `{"items":[{"metadata":{"name":"apps"},"versions":[{"version":""}]}]}`, `items[0] (apps).versions[0]: "version" is required`},
		{"freshness not a string", `{"items":[{"metadata":{"name":"apps"},"versions":[{"version":"v1","freshness":false}]}]}`, `items[0] (apps).versions[0] (v1): "freshness" must be a string, got a boolean`},
		{"resources not an array", `{"items":[{"metadata":{"name":"apps"},"versions":[{"version":"v1","resources":"x"}]}]}`, `items[0] (apps).versions[0] (v1): "resources" must be an array of objects, got a string`},
		{"resource missing", resource(`{"verbs":[]}`), `items[0] (apps).versions[0] (v1).resources[0]: "resource" is required`},
		{"resource null", resource(`{"resource":null}`), `items[0] (apps).versions[0] (v1).resources[0]: "resource" is required`},
		{"verbs a string", resource(`{"resource":"a"},{"resource":"b"},{"resource":"c","verbs":"get"}`), `items[0] (apps).versions[0] (v1).resources[2] (c): "verbs" must be an array of strings, got a string`},
		{"verb a number", resource(`{"resource":"d","verbs":["get",1]}`), `items[0] (apps).versions[0] (v1).resources[0] (d): "verbs" must be an array of strings`},
		{"short names", resource(`{"resource":"d","shortNames":{}}`), `items[0] (apps).versions[0] (v1).resources[0] (d): "shortNames" must be an array of strings, got an object`},
		{"categories", resource(`{"resource":"d","categories":[null]}`), `items[0] (apps).versions[0] (v1).resources[0] (d): "categories" must be an array of strings`},
		{"scope", resource(`{"resource":"d","scope":1}`), `items[0] (apps).versions[0] (v1).resources[0] (d): "scope" must be a string, got a number`},
		{"singular", resource(`{"resource":"d","singularResource":[]}`), `items[0] (apps).versions[0] (v1).resources[0] (d): "singularResource" must be a string, got an array`},
		{"duplicate verbs", resource(`{"resource":"d","verbs":[],"verbs":[]}`), `items[0] (apps).versions[0] (v1).resources[0] (d): "verbs" appears more than once`},
		{"response kind", resource(`{"resource":"d","responseKind":"Deployment"}`), `items[0] (apps).versions[0] (v1).resources[0] (d): "responseKind" must be an object, got a string`},
		{"response kind member", resource(`{"resource":"d","responseKind":{"kind":1}}`), `items[0] (apps).versions[0] (v1).resources[0] (d).responseKind: "kind" must be a string, got a number`},
		{"subresources", resource(`{"resource":"d","subresources":{}}`), `items[0] (apps).versions[0] (v1).resources[0] (d): "subresources" must be an array of objects, got an object`},
		{"subresource missing", resource(`{"resource":"d","subresources":[{"verbs":[]}]}`), `items[0] (apps).versions[0] (v1).resources[0] (d).subresources[0]: "subresource" is required`},
		{"subresource verbs", resource(`{"resource":"d","subresources":[{"subresource":"status","verbs":7}]}`), `items[0] (apps).versions[0] (v1).resources[0] (d).subresources[0] (status): "verbs" must be an array of strings, got a number`},
		{"accepted type", resource(`{"resource":"d","subresources":[{"subresource":"status","acceptedTypes":["x"]}]}`), `items[0] (apps).versions[0] (v1).resources[0] (d).subresources[0] (status).acceptedTypes[0]: must be an object, got a string`},
		{"accepted type member", resource(`{"resource":"d","subresources":[{"subresource":"status","acceptedTypes":[{"group":null,"version":2}]}]}`), `items[0] (apps).versions[0] (v1).resources[0] (d).subresources[0] (status).acceptedTypes[0]: "version" must be a string, got a number`},
		{"odd group name is quoted", `{"items":[{"metadata":{"name":"a (b)"},"versions":[{}]}]}`, `items[0] ("a (b)").versions[0]: "version" is required`},
		{"escaped member names count", `{"items":[{"metadata":{"name":"apps"},"vers\u0069ons":1}]}`, `items[0] (apps): "versions" must be an array of objects, got a number`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseGroupList([]byte(tt.doc))
			var parseErr *ParseError
			if !errors.As(err, &parseErr) {
				t.Fatalf("ParseGroupList(%s) error = %v, want a *ParseError", tt.doc, err)
			}
			if err.Error() != tt.want {
				t.Fatalf("ParseGroupList(%s) error\n got %s\nwant %s", tt.doc, err, tt.want)
			}
		})
	}
}

func TestParseGroupListAcceptsWhatUpstreamDecodesAndReencodesIt(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"missing items", `{}`, `{"metadata":{},"items":null}`},
		{"null items", `{"items":null}`, `{"metadata":{},"items":null}`},
		{"empty items", `{"items":[]}`, `{"metadata":{},"items":[]}`},
		{"list meta ignored whatever its shape", `{"kind":5,"apiVersion":null,"metadata":[1],"items":[]}`, `{"metadata":{},"items":[]}`},
		{"core group has no name", `{"items":[{"metadata":{},"versions":[{"version":"v1"}]}]}`, `{"metadata":{},"items":[{"metadata":{},"versions":[{"version":"v1"}]}]}`},
		{"missing and null metadata", `{"items":[{},{"metadata":null}]}`, `{"metadata":{},"items":[{"metadata":{}},{"metadata":{}}]}`},
		{"old servers' null creationTimestamp", `{"items":[{"metadata":{"name":"apps","creationTimestamp":null}}]}`, `{"metadata":{},"items":[{"metadata":{"name":"apps"}}]}`},
		{"empty unsupported metadata", `{"items":[{"metadata":{"name":"a","uid":"","namespace":null,"ownerReferences":null,"clusterName":"x"}}]}`, `{"metadata":{},"items":[{"metadata":{"name":"a"}}]}`},
		{"labels and annotations sorted", `{"items":[{"metadata":{"annotations":{"z":"1","a":"<"},"labels":{"b":"","a":"x"},"name":"g"}}]}`, `{"metadata":{},"items":[{"metadata":{"name":"g","labels":{"a":"x","b":""},"annotations":{"a":"\u003c","z":"1"}}}]}`},
		{"empty maps omitted", `{"items":[{"metadata":{"name":"g","labels":{},"annotations":null}}]}`, `{"metadata":{},"items":[{"metadata":{"name":"g"}}]}`},
		{"group type meta kept", `{"items":[{"apiVersion":"v","kind":"k","metadata":{"name":"g"}}]}`, `{"metadata":{},"items":[{"kind":"k","apiVersion":"v","metadata":{"name":"g"}}]}`},
		{"empty versions omitted", `{"items":[{"metadata":{"name":"g"},"versions":[]}]}`, `{"metadata":{},"items":[{"metadata":{"name":"g"}}]}`},
		{"null verbs and kinds", `{"items":[{"metadata":{"name":"g"},"versions":[{"version":"v1","freshness":null,"resources":[{"resource":"r","responseKind":null,"scope":null,"verbs":null,"shortNames":null,"subresources":[{"subresource":"s","acceptedTypes":null,"verbs":null}]}]}]}]}`,
			`{"metadata":{},"items":[{"metadata":{"name":"g"},"versions":[{"version":"v1","resources":[{"resource":"r","scope":"","singularResource":"","verbs":null,"subresources":[{"subresource":"s","verbs":null}]}]}]}]}`},
		{"empty verbs stay empty", `{"items":[{"metadata":{"name":"g"},"versions":[{"version":"v1","resources":[{"resource":"r","verbs":[],"categories":[],"subresources":[{"subresource":"s","verbs":[],"acceptedTypes":[]}]}]}]}]}`,
			`{"metadata":{},"items":[{"metadata":{"name":"g"},"versions":[{"version":"v1","resources":[{"resource":"r","scope":"","singularResource":"","verbs":[],"subresources":[{"subresource":"s","verbs":[]}]}]}]}]}`},
		{"field order restored", `{"items":[{"versions":[{"freshness":"Current","resources":[{"verbs":["get"],"singularResource":"r","scope":"Cluster","responseKind":{"kind":"R","version":"v1","group":"g"},"resource":"rs"}],"version":"v1"}],"metadata":{"name":"g"}}]}`,
			`{"metadata":{},"items":[{"metadata":{"name":"g"},"versions":[{"version":"v1","resources":[{"resource":"rs","responseKind":{"group":"g","version":"v1","kind":"R"},"scope":"Cluster","singularResource":"r","verbs":["get"]}],"freshness":"Current"}]}]}`},
		{"unknown members ignored", `{"future":1,"items":[{"future":{},"metadata":{"name":"g","future":[]},"versions":[{"version":"v1","future":null}]}]}`, `{"metadata":{},"items":[{"metadata":{"name":"g"},"versions":[{"version":"v1"}]}]}`},
		{"strings unescaped and re-escaped", `{"items":[{"metadata":{"name":"a\u003cb\/c\u2028\ud800"}}]}`, `{"metadata":{},"items":[{"metadata":{"name":"a\u003cb/c\u2028` + "\ufffd" + `"}}]}`},
		{"whitespace around everything", " \n{ \"items\" : [ ] }\t\r\n", `{"metadata":{},"items":[]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			list, err := ParseGroupList([]byte(tt.doc))
			if err != nil {
				t.Fatalf("ParseGroupList(%s): %v", tt.doc, err)
			}
			if got := list.AppendJSON(nil, false); string(got) != tt.want {
				t.Fatalf("re-encoded\n got %s\nwant %s", got, tt.want)
			}
			var upstream apidiscoveryv2.APIGroupDiscoveryList
			if err := json.Unmarshal([]byte(tt.doc), &upstream); err == nil {
				if want := marshalUpstreamItems(t, upstream.Items); string(want) != tt.want {
					t.Fatalf("the table's expectation differs from encoding/json's %s", want)
				}
			}
		})
	}
}

// TestParseGroupListMatchesMemberNamesCaseSensitively follows the API server's
// decoder (sigs.k8s.io/json), not encoding/json, which would fold "Items" into
// items.
func TestParseGroupListMatchesMemberNamesCaseSensitively(t *testing.T) {
	list, err := ParseGroupList([]byte(`{"Items":[{}],"items":[{"Metadata":{"name":"x"},"metadata":{"Name":"y"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(list.AppendJSON(nil, false)), `{"metadata":{},"items":[{"metadata":{}}]}`; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

// FuzzParseGroupList proves ParseGroupList never panics, accepts only valid
// JSON, rejects only with a *ParseError, and that what it accepts re-encodes to
// a fixed point: re-parsing the encoding gives the same encoding, which is
// also what encoding/json makes of it with upstream's types.
//
// Its seeds are checked in under testdata/fuzz/FuzzParseGroupList; they are
// kept small because the fuzzer minimizes every new input it finds.
func FuzzParseGroupList(f *testing.F) {
	f.Fuzz(func(t *testing.T, raw []byte) {
		list, err := ParseGroupList(raw)
		if err != nil {
			var parseErr *ParseError
			if !errors.As(err, &parseErr) {
				t.Fatalf("error %v is not a *ParseError", err)
			}
			return
		}
		if !json.Valid(raw) {
			t.Fatalf("accepted invalid JSON %q", raw)
		}
		first := list.AppendJSON(nil, true)
		again, err := ParseGroupList(first)
		if err != nil {
			t.Fatalf("cannot parse its own encoding %s: %v", first, err)
		}
		if second := again.AppendJSON(nil, true); !bytes.Equal(first, second) {
			t.Fatalf("encoding is not stable:\nfirst  %s\nsecond %s", first, second)
		}
		var upstream apidiscoveryv2.APIGroupDiscoveryList
		if err := json.Unmarshal(first, &upstream); err != nil {
			t.Fatalf("encoding/json rejects the encoding %s: %v", first, err)
		}
		if want, _ := json.Marshal(upstream); !bytes.Equal(first, want) {
			t.Fatalf("encoding/json re-encodes\n%s\nas\n%s", first, want)
		}
	})
}
