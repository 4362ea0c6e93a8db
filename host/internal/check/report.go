package check

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode/utf16"
	"unicode/utf8"

	"sigs.k8s.io/yaml"
)

// Report is the check's result, as -o json and -o yaml print it.
type Report struct {
	// From is the current cluster, To the target.
	From SideReport `json:"from"`
	To   SideReport `json:"to"`
	// Findings are the hazards found, each with its evidence; empty when the
	// check found none.
	Findings []Finding `json:"findings"`
	// Notes say what the check could not know, so that no finding is implied
	// where it did not look (for example field-selector acceptance of a target
	// without a captured table).
	Notes []string   `json:"notes,omitempty"`
	Scan  ScanReport `json:"scan"`
}

// SideReport describes one side.
type SideReport struct {
	Version string `json:"version,omitempty"`
	Source  string `json:"source"`
	// ServedOnlyHere lists the resources only this side serves (apiVersion
	// and resource), whether or not anything uses them.
	ServedOnlyHere []string `json:"servedOnlyHere"`
}

// ScanReport is what the check read to reach its findings.
type ScanReport struct {
	// Resources is how many resources were listed (each group resource once).
	Resources int `json:"resources"`
	Objects   int `json:"objects"`
	// Requests counts every request the check sent.
	Requests int64 `json:"requests"`
	// Seconds is the check's duration.
	Seconds float64 `json:"seconds"`
}

// Impact grades a verdict.
type Impact string

const (
	// Breaks: requests fail or objects are lost or mishandled.
	Breaks Impact = "breaks"
	// AtRisk: harm follows only under a condition the finding names.
	AtRisk Impact = "at-risk"
	// Unaffected: nothing goes wrong in that phase.
	Unaffected Impact = "unaffected"
)

// Verdict is a finding's consequence in one phase of the upgrade.
type Verdict struct {
	Impact Impact `json:"impact"`
	Detail string `json:"detail"`
}

// Finding kinds.
const (
	KindResource          = "Resource"
	KindRemovedAPI        = "RemovedAPIInUse"
	KindNewAPI            = "NewAPIInUse"
	KindGarbageCollection = "GarbageCollection"
	KindNamespaceDeletion = "NamespaceDeletion"
	KindCRDStoredVersion  = "CRDStoredVersion"
	KindCRDShadowed       = "CRDShadowed"
	KindAPIService        = "APIService"
	KindAdmissionCoverage = "AdmissionCoverage"
	KindAdmissionParams   = "AdmissionParamKind"
	KindFieldSelector     = "FieldSelector"
	KindFields            = "FieldsLostOnWrite"
)

// Finding is one hazard: what, why (its evidence, each a fact read from the
// cluster, the target's documents or the request record), and what it does
// during the upgrade (while both versions serve) and after it.
type Finding struct {
	Kind string `json:"kind"`
	// Subject names what the finding is about: a resource, an owner kind, a
	// namespace, a configuration object.
	Subject string `json:"subject"`
	// Summary is the finding in a few words, the table's EVIDENCE column.
	Summary  string   `json:"summary"`
	During   Verdict  `json:"during"`
	After    Verdict  `json:"after"`
	Skewgate string   `json:"skewgate"`
	Evidence []string `json:"evidence"`
	// Clients are the request shapes a running skewgate saw that the hazard
	// concerns (--from-skewgate).
	Clients []Client `json:"clients,omitempty"`
}

// Client is a request shape that would meet a finding's hazard.
type Client struct {
	UserAgent     string   `json:"userAgent"`
	Verb          string   `json:"verb"`
	Resource      string   `json:"resource"`
	FieldSelector []string `json:"fieldSelector,omitempty"`
	Requests      uint64   `json:"requests"`
}

func sortFindings(fs []Finding) {
	order := []string{KindResource, KindRemovedAPI, KindNewAPI, KindGarbageCollection, KindNamespaceDeletion, KindCRDStoredVersion, KindCRDShadowed,
		KindAPIService, KindAdmissionCoverage, KindAdmissionParams, KindFieldSelector, KindFields}
	slices.SortStableFunc(fs, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(slices.Index(order, a.Kind), slices.Index(order, b.Kind)), cmp.Compare(a.Subject, b.Subject))
	})
}

// Output formats.
const (
	OutputTable = "table"
	OutputJSON  = "json"
	OutputYAML  = "yaml"
)

// Write prints the report in format. What the report quotes from the
// cluster, the target or a skewgate's record is printed, never passed on: the
// table quotes a string holding a character a terminal would act on, JSON
// escapes every character that is not printable, YAML every control
// character.
func (r *Report) Write(w io.Writer, format string) error {
	switch format {
	case OutputJSON:
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
		_, err := w.Write(escapeUnprintableJSON(b.Bytes()))
		return err
	case OutputYAML:
		j, err := json.Marshal(r)
		if err != nil {
			return err
		}
		// The YAML parser refuses the C1 controls encoding/json leaves raw;
		// escaped, it reads them, and the emitter quotes and escapes them.
		y, err := yaml.JSONToYAML(escapeUnprintableJSON(j))
		if err != nil {
			return err
		}
		_, err = w.Write(y)
		return err
	}
	return r.writeTable(w)
}

// writeTable prints one line per finding, as kubectl prints objects.
func (r *Report) writeTable(w io.Writer) error {
	if len(r.Findings) == 0 {
		_, err := fmt.Fprintf(w, "No findings: nothing in the cluster meets a difference between %s and %s.\n",
			printable(r.From.label()), printable(r.To.label()))
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "KIND\tSUBJECT\tDURING\tAFTER\tEVIDENCE")
	for _, f := range r.Findings {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", printable(f.Kind), printable(f.Subject), printable(string(f.During.Impact)),
			printable(string(f.After.Impact)), printable(oneLine(f.Summary)))
	}
	return tw.Flush()
}

// writeSummary prints to stderr what the check read, and with the table the
// notes, each on a line of its own.
func (r *Report) writeSummary(w io.Writer, notes bool) {
	fmt.Fprintf(w, "Checked %s against %s: %d resources listed, %d objects, %d requests in %.1fs.\n",
		printable(r.From.Source), printable(r.To.Source), r.Scan.Resources, r.Scan.Objects, r.Scan.Requests, r.Scan.Seconds)
	if notes {
		for _, n := range r.Notes {
			fmt.Fprintf(w, "Note: %s\n", printable(n))
		}
	}
}

// writeError prints why the check could not be made; the error may quote a
// server's answer.
func writeError(w io.Writer, err error) {
	fmt.Fprintf(w, "skewgate check: %s\n", printable(err.Error()))
}

// printable is s as it is when it is valid UTF-8 of printable characters
// (strconv.IsPrint: letters, marks, numbers, punctuation, symbols and the
// ASCII space), and otherwise s quoted as strconv.Quote does, escapes and
// all: a control character, an escape sequence, a line break, a tab (a
// column of the table) or a byte that is not UTF-8 comes out as its escape,
// never as itself.
func printable(s string) string {
	for _, c := range s {
		if c == utf8.RuneError || !strconv.IsPrint(c) {
			return strconv.Quote(s)
		}
	}
	return s
}

// escapeUnprintableJSON writes as \u escapes the characters encoding/json
// leaves as they are although a terminal may act on them: DEL, the C1
// controls and the other characters that are not printable (bidirectional
// overrides, line and paragraph separators). Outside its strings JSON holds
// only printable ASCII and white space, so only strings change, and only in
// how they are spelled.
func escapeUnprintableJSON(data []byte) []byte {
	var out []byte
	for i := 0; i < len(data); {
		c, size := utf8.DecodeRune(data[i:])
		if c < utf8.RuneSelf && c != 0x7f || c != utf8.RuneError && strconv.IsPrint(c) {
			if out != nil {
				out = append(out, data[i:i+size]...)
			}
			i += size
			continue
		}
		if out == nil {
			out = append(make([]byte, 0, len(data)+64), data[:i]...)
		}
		if c > 0xffff {
			hi, lo := utf16.EncodeRune(c)
			out = fmt.Appendf(out, `\u%04x\u%04x`, hi, lo)
		} else {
			out = fmt.Appendf(out, `\u%04x`, c)
		}
		i += size
	}
	if out == nil {
		return data
	}
	return out
}

func (s SideReport) label() string {
	if s.Version != "" {
		return s.Version
	}
	return s.Source
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
