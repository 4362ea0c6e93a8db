// Package monitoring holds the Prometheus alerting rules and the Grafana
// dashboard shipped for skewgate; its tests read them as Prometheus and
// Grafana would and check every metric they name against metricdef.
package monitoring

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/skewgate/skewgate/plugin/metricdef"
)

const (
	rulesFile     = "skewgate-alerts.yaml"
	dashboardFile = "skewgate-dashboard.json"
)

var promql = parser.NewParser(parser.Options{})

// targetLabels are the labels Prometheus adds to every scraped series.
var targetLabels = []string{"job", "instance"}

// histogramSeries are the suffixes of a histogram's series.
var histogramSeries = []string{"_bucket", "_sum", "_count"}

// metricsIn parses expr and checks that every series it selects is one of a
// metric metricdef defines, and that every label it matches on is the
// metric's own or a target label; it returns the metrics' names.
func metricsIn(expr string) ([]string, []error) {
	parsed, err := promql.ParseExpr(expr)
	if err != nil {
		return nil, []error{fmt.Errorf("%q: %w", expr, err)}
	}
	var names []string
	var errs []error
	parser.Inspect(parsed, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		def, labels := lookupSeries(vs.Name)
		if def == nil {
			errs = append(errs, fmt.Errorf("%s is no metric metricdef defines", vs.Name))
			return nil
		}
		names = append(names, def.Name)
		for _, m := range vs.LabelMatchers {
			if m.Name != model.MetricNameLabel && !slices.Contains(labels, m.Name) {
				errs = append(errs, fmt.Errorf("%s has no label %q", vs.Name, m.Name))
			}
		}
		return nil
	})
	return names, errs
}

// checkMetrics is metricsIn, its errors reported as where's.
func checkMetrics(t *testing.T, where, expr string) []string {
	t.Helper()
	names, errs := metricsIn(expr)
	for _, err := range errs {
		t.Errorf("%s: %v", where, err)
	}
	return names
}

// lookupSeries returns the definition of the metric a series belongs to and
// the labels the series can carry.
func lookupSeries(series string) (*metricdef.Metric, []string) {
	if def, ok := metricdef.Lookup(series); ok {
		return def, append(slices.Clone(def.Labels), targetLabels...)
	}
	for _, suffix := range histogramSeries {
		if def, ok := metricdef.Lookup(strings.TrimSuffix(series, suffix)); ok && def.Type == metricdef.Histogram && strings.HasSuffix(series, suffix) {
			labels := append(slices.Clone(def.Labels), targetLabels...)
			if suffix == "_bucket" {
				labels = append(labels, "le")
			}
			return def, labels
		}
	}
	return nil, nil
}

func loadRules(t *testing.T) *rulefmt.RuleGroups {
	t.Helper()
	groups, errs := rulefmt.ParseFile(rulesFile, false, model.UTF8Validation, promql, nil)
	for _, err := range errs {
		t.Error(err)
	}
	if groups == nil || len(groups.Groups) == 0 {
		t.Fatalf("%s holds no rule group", rulesFile)
	}
	return groups
}

func TestAlertingRulesParseAndNameOnlyDefinedMetrics(t *testing.T) {
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("%s: a recording rule (%s); the file ships alerts", g.Name, r.Record)
				continue
			}
			if len(checkMetrics(t, r.Alert, r.Expr)) == 0 {
				t.Errorf("%s: %q names no metric", r.Alert, r.Expr)
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s: severity %q; want critical or warning", r.Alert, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: want a summary and a description", r.Alert)
			}
		}
	}
}

// What operators watch during an upgrade has an alert: servers unhealthy,
// 503s for skewed APIs, rejected configurations or NACKs, certificate reload
// failures, API servers that differ from the cluster's.
func TestEveryUpgradeSignalHasAnAlert(t *testing.T) {
	alerted := map[string]bool{}
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			for _, name := range checkMetrics(t, r.Alert, r.Expr) {
				alerted[name] = true
			}
		}
	}
	for _, def := range []*metricdef.Metric{
		&metricdef.ControllerServersHealthy,
		&metricdef.PluginUnavailableResponses,
		&metricdef.PluginConfigurationRejections, &metricdef.ControllerPublishErrors, &metricdef.XDSNacks,
		&metricdef.CertificateReloadFailures,
		&metricdef.ControllerMembershipDifferences,
	} {
		if !alerted[def.Name] {
			t.Errorf("no alert reads %s", def.Name)
		}
	}
}

// A membership that differs from the cluster's for a moment is no news: a
// kube-apiserver takes its endpoint out of the kubernetes Service while it
// restarts, and a joined server is announced before anyone lists it. Only one
// that lasts longer than an upgrade's restarts is.
func TestMembershipAlertOutlastsARestart(t *testing.T) {
	const restart = 5 * time.Minute
	found := false
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			if !slices.Contains(checkMetrics(t, r.Alert, r.Expr), metricdef.ControllerMembershipDifferences.Name) {
				continue
			}
			found = true
			if time.Duration(r.For) <= restart {
				t.Errorf("%s fires after %v; want longer than a restart, %v", r.Alert, time.Duration(r.For), restart)
			}
		}
	}
	if !found {
		t.Errorf("no alert reads %s", metricdef.ControllerMembershipDifferences.Name)
	}
}

// dashboard is the part of a Grafana dashboard the test reads.
type dashboard struct {
	UID, Title string
	Templating struct {
		List []struct{ Name, Type, Query string }
	}
	Panels []panel
}

type panel struct {
	ID         int
	Type       string
	Title      string
	Datasource *datasource
	Targets    []struct {
		RefID      string `json:"refId"`
		Datasource *datasource
		Expr       string
	}
	Panels []panel // a collapsed row's
}

type datasource struct{ Type, UID string }

// grafanaVariables are what Grafana substitutes in queries before Prometheus
// reads them, with values of the same syntax.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

func TestDashboardQueriesParseAndNameOnlyDefinedMetrics(t *testing.T) {
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q; want both", d.UID, d.Title)
	}
	if len(d.Templating.List) != 1 || d.Templating.List[0].Type != "datasource" || d.Templating.List[0].Query != "prometheus" {
		t.Errorf("templating %+v; want one Prometheus data source variable", d.Templating.List)
	}
	ids := map[int]bool{}
	var queries int
	var walk func([]panel)
	walk = func(panels []panel) {
		for _, p := range panels {
			if ids[p.ID] {
				t.Errorf("panel id %d used twice", p.ID)
			}
			ids[p.ID] = true
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Title == "" || p.Datasource == nil || p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
				t.Errorf("panel %d %q: want a title, the data source variable and queries", p.ID, p.Title)
			}
			for _, target := range p.Targets {
				queries++
				where := p.Title + " " + target.RefID
				if target.Datasource == nil || target.Datasource.UID != "${datasource}" {
					t.Errorf("%s: not on the data source variable", where)
				}
				if len(checkMetrics(t, where, grafanaVariables.Replace(target.Expr))) == 0 {
					t.Errorf("%s: %q names no metric", where, target.Expr)
				}
			}
		}
	}
	walk(d.Panels)
	if queries == 0 {
		t.Error("the dashboard has no query")
	}
}

// A name or a label no definition has fails the check, so the checks above
// do check.
func TestAMetricOrLabelNoDefinitionHasIsReported(t *testing.T) {
	for _, expr := range []string{`rate(skewgate_rejected_configurations_total[5m])`, `skewgate_gateway_requests_total{reason="x"}`,
		`skewgate_gateway_retries_total_bucket`} {
		if _, errs := metricsIn(expr); len(errs) == 0 {
			t.Errorf("%s passed", expr)
		}
	}
}
