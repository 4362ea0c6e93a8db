package check

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"sigs.k8s.io/yaml"

	"github.com/skewgate/skewgate/host/internal/gateway"
)

// unprintableInputs are the characters a terminal acts on or that break a
// line or a column: every C0 control (newline and tab among them), DEL,
// every C1 control, the line and paragraph separators, a bidirectional
// override, and bytes that are not UTF-8.
func unprintableInputs() map[string]string {
	in := map[string]string{}
	for c := rune(0); c < 0x20; c++ {
		in[fmt.Sprintf("C0 %#02x", c)] = string(c)
	}
	in["DEL"] = "\x7f"
	for c := rune(0x80); c < 0xa0; c++ {
		in[fmt.Sprintf("C1 %U", c)] = string(c)
	}
	in["line separator"] = "\u2028"
	in["paragraph separator"] = "\u2029"
	in["right-to-left override"] = "\u202e"
	in["lone byte 0xff"] = "\xff"
	in["truncated sequence"] = "\xc3"
	in["encoded surrogate"] = "\xed\xa0\x80"
	in["escape sequences"] = "\x1b]0;owned\x07\x1b[2J\x1b[1;31m"
	in["forged row"] = "\nFieldSelector   v1 pods spec.nodeName   breaks   breaks   forged"
	return in
}

// rawUnprintable returns the first character of out that is not UTF-8, not
// printable and not a line's end, if any.
func rawUnprintable(out string) (string, bool) {
	return rawCharacter(out, func(c rune) bool { return !strconv.IsPrint(c) })
}

// rawControl returns the first byte of out that is not UTF-8, or control
// character (C0 but a line's end, DEL, C1), if any: YAML's emitter writes the
// other characters that are not printable as they are.
func rawControl(out string) (string, bool) {
	return rawCharacter(out, func(c rune) bool { return c < 0x20 || c >= 0x7f && c < 0xa0 })
}

func rawCharacter(out string, bad func(rune) bool) (string, bool) {
	for i, c := range out {
		if c == '\n' {
			continue
		}
		if c == utf8.RuneError && !strings.HasPrefix(out[i:], "\uFFFD") || bad(c) {
			end := min(i+8, len(out))
			return strconv.Quote(out[i:end]), true
		}
	}
	return "", false
}

// hostileReport carries s in every string a text output prints.
func hostileReport(s string) *Report {
	return &Report{
		From: SideReport{Version: "v1.35.4" + s, Source: "kube-apiserver v1.35.4" + s + " at https://a (--kubeconfig)"},
		To:   SideReport{Source: "documents of v1.36.3" + s},
		Findings: []Finding{{
			Kind: KindFieldSelector + s, Subject: "v1 pods spec.nodeName" + s, Summary: "v1.35.4" + s + " refuses it, v1.36.3 accepts it; 1 user",
			During: Verdict{Breaks + Impact(s), "detail" + s}, After: Verdict{Unaffected, "detail"},
			Evidence: []string{"evidence" + s}, Clients: []Client{{UserAgent: "agent" + s, Verb: "list", Resource: "v1 pods", Requests: 1}},
		}},
		Notes: []string{"field selectors not compared: v1 pods spec.nodeName" + s},
	}
}

// Every text output of the check (the table with findings and without, the
// summary and notes on stderr, an error) prints each character it was sent
// that is not printable as an escape, on the lines it would have had
// anyway; JSON and YAML escape them too and decode to what was sent.
func TestTextOutputEscapesEveryUnprintableCharacterItWasSent(t *testing.T) {
	for name, s := range unprintableInputs() {
		t.Run(name, func(t *testing.T) {
			r := hostileReport(s)
			var table, none, summary, failure, asJSON, asYAML bytes.Buffer
			if err := r.Write(&table, OutputTable); err != nil {
				t.Fatal(err)
			}
			empty := *r
			empty.Findings = nil
			if err := empty.Write(&none, OutputTable); err != nil {
				t.Fatal(err)
			}
			r.writeSummary(&summary, true)
			writeError(&failure, errors.New("GET /api answered 500: "+s))
			if err := r.Write(&asJSON, OutputJSON); err != nil {
				t.Fatal(err)
			}
			if err := r.Write(&asYAML, OutputYAML); err != nil {
				t.Fatal(err)
			}
			for _, out := range []struct {
				name  string
				text  string
				lines int // 0: any number
			}{
				{"table", table.String(), 2},
				{"no findings", none.String(), 1},
				{"summary and notes", summary.String(), 2},
				{"error", failure.String(), 1},
				{"json", asJSON.String(), 0},
				{"yaml", asYAML.String(), 0},
			} {
				raw, found := rawUnprintable(out.text)
				if out.name == "yaml" {
					raw, found = rawControl(out.text)
				}
				if found {
					t.Errorf("%s prints %s raw:\n%q", out.name, raw, out.text)
				}
				if n := strings.Count(out.text, "\n"); out.lines > 0 && n != out.lines {
					t.Errorf("%s has %d lines, want %d:\n%s", out.name, n, out.lines, out.text)
				}
			}
			if !utf8.ValidString(s) {
				return // JSON holds U+FFFD in place of what is not UTF-8
			}
			var fromJSON, fromYAML Report
			if err := json.Unmarshal(asJSON.Bytes(), &fromJSON); err != nil || fromJSON.Findings[0].Subject != r.Findings[0].Subject {
				t.Errorf("json decodes to subject %q (%v), want %q", fromJSON.Findings[0].Subject, err, r.Findings[0].Subject)
			}
			if err := yaml.Unmarshal(asYAML.Bytes(), &fromYAML); err != nil || fromYAML.Findings[0].Clients[0].UserAgent != r.Findings[0].Clients[0].UserAgent {
				t.Errorf("yaml decodes to user agent %q (%v), want %q", fromYAML.Findings[0].Clients[0].UserAgent, err, r.Findings[0].Clients[0].UserAgent)
			}
		})
	}
}

// Text a terminal prints as it is stays as it is: only strings that need it
// are quoted.
func TestPrintableLeavesPrintableTextAsItIs(t *testing.T) {
	for _, s := range []string{"", "v1 services spec.clusterIP", `C:\path "quoted"`, "Größe ≥ 1 – 日本語", "kubelet/v1.31.4 list 2 times"} {
		if got := printable(s); got != s {
			t.Errorf("printable(%q) = %q, want it unchanged", s, got)
		}
	}
	if got := printable("spec.\x1b[2Jx\n"); got != `"spec.\x1b[2Jx\n"` {
		t.Errorf("printable of an escape sequence: %s", got)
	}
	var table bytes.Buffer
	r := hostileReport("")
	if err := r.Write(&table, OutputTable); err != nil || !strings.Contains(table.String(), "v1 pods spec.nodeName   ") {
		t.Errorf("table of printable text (%v):\n%s", err, table.String())
	}
}

// hostileSkewgate serves a request record as a compromised or older
// skewgate could: labels and user agents of anything a client sent.
func hostileSkewgate(t *testing.T, s string) string {
	shapes := gateway.RequestShapes{Limit: 2048, Shapes: []gateway.RequestShape{
		{Version: "v1", Resource: "services", Verb: "list", FieldSelector: []string{"spec.type" + s, "(invalid)"}, UserAgent: "lb-controller/v0.3.1" + s, Count: 3},
		{Group: "coordination.k8s.io", Version: "v1alpha2", Resource: "leasecandidates", Verb: "list", UserAgent: "election-sidecar/v2" + s, Count: 1},
	}}
	body, err := json.Marshal(shapes)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// `skewgate check --from-skewgate` prints what it read, never what it was
// sent: a record holding escape sequences and line breaks in its labels and
// user agents forges no row, no note and no terminal command, in any output.
func TestCheckPrintsAHostileRequestRecordWithoutItsControlCharacters(t *testing.T) {
	const hostile = "\x1b]0;owned\x07\x1b[2J\x1b[1;31m\nFieldSelector   v1 pods spec.nodeName   breaks\u009b31m\xff"
	f := seededCluster(t)
	f.refusedSelectors["/api/v1/services"] = []string{"spec.type"}
	skewgate := hostileSkewgate(t, hostile)
	for _, output := range []string{OutputTable, OutputJSON, OutputYAML} {
		code, stdout, stderr := run(t, "--kubeconfig", f.kubeconfig(fakeToken), "--to", "v1.36.3", "--from-skewgate", skewgate, "-o", output)
		if code != ExitFindings {
			t.Fatalf("-o %s: exit %d\n%s", output, code, stderr)
		}
		for name, text := range map[string]string{"stdout": stdout, "stderr": stderr} {
			raw, found := rawUnprintable(text)
			if output == OutputYAML {
				raw, found = rawControl(text)
			}
			if found {
				t.Errorf("-o %s: %s prints %s raw:\n%s", output, name, raw, text)
			}
			if strings.Contains(text, "spec.type") {
				t.Errorf("-o %s: %s names the label that is no field path:\n%s", output, name, text)
			}
		}
		if output == OutputTable && strings.Count(stdout, "\n") != len(seededFindings)+1 {
			t.Errorf("table of %d lines, want %d:\n%s", strings.Count(stdout, "\n"), len(seededFindings)+1, stdout)
		}
	}
}

// With the debug handlers off, skewgate serve answers /debug/requests 404:
// the check says which flag serves it.
func TestFromSkewgateWithoutDebugHandlersNamesTheFlag(t *testing.T) {
	f := newFakeServer(t, "v1.35.4", "default")
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	code, _, stderr := run(t, "--kubeconfig", f.kubeconfig(fakeToken), "--to", "v1.36.3", "--from-skewgate", srv.URL)
	if code != ExitError || !strings.Contains(stderr, "GET /debug/requests answered 404 Not Found: skewgate serve serves it only with --debug-handlers") {
		t.Errorf("exit %d: %s", code, stderr)
	}
}
