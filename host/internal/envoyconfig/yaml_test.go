package envoyconfig

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// toGeneric converts an emitter value to what encoding/json would decode
// from the equivalent JSON document.
func toGeneric(v any) any {
	switch v := v.(type) {
	case object:
		m := make(map[string]any, len(v))
		for _, f := range v {
			m[f.key] = toGeneric(f.value)
		}
		return m
	case list:
		l := make([]any, len(v))
		for i, item := range v {
			l[i] = toGeneric(item)
		}
		return l
	case int:
		return float64(v)
	case uint32:
		return float64(v)
	default:
		return v
	}
}

// parseYAMLGeneric reads doc with an independent YAML parser (go-yaml, YAML
// 1.1 rules, stricter than Envoy's YAML 1.2 reader on plain scalars).
func parseYAMLGeneric(t *testing.T, doc []byte) any {
	t.Helper()
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		t.Fatalf("YAML parser rejected the output: %v\n%s", err, doc)
	}
	var generic any
	if err := json.Unmarshal(js, &generic); err != nil {
		t.Fatal(err)
	}
	return generic
}

// trickyStrings are scalars that YAML reads as something else, or cannot
// carry raw, unless the emitter quotes or escapes them.
var trickyStrings = []string{
	"", " ", "  leading", "trailing ", "yes", "No", "ON", "off", "y", "N", "true", "False", "null", "Null", "~",
	"0", "007", "1e3", "0x1F", "0o17", "1_000", ".5", "-1", "+1", ".inf", "-.Inf", ".nan", "1:20", "12:30:45",
	"2024-01-02", "@type", "*", "&anchor", "!tag", "|", ">", "%directive", "`", "#comment", "a #b", "a: b", "a:b",
	"- item", "-", "?", "? key", "[1]", "{a: 1}", "'single'", `"double"`, `back\slash`, "<<", "=", "a,b",
	"line\nbreak", "tab\there", "cr\rlf", "nul\x00byte", "del\x7f", "next\u0085line", "sep\u2028arator",
	"bom\ufeff", "é ü ß", "日本語", "emoji 😀", "{\"json\":[1,\"two\",{\"three\":null}]}", "it's", "''",
	"type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm", "/etc/skewgate/tls/serving.crt",
	"x-skewgate-upstream", "spdy/3.1", "TLSv1_2", "_leading_underscore", "trailing-",
}

func TestYAMLOutputReadsBackIdenticallyWithAnIndependentParser(t *testing.T) {
	t.Run("tricky strings as values and keys", func(t *testing.T) {
		values := make(object, 0, len(trickyStrings))
		keys := make(object, 0, len(trickyStrings))
		items := make(list, 0, len(trickyStrings))
		for i, s := range trickyStrings {
			values = append(values, field{"k" + strings.Repeat("x", i), s})
			keys = append(keys, field{s, i})
			items = append(items, s)
		}
		doc := object{{"values", values}, {"keys", keys}, {"items", items}}
		out, err := marshalYAML(doc)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := parseYAMLGeneric(t, out), toGeneric(doc); !reflect.DeepEqual(got, want) {
			t.Fatalf("read back\n%#v\nwant\n%#v\nfrom\n%s", got, want, out)
		}
	})
	t.Run("random documents", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(42, 7))
		for i := range 300 {
			doc := randomObject(rng, 0)
			out, err := marshalYAML(doc)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := parseYAMLGeneric(t, out), toGeneric(doc); !reflect.DeepEqual(got, want) {
				t.Fatalf("document %d read back\n%#v\nwant\n%#v\nfrom\n%s", i, got, want, out)
			}
		}
	})
}

func randomString(rng *rand.Rand) string {
	if rng.IntN(3) == 0 {
		return trickyStrings[rng.IntN(len(trickyStrings))]
	}
	const alphabet = "abcXYZ019_./-:#@ '\"\\\n\t{}[],&*!|>%?`~é😀\u0085\u2028"
	runes := []rune(alphabet)
	b := make([]rune, rng.IntN(12))
	for i := range b {
		b[i] = runes[rng.IntN(len(runes))]
	}
	return string(b)
}

func randomValue(rng *rand.Rand, depth int) any {
	kind := rng.IntN(7)
	if depth >= 4 {
		kind %= 4
	}
	switch kind {
	case 0:
		return rng.IntN(2) == 0
	case 1:
		return rng.IntN(1 << 20)
	case 2:
		return uint32(rng.Uint32())
	case 3:
		return randomString(rng)
	case 4, 5:
		return randomObject(rng, depth+1)
	default:
		l := make(list, rng.IntN(4))
		for i := range l {
			l[i] = randomValue(rng, depth+1)
		}
		return l
	}
}

func randomObject(rng *rand.Rand, depth int) object {
	n := rng.IntN(4)
	o := make(object, 0, n)
	seen := map[string]bool{}
	for range n {
		k := randomString(rng)
		if seen[k] {
			continue
		}
		seen[k] = true
		o = append(o, field{k, randomValue(rng, depth)})
	}
	return o
}

func TestYAMLEmitterRefusesWhatItCannotRepresent(t *testing.T) {
	for _, tc := range []struct {
		name string
		doc  object
	}{
		{"duplicate key", object{{"a", 1}, {"a", 2}}},
		{"duplicate nested key", object{{"a", list{object{{"b", 1}, {"b", 1}}}}}},
		{"invalid UTF-8 value", object{{"a", "\xff"}}},
		{"invalid UTF-8 key", object{{"\xfe", 1}}},
		{"unsupported type", object{{"a", 1.5}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if out, err := marshalYAML(tc.doc); err == nil {
				t.Fatalf("emitted\n%s", out)
			}
		})
	}
}

// A plugin configuration is one JSON line of hundreds of kilobytes; folding
// it at a line width would make the rendered files unreadable and unstable.
func TestYAMLKeepsLongTextOnOneLine(t *testing.T) {
	long := strings.Repeat(`{"message": "a discovery document with spaces"} `, 50)
	out, err := marshalYAML(object{{"value", long}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "value: '" + long + "'\n"; string(out) != want {
		t.Fatalf("got\n%s\nwant\n%s", out, want)
	}
}
