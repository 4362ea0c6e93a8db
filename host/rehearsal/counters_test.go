package rehearsal

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func yes() bool { return true }
func no() bool  { return false }

// Judges: no capable server was up (so some server was down), or one was, with every server
// up or with another one down.
var (
	noCapableServerUp = judge{noCapableServer: yes, serverDown: yes}
	aCapableServerUp  = judge{noCapableServer: no, serverDown: no}
	aServerDown       = judge{noCapableServer: no, serverDown: yes}
)

func TestTallyCountsFailuresByTheUpgradeStepTheyCameIn(t *testing.T) {
	phase := "cp-1=v1.35.4 cp-2="
	tl := newTally(func() string { return phase })
	tl.request(outcome{what: "GET /a", status: 200}, judge{})
	tl.request(outcome{what: "GET /a", status: 404, detail: "not found"}, judge{})
	phase = "cp-1=v1.35.4 cp-2=v1.36.3"
	tl.request(outcome{what: "GET /a", status: 404, detail: "not found"}, judge{})
	if tl.request(outcome{what: "GET /a", status: 503, retryAfter: true, detail: "no capable server"}, noCapableServerUp) {
		t.Error("a 503 with Retry-After while no capable server was up counted as failed")
	}
	if !tl.request(outcome{what: "GET /a", status: 503, detail: "lost in flight"}, noCapableServerUp) {
		t.Error("a read answered 503 without Retry-After not counted as failed")
	}
	tl.watchEnded()
	tl.watchInterrupted("watch /a", "too old resource version")
	want := map[string]int{
		"404 while cp-1=v1.35.4 cp-2=":                      1,
		"404 while cp-1=v1.35.4 cp-2=v1.36.3":               1,
		"503 while cp-1=v1.35.4 cp-2=v1.36.3":               1,
		"watch interrupted while cp-1=v1.35.4 cp-2=v1.36.3": 1,
	}
	if len(tl.byPhase) != len(want) {
		t.Errorf("by phase %v, want %v", tl.byPhase, want)
	}
	for k, n := range want {
		if tl.byPhase[k] != n {
			t.Errorf("%q: %d, want %d (all: %v)", k, tl.byPhase[k], n, tl.byPhase)
		}
	}
	var c Counts
	tl.into(&c)
	if c.Requests != 5 || c.False404 != 2 || c.Allowed503 != 1 || c.WatchStreamsEnded != 1 || c.WatchInterruptions != 1 {
		t.Errorf("counts %+v", c)
	}
}

// What counts apart from the failures, and only on the evidence of the rehearsal's own samples:
// a write lost with a server that went down under it, and a read kube-apiserver answered with
// its etcd's own error while a server was down (kubeadm restarts each node's etcd).
type apart int

const (
	failed apart = iota
	writeLost
	etcdHandoverRead
)

func TestAnAnswerCountsApartFromTheFailuresOnlyOnTheEvidence(t *testing.T) {
	const (
		leaderChanged = `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"etcdserver: leader changed","code":500}`
		timedOut      = `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"etcdserver: request timed out","code":500}`
		otherError    = `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Internal error occurred: conversion webhook failed","code":500}`
	)
	for _, tc := range []struct {
		name   string
		answer outcome
		judge  judge
		want   apart
	}{
		{"a write answered 503 without Retry-After while no capable server was up", outcome{status: 503, write: true}, noCapableServerUp, writeLost},
		{"a write answered 503 without Retry-After while a capable server was up", outcome{status: 503, write: true}, aCapableServerUp, failed},
		{"a write answered 503 without Retry-After while a capable server was up and another down", outcome{status: 503, write: true}, aServerDown, failed},
		{"a write answered 504 while a server was down", outcome{status: 504, write: true}, aServerDown, writeLost},
		{"a write answered 500 while a server was down", outcome{status: 500, write: true}, aServerDown, writeLost},
		{"a write answered 504 while every server was up", outcome{status: 504, write: true}, aCapableServerUp, failed},
		{"a write answered 409 while a server was down", outcome{status: 409, write: true}, aServerDown, failed},
		{"a read answered 504 while a server was down", outcome{status: 504, detail: timedOut}, aServerDown, failed},
		{"a read answered 503 without Retry-After while no capable server was up", outcome{status: 503}, noCapableServerUp, failed},
		{"a read answered 500 with the etcd leader changed while a server was down", outcome{status: 500, detail: leaderChanged}, aServerDown, etcdHandoverRead},
		{"a read answered 500 with an etcd request timed out while a server was down", outcome{status: 500, detail: timedOut}, aServerDown, etcdHandoverRead},
		{"a read answered 500 with the etcd leader changed while every server was up", outcome{status: 500, detail: leaderChanged}, aCapableServerUp, failed},
		{"a read answered 500 of another cause while a server was down", outcome{status: 500, detail: otherError}, aServerDown, failed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tl := newTally(func() string { return "cp-1=v1.31.4 cp-2=" })
			tc.answer.what = "GET /apis/example.com/v1/widgets/w"
			if tc.answer.write {
				tc.answer.what = "POST /apis/example.com/v1/widgets"
			}
			if got := tl.request(tc.answer, tc.judge); got != (tc.want == failed) {
				t.Errorf("failed %t, want %t", got, tc.want == failed)
			}
			var c Counts
			tl.into(&c)
			if lost, handover := c.WritesLostWithAServer == 1, c.ReadsFailedInEtcdHandover == 1; lost != (tc.want == writeLost) || handover != (tc.want == etcdHandoverRead) || c.Allowed503 != 0 {
				t.Errorf("counts %+v", c)
			}
			if len(tl.failures) != 1 {
				t.Errorf("logged %q, want the one answer", tl.failures)
			}
		})
	}
}

// A resumed watch answered "too old resource version" is an interruption, unless every server
// of its resource went down since its stream ended: then no server could have resumed it.
func TestAWatchResumedTooLateIsAnInterruptionUnlessItsOnlyServersRestarted(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		serversDown           bool
		interrupted, relisted int
	}{
		{"a server of the resource stayed up", false, 1, 0},
		{"every server of the resource went down", true, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Query().Get("resourceVersion") == "" {
					fmt.Fprintln(w, `{"type":"ADDED","object":{"metadata":{"resourceVersion":"812"}}}`)
					return
				}
				fmt.Fprintln(w, `{"type":"ERROR","object":{"kind":"Status","code":410,"message":"too old resource version: 812 (1030)"}}`)
			}))
			defer server.Close()
			tl := newTally(func() string { return "cp-1=v1.31.4 cp-2=" })
			var judged time.Time
			c := &endpointClient{http: server.Client(), base: server.URL, tally: tl,
				noCapableServerAround: func(_ context.Context, new bool, since time.Time) bool {
					judged = since
					return new && tc.serversDown
				}}
			r := resource{collection: "/apis/example.com/v1/widgets", new: true}
			w := c.watchOnce(t.Context(), r, watchState{})
			if w.resourceVersion != "812" || w.ended.IsZero() {
				t.Fatalf("after the first stream: %+v, want to resume from 812 with its end", w)
			}
			if w = c.watchOnce(t.Context(), r, w); w != (watchState{}) {
				t.Errorf("after the ERROR: %+v, want to start again from now", w)
			}
			var counts Counts
			tl.into(&counts)
			if counts.WatchInterruptions != tc.interrupted || counts.WatchesRelistedAfterTheirServerRestarted != tc.relisted {
				t.Errorf("interrupted %d, relisted %d; want %d, %d", counts.WatchInterruptions,
					counts.WatchesRelistedAfterTheirServerRestarted, tc.interrupted, tc.relisted)
			}
			if judged.IsZero() {
				t.Error("the judge was not asked about the time since the stream ended")
			}
		})
	}
}
