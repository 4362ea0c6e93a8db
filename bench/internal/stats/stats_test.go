package stats

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestPercentileIsNearestRank(t *testing.T) {
	ten := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	cases := []struct {
		name    string
		samples []float64
		p       float64
		want    float64
	}{
		{"p50 of ten is the fifth", ten, 50, 5},
		{"p90 of ten is the ninth", ten, 90, 9},
		{"p99 of ten is the largest", ten, 99, 10},
		{"p100 is the largest", ten, 100, 10},
		{"tiny p is the smallest", ten, 0.001, 1},
		{"p50 of one", []float64{42}, 50, 42},
		{"p50 of two is the lower", []float64{1, 2}, 50, 1},
		{"p51 of two is the upper", []float64{1, 2}, 51, 2},
		{"p99 of a hundred", seq(100), 99, 99},
		{"p99.9 of a thousand", seq(1000), 99.9, 999},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Percentile(c.samples, c.p); got != c.want {
				t.Errorf("Percentile(%d samples, %v) = %v; want %v", len(c.samples), c.p, got, c.want)
			}
		})
	}
}

func seq(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = float64(i + 1)
	}
	return s
}

func TestPercentileIsUndefinedWithoutSamplesOrOutOfRange(t *testing.T) {
	for _, c := range []struct {
		name    string
		samples []float64
		p       float64
	}{
		{"no samples", nil, 50},
		{"zero", seq(3), 0},
		{"negative", seq(3), -1},
		{"above 100", seq(3), 100.5},
		{"NaN", seq(3), math.NaN()},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Percentile(c.samples, c.p); !math.IsNaN(got) {
				t.Errorf("Percentile = %v; want NaN", got)
			}
		})
	}
}

// At least p percent of the samples are at or below the p-th percentile, and
// fewer than p percent are strictly below it.
func TestPercentileBoundsTheShareOfSamplesBelowIt(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		samples := make([]float64, 1+rng.IntN(500))
		for i := range samples {
			samples[i] = float64(rng.IntN(50))
		}
		slices.Sort(samples)
		p := 100 * (1 - rng.Float64())
		v := Percentile(samples, p)
		atOrBelow, below := 0, 0
		for _, s := range samples {
			if s <= v {
				atOrBelow++
			}
			if s < v {
				below++
			}
		}
		n := float64(len(samples))
		if float64(atOrBelow) < p/100*n-1e-6 || float64(below) >= p/100*n+1e-6 {
			t.Fatalf("p%.3f of %d samples = %v: %d at or below, %d below", p, len(samples), v, atOrBelow, below)
		}
	}
}

func TestMedian(t *testing.T) {
	cases := []struct {
		name   string
		values []float64
		want   float64
	}{
		{"odd count", []float64{5, 1, 3}, 3},
		{"even count averages the middle two", []float64{4, 1, 3, 2}, 2.5},
		{"NaNs are ignored", []float64{math.NaN(), 7, math.NaN()}, 7},
		{"single", []float64{9}, 9},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := slices.Clone(c.values)
			if got := Median(in); got != c.want {
				t.Errorf("Median(%v) = %v; want %v", c.values, got, c.want)
			}
			if !slices.EqualFunc(in, c.values, func(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }) {
				t.Errorf("Median reordered its input: %v", in)
			}
		})
	}
	if got := Median(nil); !math.IsNaN(got) {
		t.Errorf("Median(nil) = %v; want NaN", got)
	}
	if got := Median([]float64{math.NaN()}); !math.IsNaN(got) {
		t.Errorf("Median(NaN) = %v; want NaN", got)
	}
}

func TestRatio(t *testing.T) {
	cases := []struct {
		name string
		a, b float64
		want float64
	}{
		{"plain", 3, 2, 1.5},
		{"zero numerator", 0, 2, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Ratio(c.a, c.b); got != c.want {
				t.Errorf("Ratio(%v, %v) = %v; want %v", c.a, c.b, got, c.want)
			}
		})
	}
	for _, c := range [][2]float64{{1, 0}, {math.NaN(), 1}, {1, math.NaN()}} {
		if got := Ratio(c[0], c[1]); !math.IsNaN(got) {
			t.Errorf("Ratio(%v, %v) = %v; want NaN", c[0], c[1], got)
		}
	}
}
