package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"

	"github.com/skewgate/skewgate/bench/internal/report"
	"github.com/skewgate/skewgate/discovery"
)

// startNodeLocalSkewgate starts skewgate in node-local mode in front of
// serverOld, with the two other servers as its peers, timing how long it takes
// to become ready: first with an empty compilation cache, then, stopped and
// started again, with the cache the first start filled. The second one serves
// the node-local path.
func (e *macroEnv) startNodeLocalSkewgate(ctx context.Context) error {
	cache := filepath.Join(e.cluster.Dir(), "node-local-compilation-cache")
	if err := os.Mkdir(cache, 0o755); err != nil {
		return err
	}
	servers := []string{"--local-apiserver=" + e.serverURL(serverOld),
		"--apiserver=" + e.serverURL(serverNew), "--apiserver=" + e.serverURL(serverExtra),
		"--compilation-cache-dir=" + cache}
	fmt.Fprintln(e.cfg.progress, "skewbench: starting node-local skewgate serve with an empty compilation cache")
	// A retry on a taken port still starts cold: skewgate binds its listeners
	// before it compiles the plugin.
	cold, err := e.startSkewgate(ctx, "skewgate-node-local-cold", servers)
	if err != nil {
		return err
	}
	e.stop(cold.proc)
	if entries, err := os.ReadDir(cache); err != nil || len(entries) == 0 {
		return fmt.Errorf("compilation cache %s empty after the first start (%v): the restart would not be warm", cache, err)
	}
	fmt.Fprintln(e.cfg.progress, "skewbench: restarting node-local skewgate serve with the compilation cache it filled")
	warm, err := e.startSkewgate(ctx, "skewgate-node-local", servers)
	if err != nil {
		return err
	}
	e.footprint.ReadyCold, e.footprint.ReadyWarm = cold.readyAfter, warm.readyAfter
	fmt.Fprintf(e.cfg.progress, "skewbench: node-local skewgate ready %s after start with an empty compilation cache, %s with a warm one\n",
		cold.readyAfter.Round(readyPoll), warm.readyAfter.Round(readyPoll))
	e.nodeLocal = warm.proc
	e.nodeLocalURL, e.nodeLocalMetricsURL = "https://"+loopback(warm.ports[0]), "http://"+loopback(warm.ports[1])
	e.meters[report.PathSkewgateNodeLocal] = meter{pid: warm.proc.PID(), metricsURL: e.nodeLocalMetricsURL + "/metrics"}
	return nil
}

// waitLocalPreferred waits until node-local skewgate's snapshot names the
// v1.35.4 server as the one that takes every request it can serve, which the
// node-local paths rely on: being ready takes one accepted snapshot, and until
// the local server is in one, requests are balanced over its peers.
func (e *macroEnv) waitLocalPreferred(ctx context.Context) error {
	url := e.nodeLocalMetricsURL + "/debug/snapshot"
	return waitFor(ctx, e.nodeLocal, routePoll, "node-local skewgate did not prefer the "+oldServerVersion+" server",
		func(ctx context.Context) (bool, string) {
			status, _, body, err := e.get(ctx, url, nil)
			switch {
			case err != nil:
				return false, err.Error()
			case status != http.StatusOK:
				return false, "GET " + url + ": " + strconv.Itoa(status)
			}
			snap, err := discovery.ParseSnapshot(body)
			if err != nil {
				return false, err.Error()
			}
			i := snap.PreferredIndex()
			if i < 0 {
				return false, "no preferred server"
			}
			return snap.Servers[i].Version == oldServerVersion, "preferred " + snap.Preferred + ", " + snap.Servers[i].Version
		})
}

// readNodeLocalMemory records node-local skewgate's resident memory now that
// the rounds are over.
func (e *macroEnv) readNodeLocalMemory() error {
	m, err := e.nodeLocal.ResidentMemory()
	if err != nil {
		return fmt.Errorf("node-local skewgate's memory: %w", err)
	}
	f := &e.footprint
	f.VmRSS, f.RssAnon, f.RssFile = m.VmRSS, m.RssAnon, m.RssFile
	fmt.Fprintf(e.cfg.progress, "skewbench: node-local skewgate after the rounds: VmRSS %.1f MiB (RssAnon %.1f MiB, RssFile %.1f MiB)\n",
		mib(f.VmRSS), mib(f.RssAnon), mib(f.RssFile))
	return nil
}

func mib(bytes int64) float64 { return float64(bytes) / (1 << 20) }
