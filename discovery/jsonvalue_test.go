package discovery

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// jsonReaderInputs are documents at the edges of the grammar and of what the
// reader decodes: escapes, invalid UTF-8, surrogates, numbers, duplicate and
// escaped member names, nesting.
var jsonReaderInputs = []string{
	``, ` `, `{}`, `[]`, ` {} `, "\t[\n]\r", `{`, `}`, `[`, `]`, `{]`, `[}`, `{"a"}`, `{"a":}`, `{"a":1,}`, `[1,]`, `[,1]`,
	`{"a":1 "b":2}`, `{"a" 1}`, `{1:2}`, `null`, `true`, `false`, `nul`, `tru`, `fals`, `truex`, `nullnull`, `"x"`, `"x`,
	`0`, `-0`, `01`, `-`, `1.`, `.1`, `1.5`, `1e`, `1e+`, `1E-7`, `1e5`, `-12.5e+3`, `+1`, `0x1`, `Infinity`, `NaN`,
	`18446744073709551615`, `18446744073709551616`, `9223372036854775807`, `-9223372036854775808`, `3.0`,
	`"\u0041"`, `"\u00e9"`, `"\ud83d\ude00"`, `"\ud800"`, `"\udc00"`, `"\ud800\u0041"`, `"\ud800\ud800\udc00"`, `"\u12"`,
	`"\x"`, `"\/\\\"\b\f\n\r\t"`, "\"raw\xffbyte\"", "\"\xc3\"", "\"a\x00b\"", "\"a\x1fb\"", "\"tab\tin\"", "\"\x7f\"",
	`{"a":1,"a":2}`, `{"n\u0061me":"x","name":"y"}`, `{"":1}`, `{"a":{"b":{"c":[1,{"d":"e"}]}}}`,
	`{"metadata":{"x":1},"metadata":{"name":"second"}}`, `{"metadata":"x","metadata":{"name":"object"}}`,
	`[{"a":"}"},"]",{"b":"\"{"}]`, strings.Repeat("[", 500) + strings.Repeat("]", 500), strings.Repeat(`{"a":`, 300) + "1" + strings.Repeat("}", 300),
	strings.Repeat("[", 500) + strings.Repeat("]", 499), `{"a":[1,2,{"b":null}],"c":"d"} x`, `[1] [2]`,
}

func TestValidJSONAcceptsWhatEncodingJSONAccepts(t *testing.T) {
	for _, in := range jsonReaderInputs {
		t.Run(in[:min(len(in), 40)], func(t *testing.T) {
			if got, want := validJSON(in), json.Valid([]byte(in)); got != want {
				t.Fatalf("validJSON(%q) = %v; encoding/json says %v", in, got, want)
			}
		})
	}
}

// TestJSONReaderReadsWhatGJSONRead holds the reader to the library the parsers
// used before it, whose results their error messages and values were made of.
func TestJSONReaderReadsWhatGJSONRead(t *testing.T) {
	for _, in := range jsonReaderInputs {
		t.Run(in[:min(len(in), 40)], func(t *testing.T) { checkJSONReaderAgainstGJSON(t, in) })
	}
}

func FuzzJSONValue(f *testing.F) {
	for _, in := range jsonReaderInputs {
		f.Add(in)
	}
	f.Fuzz(checkJSONReaderAgainstGJSON)
}

func checkJSONReaderAgainstGJSON(t *testing.T, in string) {
	doc, ok := ParseJSON([]byte(in))
	if want := json.Valid([]byte(in)); ok != want || gjson.Valid(in) != want {
		t.Fatalf("%q: ParseJSON accepts %v, encoding/json %v, gjson %v", in, ok, want, gjson.Valid(in))
	}
	if !ok {
		return
	}
	checkValueAgainstGJSON(t, doc, gjson.Parse(in))
}

// checkValueAgainstGJSON compares one value, its members one level down and
// the lookups the parsers make.
func checkValueAgainstGJSON(t *testing.T, v JSONValue, want gjson.Result) {
	t.Helper()
	if v.Raw() != strings.TrimSpace(want.Raw) {
		t.Fatalf("raw %q; gjson %q", v.Raw(), want.Raw)
	}
	kinds := []struct {
		name     string
		got, exp bool
	}{
		{"object", v.IsObject(), want.IsObject()},
		{"array", v.IsArray(), want.IsArray()},
		{"string", v.IsString(), want.Type == gjson.String},
		{"number", v.IsNumber(), want.Type == gjson.Number},
		{"bool", v.IsBool(), want.IsBool()},
		{"null", v.IsNull(), want.Type == gjson.Null},
	}
	for _, k := range kinds {
		if k.got != k.exp {
			t.Fatalf("%q: is %s %v; gjson %v", v.Raw(), k.name, k.got, k.exp)
		}
	}
	if v.Str() != want.Str || v.IsBool() && v.Bool() != want.Bool() {
		t.Fatalf("%q: Str %q, Bool %v; gjson %q, %v", v.Raw(), v.Str(), v.Bool(), want.Str, want.Bool())
	}
	if n, ok := v.Uint(); ok != (want.Type == gjson.Number && want.Raw == strconvUint(want.Uint())) || ok && n != want.Uint() {
		t.Fatalf("%q: Uint %d, %v; gjson %d", v.Raw(), n, ok, want.Uint())
	}
	if n, ok := v.Int(); ok != (want.Type == gjson.Number && want.Raw == strconvInt(want.Int())) || ok && n != want.Int() {
		t.Fatalf("%q: Int %d, %v; gjson %d", v.Raw(), n, ok, want.Int())
	}
	var keys, values []string
	want.ForEach(func(k, elem gjson.Result) bool {
		keys, values = append(keys, k.Raw), append(values, elem.Raw)
		return true
	})
	i := 0
	for members := v.Members(); members.Next(); i++ {
		if i >= len(values) || members.Key().Raw() != keys[i] || members.Value().Raw() != values[i] {
			t.Fatalf("%q: member %d is %s:%s; gjson lists %q: %q", v.Raw(), i, members.Key().Raw(), members.Value().Raw(), keys, values)
		}
		// The parsers look up plain names only.
		if name := members.Key().Str(); v.IsObject() && isPlainName(name) {
			if got, exp := v.Get(name), want.Get(gjson.Escape(name)); got.Raw() != exp.Raw {
				t.Fatalf("%q: Get(%q) = %q; gjson %q", v.Raw(), name, got.Raw(), exp.Raw)
			}
			if got, exp := v.getPath(name+".name"), want.Get(gjson.Escape(name)+".name"); got.Raw() != exp.Raw {
				t.Fatalf("%q: getPath(%q) = %q; gjson %q", v.Raw(), name+".name", got.Raw(), exp.Raw)
			}
		}
	}
	if i != len(values) && !(want.Type != gjson.JSON && i == 0) {
		t.Fatalf("%q: %d members; gjson lists %d", v.Raw(), i, len(values))
	}
}

func isPlainName(name string) bool {
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return name != ""
}

func strconvUint(n uint64) string { b, _ := json.Marshal(n); return string(b) }
func strconvInt(n int64) string   { b, _ := json.Marshal(n); return string(b) }

// The parsers' call depth is the schema's: what a document nests inside a
// member they ignore is skipped in a loop, however deep.
func TestParseGroupListSkipsDeeplyNestedUnknownMembers(t *testing.T) {
	nested := strings.Repeat(`{"x":[`, maxJSONNesting/2-3) + strings.Repeat("]}", maxJSONNesting/2-3)
	doc := `{"items":[{"metadata":{"name":"apps","future":` + nested + `},"versions":[{"version":"v1","future":` + nested + `}]}]}`
	list, err := ParseGroupList([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(list.AppendJSON(nil, false)), `{"metadata":{},"items":[{"metadata":{"name":"apps"},"versions":[{"version":"v1"}]}]}`; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}
