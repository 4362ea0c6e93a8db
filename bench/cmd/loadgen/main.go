// Command loadgen sends a bounded, fixed-concurrency HTTPS load to servers on
// loopback IP addresses and prints one JSON object: count, errors by status,
// p50/p90/p99 latency in microseconds and successful requests per second.
//
//	loadgen -url https://127.0.0.1:6443/api/v1/namespaces/default/configmaps \
//	    -ca-file ca.crt -token-file token -protocol h2 -concurrency 8 \
//	    -requests 5000 -duration 10s
//
// Several -url flags spread the requests over the targets in turn. Targets must
// be https URLs on literal loopback IPs; anything else is refused.
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/skewgate/skewgate/bench/internal/loadgen"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var targets, headers repeated
	fs.Var(&targets, "url", "https URL on a loopback IP (repeatable: requests go to each in turn)")
	fs.Var(&headers, "header", `request header "Name: value" (repeatable)`)
	method := fs.String("method", http.MethodGet, "request method")
	protocol := fs.String("protocol", loadgen.HTTP2, "h2 (one multiplexed connection per target) or http1 (keep-alive connections)")
	concurrency := fs.Int("concurrency", 8, "requests in flight at once")
	requests := fs.Int("requests", 5000, "upper bound on measured requests")
	duration := fs.Duration("duration", 10*time.Second, "upper bound on the measured phase")
	warmup := fs.Int("warmup", 200, "unrecorded requests sent first")
	expect := fs.Int("expect-status", http.StatusOK, "status of a successful response")
	caFile := fs.String("ca-file", "", "PEM CA bundle that verifies the servers (required)")
	serverName := fs.String("server-name", "", "name verified in the server certificate (default: the target IP)")
	tokenFile := fs.String("token-file", "", "file holding a bearer token")
	certFile := fs.String("cert", "", "client certificate (PEM)")
	keyFile := fs.String("key", "", "client certificate key (PEM)")
	timeout := fs.Duration("timeout", 10*time.Second, "bound on each request")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "loadgen: unexpected arguments %q\n", fs.Args())
		return 2
	}
	cfg := loadgen.Config{
		Targets: targets, Method: *method, Headers: http.Header{}, Protocol: *protocol,
		Concurrency: *concurrency, Requests: *requests, Duration: *duration, Warmup: *warmup,
		ExpectStatus: *expect, ServerName: *serverName, Timeout: *timeout,
	}
	if err := complete(&cfg, headers, *caFile, *tokenFile, *certFile, *keyFile); err != nil {
		fmt.Fprintf(stderr, "loadgen: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := loadgen.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "loadgen: %v\n", err)
		return 1
	}
	enc := json.NewEncoder(stdout)
	if err := enc.Encode(res); err != nil {
		fmt.Fprintf(stderr, "loadgen: %v\n", err)
		return 1
	}
	return 0
}

// complete reads the files the flags name into cfg.
func complete(cfg *loadgen.Config, headers []string, caFile, tokenFile, certFile, keyFile string) error {
	for _, h := range headers {
		if err := loadgen.ParseHeader(cfg.Headers, h); err != nil {
			return err
		}
	}
	if caFile == "" {
		return errors.New("-ca-file is required: servers are always verified")
	}
	pool, err := loadgen.ReadCAFile(caFile)
	if err != nil {
		return fmt.Errorf("-ca-file: %w", err)
	}
	cfg.RootCAs = pool
	if tokenFile != "" {
		raw, err := os.ReadFile(tokenFile)
		if err != nil {
			return fmt.Errorf("-token-file: %w", err)
		}
		if cfg.BearerToken = strings.TrimSpace(string(raw)); cfg.BearerToken == "" {
			return fmt.Errorf("-token-file %s is empty", tokenFile)
		}
	}
	if (certFile == "") != (keyFile == "") {
		return errors.New("-cert and -key go together")
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return fmt.Errorf("-cert/-key: %w", err)
		}
		cfg.ClientCertificate = &cert
	}
	return nil
}
