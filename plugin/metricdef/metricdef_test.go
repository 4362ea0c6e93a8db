package metricdef

import (
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var (
	nameSyntax  = regexp.MustCompile(`^skewgate_[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	labelSyntax = regexp.MustCompile(`^[a-z][a-z_]*$`)
	// units are the base units a name may carry, Prometheus' own.
	units = []string{"seconds", "bytes"}
)

// exporterPrefixes are the prefixes of each exporter's metrics; skewgate
// serve's own take the bare prefix.
var exporterPrefixes = map[Exporter]string{
	Plugin: "skewgate_plugin_", Gateway: "skewgate_gateway_", WasmHost: "skewgate_wasm_", Controller: "skewgate_controller_",
	XDS: "skewgate_xds_", Certificates: "skewgate_certificate_", Serve: "skewgate_",
}

func TestEveryDefinitionFollowsThePrometheusNamingConventions(t *testing.T) {
	seen := map[string]bool{}
	for _, m := range All {
		if seen[m.Name] {
			t.Errorf("%s is defined twice", m.Name)
		}
		seen[m.Name] = true
		if !nameSyntax.MatchString(m.Name) {
			t.Errorf("%s: not skewgate_ and lower-case words", m.Name)
		}
		if prefix, ok := exporterPrefixes[m.Exporter]; !ok || !strings.HasPrefix(m.Name, prefix) {
			t.Errorf("%s: exported by %q, so named %q…", m.Name, m.Exporter, prefix)
		}
		if isCounter, total := m.Type == Counter, strings.HasSuffix(m.Name, "_total"); isCounter != total {
			t.Errorf("%s: a %s; counters, and only they, end in _total", m.Name, m.Type)
		}
		base := strings.TrimSuffix(m.Name, "_total")
		for _, unit := range units {
			// A unit is the name's last word: _seconds_total, never _seconds_count.
			if strings.Contains(base, "_"+unit+"_") {
				t.Errorf("%s: the unit %s is not the last word", m.Name, unit)
			}
		}
		if m.Type == Histogram {
			if !slices.ContainsFunc(units, func(u string) bool { return strings.HasSuffix(m.Name, "_"+u) }) {
				t.Errorf("%s: a histogram names its unit", m.Name)
			}
			if len(m.Buckets) == 0 || !slices.IsSorted(m.Buckets) {
				t.Errorf("%s: buckets %v; want some, ascending", m.Name, m.Buckets)
			}
		} else if m.Buckets != nil {
			t.Errorf("%s: a %s has no buckets", m.Name, m.Type)
		}
		if m.Exporter == Plugin && len(m.Labels) > 0 {
			t.Errorf("%s: the proxy-wasm ABI defines metrics without labels", m.Name)
		}
		for _, l := range m.Labels {
			if !labelSyntax.MatchString(l) {
				t.Errorf("%s: label %q is not lower-case words", m.Name, l)
			}
		}
		if m.Help == "" || !strings.HasSuffix(m.Help, ".") || strings.Contains(m.Help, "\n") {
			t.Errorf("%s: help %q; want one or more sentences on one line", m.Name, m.Help)
		}
	}
}

// All lists every definition of the package: one left out would be exported
// but missing from the metrics reference, the dashboards' checks and Lookup.
func TestAllHoldsEveryDefinition(t *testing.T) {
	file, err := parser.ParseFile(token.NewFileSet(), "metricdef.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var defined []string
	for _, decl := range file.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.VAR {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, value := range vs.Values {
				if lit, ok := value.(*ast.CompositeLit); ok {
					if typ, ok := lit.Type.(*ast.Ident); ok && typ.Name == "Metric" {
						defined = append(defined, vs.Names[i].Name)
					}
				}
			}
		}
	}
	var listed []string
	for _, decl := range file.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.VAR {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			if vs.Names[0].Name != "All" {
				continue
			}
			for _, elt := range vs.Values[0].(*ast.CompositeLit).Elts {
				listed = append(listed, elt.(*ast.UnaryExpr).X.(*ast.Ident).Name)
			}
		}
	}
	slices.Sort(defined)
	slices.Sort(listed)
	if len(defined) == 0 || !slices.Equal(defined, listed) {
		t.Errorf("definitions %v\nAll lists %v", defined, listed)
	}
}

func TestLookupFindsEveryDefinitionByItsName(t *testing.T) {
	for _, m := range All {
		if got, ok := Lookup(m.Name); !ok || got != m {
			t.Errorf("Lookup(%q) = %v, %v", m.Name, got, ok)
		}
	}
	if _, ok := Lookup("skewgate_rejected_configurations_total"); ok {
		t.Error("Lookup found a name no definition has")
	}
}
