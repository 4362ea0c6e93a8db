// Package metricstest reads a collector's metrics as /metrics serves them, and
// checks them against their definitions, for the tests of the packages that
// export metrics.
package metricstest

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

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
