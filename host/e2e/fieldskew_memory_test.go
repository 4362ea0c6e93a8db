package e2e

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skewgate/skewgate/host/internal/certfile"
	"github.com/skewgate/skewgate/host/internal/controller"
	"github.com/skewgate/skewgate/host/internal/metricstest"
	"github.com/skewgate/skewgate/host/testcluster"
)

// Bounds of what comparing the schemas of the field-skew cluster's three servers may cost the
// controller in heap: what it keeps (the reduced documents, and everything else the controller
// holds), and the most it holds at once while fetching and reducing.
const (
	maxSchemaComparisonRetained = 24 << 20
	maxSchemaComparisonPeak     = 64 << 20
)

// TestControllerComparesSchemasWithinBoundedMemory runs the controller in this process against a
// 1.30.14 server and two 1.31.4 servers and measures the heap from before it starts until its
// snapshot carries the field-level knowledge: the documents it fetched (one per hash, of the
// group versions whose hashes differ), their bytes, the time it took, and the heap it retains and
// peaks at.
func TestControllerComparesSchemasWithinBoundedMemory(t *testing.T) {
	cluster := sharedFieldSkew.get(t)
	prepareFieldSkew(t, cluster)
	logger := slog.New(slog.DiscardHandler)
	files := certfile.NewWatcher(logger, time.Hour)
	pkiFiles := cluster.PKI().Files
	peerCA, err := files.CABundle("--peer-ca-file", pkiFiles.CACert)
	if err != nil {
		t.Fatal(err)
	}
	frontProxy, err := files.KeyPair("--proxy-client-cert-file", pkiFiles.FrontProxyClientCert, pkiFiles.FrontProxyClientKey)
	if err != nil {
		t.Fatal(err)
	}
	var urls []string
	for _, s := range cluster.Servers() {
		urls = append(urls, s.URL)
	}
	oldCluster := clusterName(cluster.Server(fieldsOld).URL)
	var knowing atomic.Bool
	c, err := controller.New(controller.Options{
		StaticServers: urls, PeerCA: peerCA, FrontProxyCertificate: frontProxy, ServerName: testcluster.ServingServerName,
		PollInterval: gatewayPollInterval, Logger: logger,
		OnSnapshot: func(_ context.Context, p controller.Published) error {
			for _, s := range p.Snapshot.Servers {
				if s.Cluster == oldCluster && slices.Contains(s.MissingFields["coordination.k8s.io/v1/leases"], "spec.strategy") &&
					s.FieldSelectors["fields.skewgate.test/v1/widgets"] != nil {
					knowing.Store(true)
				}
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var peak atomic.Uint64
	sampling, stopSampling := context.WithCancel(context.Background())
	var sampler sync.WaitGroup
	sampler.Go(func() {
		var m runtime.MemStats
		for sampling.Err() == nil {
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > peak.Load() {
				peak.Store(m.HeapAlloc)
			}
			time.Sleep(2 * time.Millisecond)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	eventually(t, "the field-level knowledge in the controller's snapshot", fieldSkewWaitAt, 10*time.Millisecond, func() error {
		if !knowing.Load() {
			return errNotYet
		}
		return nil
	})
	elapsed := time.Since(start)
	// A few more polls: nothing is fetched again.
	fetched := metricSample(t, c, "skewgate_controller_openapi_documents_fetched_total")
	time.Sleep(4 * gatewayPollInterval)
	stopSampling()
	sampler.Wait()
	runtime.GC()
	runtime.ReadMemStats(&after)

	if again := metricSample(t, c, "skewgate_controller_openapi_documents_fetched_total"); again != fetched {
		t.Errorf("%v documents fetched by the time the knowledge was published, %v after more polls: unchanged documents were fetched again", fetched, again)
	}
	bytes := metricSample(t, c, "skewgate_controller_openapi_document_bytes_total")
	held := metricSample(t, c, "skewgate_controller_openapi_documents")
	paths := metricSample(t, c, "skewgate_controller_openapi_field_paths")
	retained := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	peakGrowth := int64(peak.Load()) - int64(before.HeapAlloc)
	t.Logf("%s: %v documents fetched (%.1f MiB), %v held with %v field paths; knowledge published after %s; "+
		"heap %.1f MiB before, %.1f MiB after (+%.1f MiB), peak %.1f MiB (+%.1f MiB)",
		versionsOf(cluster), fetched, bytes/(1<<20), held, paths, elapsed.Round(time.Millisecond),
		mib(before.HeapAlloc), mib(after.HeapAlloc), float64(retained)/(1<<20), mib(peak.Load()), float64(peakGrowth)/(1<<20))
	if fetched == 0 || held == 0 || held > fetched {
		t.Errorf("%v documents fetched, %v held", fetched, held)
	}
	if retained > maxSchemaComparisonRetained || peakGrowth > maxSchemaComparisonPeak {
		t.Errorf("the controller retains %d bytes more heap (bound %d) and peaks %d bytes above where it started (bound %d)",
			retained, maxSchemaComparisonRetained, peakGrowth, maxSchemaComparisonPeak)
	}
}

var errNotYet = errors.New("not yet")

func mib(n uint64) float64 { return float64(n) / (1 << 20) }

// metricSample reads an unlabelled sample of the controller's metrics.
func metricSample(t *testing.T, c *controller.Controller, name string) float64 {
	t.Helper()
	out, err := metricstest.Exposition(c)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if sample, value, ok := strings.Cut(sc.Text(), " "); ok && sample == name {
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("no sample %s", name)
	return 0
}
