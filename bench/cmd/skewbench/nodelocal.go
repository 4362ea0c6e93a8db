package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/skewgate/skewgate/discovery"
)

// startNodeLocalSkewgate starts skewgate in node-local mode in front of
// serverOld, with the two other servers as its peers.
func (e *macroEnv) startNodeLocalSkewgate(ctx context.Context) error {
	servers := []string{"--local-apiserver=" + e.serverURL(serverOld),
		"--apiserver=" + e.serverURL(serverNew), "--apiserver=" + e.serverURL(serverExtra)}
	fmt.Fprintln(e.cfg.progress, "skewbench: starting node-local skewgate serve")
	s, err := e.startSkewgate(ctx, "skewgate-node-local", servers)
	if err != nil {
		return err
	}
	e.nodeLocal = s.proc
	e.nodeLocalURL, e.nodeLocalMetricsURL = "https://"+loopback(s.ports[0]), "http://"+loopback(s.ports[1])
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
