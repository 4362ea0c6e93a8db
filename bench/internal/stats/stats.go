// Package stats holds the summary statistics the benchmark harness reports:
// nearest-rank percentiles of latency samples and medians of repeated runs.
package stats

import (
	"math"
	"slices"
)

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// ascending samples: the smallest sample such that at least p percent of all
// samples are less than or equal to it. It never interpolates, so the answer is
// always a latency that was actually observed. It returns NaN for no samples
// or a p outside (0, 100].
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 || !(p > 0 && p <= 100) {
		return math.NaN()
	}
	// The epsilon keeps p*n that should be an integer (e.g. 0.9*10) from
	// rounding up to the next rank through floating-point error.
	rank := int(math.Ceil(p/100*float64(len(sorted)) - 1e-9))
	return sorted[max(rank, 1)-1]
}

// Median returns the median of values (the mean of the middle two for an even
// count), ignoring NaNs; NaN if nothing is left. values is not modified.
func Median(values []float64) float64 {
	finite := make([]float64, 0, len(values))
	for _, v := range values {
		if !math.IsNaN(v) {
			finite = append(finite, v)
		}
	}
	if len(finite) == 0 {
		return math.NaN()
	}
	slices.Sort(finite)
	mid := len(finite) / 2
	if len(finite)%2 == 1 {
		return finite[mid]
	}
	return (finite[mid-1] + finite[mid]) / 2
}

// Ratio is a / b, NaN when either is NaN or b is zero.
func Ratio(a, b float64) float64 {
	if math.IsNaN(a) || math.IsNaN(b) || b == 0 {
		return math.NaN()
	}
	return a / b
}
