package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/skewgate/skewgate/bench/internal/report"
)

// profileSeconds is how long each profile of skewgate serve covers; the load
// runs a second longer on either side so that it covers the whole window.
const profileSeconds = 8

// profiledPaths are the paths whose load skewgate serve is profiled under:
// the request it forwards unchanged and the merged /apis it answers itself.
var profiledPaths = []string{report.PathSkewgate, report.PathSkewgateAPIs}

// profile writes, for every profiled path, skewgate serve's CPU profile and
// the allocations it made while loadgen drove that path, each taken over its
// own run of the load so that one profiler does not weigh on the other.
func (e *macroEnv) profile(ctx context.Context) error {
	if err := os.MkdirAll(e.cfg.profileDir, 0o755); err != nil {
		return err
	}
	for _, id := range profiledPaths {
		for _, kind := range []string{"profile", "allocs"} {
			file := filepath.Join(e.cfg.profileDir, id+"."+kind+".pprof")
			if err := e.profileUnderLoad(ctx, id, kind, file); err != nil {
				return fmt.Errorf("profiling %s under %s: %w", kind, id, err)
			}
			fmt.Fprintf(e.cfg.progress, "skewbench: wrote %s (go tool pprof -top %s)\n", file, file)
		}
	}
	return nil
}

// profileUnderLoad fetches skewgate's /debug/pprof/<kind> over
// profileSeconds (for allocs, the allocations made in that window) while
// loadgen drives path id.
func (e *macroEnv) profileUnderLoad(ctx context.Context, id, kind, file string) error {
	loaded := make(chan error, 1)
	go func() {
		_, err := e.load(ctx, id, 1<<30, (profileSeconds+2)*time.Second)
		loaded <- err
	}()
	time.Sleep(time.Second)
	profErr := fetchProfile(ctx, e.skewgateMetricsURL+"/debug/pprof/"+kind+"?seconds="+strconv.Itoa(profileSeconds), file)
	if err := <-loaded; err != nil {
		return err
	}
	return profErr
}

func fetchProfile(ctx context.Context, url, file string) error {
	ctx, cancel := context.WithTimeout(ctx, (profileSeconds+30)*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
