// Package metricstest reads a collector's metrics as /metrics serves them, and
// checks them against their definitions, for the tests of the packages that
// export metrics.
package metricstest

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/skewgate/skewgate/plugin/metricdef"
)

// Exposition is every metric c collects in the Prometheus text format, as
// checked by a pedantic registry.
func Exposition(c prometheus.Collector) (string, error) {
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		return "", err
	}
	families, err := reg.Gather()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, mf := range families {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			return "", err
		}
	}
	return b.String(), nil
}

// Endpoint reads what the /metrics endpoint at url serves and checks it:
// every metric is skewgate's, as metricdef defines it (Defined), or
// Prometheus' own (go_, process_). served names every metric; err is the
// failed read or every mistake.
func Endpoint(url string) (served map[string]bool, err error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, err
	}
	errs := []error{Defined(prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return slices.Collect(maps.Values(families)), nil }))}
	served = map[string]bool{}
	for name := range families {
		served[name] = true
		if !strings.HasPrefix(name, "skewgate_") && !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
			errs = append(errs, fmt.Errorf("%s: neither skewgate's nor Prometheus' own", name))
		}
	}
	return served, errors.Join(errs...)
}

// Defined checks every skewgate_ metric g gathers against its definition in
// metricdef: its name is defined, with the same type, help and label names.
func Defined(g prometheus.Gatherer) error {
	families, err := g.Gather()
	if err != nil {
		return err
	}
	var errs []error
	for _, mf := range families {
		name := mf.GetName()
		if !strings.HasPrefix(name, "skewgate_") {
			continue
		}
		def, ok := metricdef.Lookup(name)
		if !ok {
			errs = append(errs, fmt.Errorf("%s is not defined in metricdef", name))
			continue
		}
		if got := strings.ToLower(mf.GetType().String()); got != string(def.Type) {
			errs = append(errs, fmt.Errorf("%s is exported as a %s, defined as a %s", name, got, def.Type))
		}
		if mf.GetHelp() != def.Help {
			errs = append(errs, fmt.Errorf("%s is exported with help %q, defined with %q", name, mf.GetHelp(), def.Help))
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName())
			}
			if !sameSet(labels, def.Labels) {
				errs = append(errs, fmt.Errorf("%s is exported with labels %v, defined with %v", name, labels, def.Labels))
				break
			}
		}
	}
	return errors.Join(errs...)
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
