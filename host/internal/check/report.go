package check

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

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

// Write prints the report in format.
func (r *Report) Write(w io.Writer, format string) error {
	switch format {
	case OutputJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	case OutputYAML:
		j, err := json.Marshal(r)
		if err != nil {
			return err
		}
		y, err := yaml.JSONToYAML(j)
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
		_, err := fmt.Fprintf(w, "No findings: nothing in the cluster meets a difference between %s and %s.\n", r.From.label(), r.To.label())
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "KIND\tSUBJECT\tDURING\tAFTER\tEVIDENCE")
	for _, f := range r.Findings {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", f.Kind, f.Subject, f.During.Impact, f.After.Impact, oneLine(f.Summary))
	}
	return tw.Flush()
}

func (s SideReport) label() string {
	if s.Version != "" {
		return s.Version
	}
	return s.Source
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
