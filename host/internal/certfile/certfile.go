// Package certfile keeps TLS material read from files current without a
// restart, as kube-apiserver's dynamic certificates do: a Watcher reads every
// file again each interval and, when the content changed and is valid, makes
// it current and calls the subscribers. Invalid new content is logged with the
// flags that name the files, and the previous material stays.
//
// Reading the content, rather than watching for file events, follows every
// way files are replaced: written in place, renamed over, or swapped through a
// symlink (Kubernetes Secret volumes switch a ..data link; kubeadm renews in
// place). A certificate and its key are replaced by two separate writes, so a
// pair that does not match is only reported when it is read twice unchanged.
//
// Only new handshakes use new material: connections already established, and
// the watches on them, keep theirs.
package certfile

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skewgate/skewgate/plugin/metricdef"
)

// DefaultInterval is how often files are read again: a renewed certificate is
// in use within seconds, for a few small reads.
const DefaultInterval = 2 * time.Second

// Watcher reads its files again every interval.
type Watcher struct {
	log      *slog.Logger
	interval time.Duration
	running  atomic.Bool

	mu    sync.Mutex
	files []checker
}

// checker is one watched set of files.
type checker interface {
	check(log *slog.Logger)
	counts() (what string, reloads, failures uint64)
}

// NewWatcher returns a Watcher that reads its files every interval (default
// DefaultInterval) once Run runs.
func NewWatcher(log *slog.Logger, interval time.Duration) *Watcher {
	if log == nil {
		log = slog.Default()
	}
	if interval <= 0 {
		interval = DefaultInterval
	}
	return &Watcher{log: log, interval: interval}
}

// Run checks every file each interval until ctx is done. It returns an error
// only if called twice.
func (w *Watcher) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("certfile: Run called twice")
	}
	ticker := time.NewTicker(w.interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			w.check()
		}
	}
}

func (w *Watcher) check() {
	w.mu.Lock()
	files := slices.Clone(w.files)
	w.mu.Unlock()
	for _, f := range files {
		f.check(w.log)
	}
}

func (w *Watcher) add(c checker) {
	w.mu.Lock()
	w.files = append(w.files, c)
	w.mu.Unlock()
}

var (
	reloadsDesc = prometheus.NewDesc(metricdef.CertificateReloads.Name, metricdef.CertificateReloads.Help,
		metricdef.CertificateReloads.Labels, nil)
	reloadFailuresDesc = prometheus.NewDesc(metricdef.CertificateReloadFailures.Name, metricdef.CertificateReloadFailures.Help,
		metricdef.CertificateReloadFailures.Labels, nil)
)

// Describe and Collect make the Watcher the prometheus.Collector of how many
// reloads of each set of files succeeded and how many new contents were
// rejected.
func (w *Watcher) Describe(ch chan<- *prometheus.Desc) {
	ch <- reloadsDesc
	ch <- reloadFailuresDesc
}

func (w *Watcher) Collect(ch chan<- prometheus.Metric) {
	w.mu.Lock()
	files := slices.Clone(w.files)
	w.mu.Unlock()
	for _, f := range files {
		what, reloads, failures := f.counts()
		ch <- prometheus.MustNewConstMetric(reloadsDesc, prometheus.CounterValue, float64(reloads), what)
		ch <- prometheus.MustNewConstMetric(reloadFailuresDesc, prometheus.CounterValue, float64(failures), what)
	}
}

// source is one set of files and the material parsed from them.
type source[T any] struct {
	what  string
	paths []string
	parse func(contents [][]byte) (*T, error)

	current atomic.Pointer[T]

	// Touched by the Watcher's goroutine only.
	accepted [][]byte // contents of current
	seen     [][]byte // contents last read, valid or not
	failing  bool     // seen was rejected (and reported)
	readErr  string   // the last read error reported

	reloads, failures atomic.Uint64

	mu        sync.Mutex
	listeners []func()
}

func newSource[T any](w *Watcher, what string, parse func([][]byte) (*T, error), paths ...string) (*source[T], error) {
	s := &source[T]{what: what, paths: paths, parse: parse}
	contents, err := s.read()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	v, err := parse(contents)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	s.current.Store(v)
	s.accepted, s.seen = contents, contents
	w.add(s)
	return s, nil
}

func (s *source[T]) read() ([][]byte, error) {
	contents := make([][]byte, len(s.paths))
	for i, p := range s.paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		contents[i] = b
	}
	return contents, nil
}

func (s *source[T]) onChange(f func()) {
	s.mu.Lock()
	s.listeners = append(s.listeners, f)
	s.mu.Unlock()
}

func (s *source[T]) counts() (string, uint64, uint64) {
	return s.what, s.reloads.Load(), s.failures.Load()
}

func (s *source[T]) check(log *slog.Logger) {
	contents, err := s.read()
	if err != nil {
		if err.Error() != s.readErr {
			s.readErr = err.Error()
			s.failures.Add(1)
			log.Error("certificate files cannot be read; keeping the material in use", "files", s.what, "err", err)
		}
		return
	}
	s.readErr = ""
	if equal(contents, s.seen) && (s.failing || equal(contents, s.accepted)) {
		return
	}
	if equal(contents, s.accepted) {
		s.seen, s.failing = contents, false
		return
	}
	v, err := s.parse(contents)
	if err != nil {
		// The first sight of a bad content may be half of a replacement:
		// report it only once it is read again unchanged.
		if equal(contents, s.seen) {
			s.failing = true
			s.failures.Add(1)
			log.Error("new content of certificate files rejected; keeping the material in use", "files", s.what, "err", err)
		}
		s.seen = contents
		return
	}
	s.current.Store(v)
	s.accepted, s.seen, s.failing = contents, contents, false
	s.reloads.Add(1)
	log.Info("certificate files reloaded", "files", s.what)
	s.mu.Lock()
	listeners := slices.Clone(s.listeners)
	s.mu.Unlock()
	for _, f := range listeners {
		f()
	}
}

func equal(a, b [][]byte) bool {
	return slices.EqualFunc(a, b, bytes.Equal)
}

// KeyPair is a certificate with its private key (a serving or client
// certificate).
type KeyPair struct{ s *source[tls.Certificate] }

// KeyPair reads certFile and keyFile and watches them; flags names them in
// errors and logs, e.g. "--tls-cert-file/--tls-private-key-file".
func (w *Watcher) KeyPair(flags, certFile, keyFile string) (*KeyPair, error) {
	s, err := newSource(w, flags, parseKeyPair, certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &KeyPair{s}, nil
}

func parseKeyPair(contents [][]byte) (*tls.Certificate, error) {
	cert, err := tls.X509KeyPair(contents[0], contents[1])
	if err != nil {
		return nil, err
	}
	return &cert, nil
}

// Certificate is the current certificate; it must not be modified.
func (k *KeyPair) Certificate() *tls.Certificate { return k.s.current.Load() }

// OnChange registers f to be called, on the Watcher's goroutine, after every
// change of the certificate.
func (k *KeyPair) OnChange(f func()) { k.s.onChange(f) }

// CABundle is a set of CA certificates.
type CABundle struct{ s *source[caBundle] }

type caBundle struct {
	pem  []byte
	pool *x509.CertPool
}

// CABundle reads file and watches it; flag names it in errors and logs.
func (w *Watcher) CABundle(flag, file string) (*CABundle, error) {
	s, err := newSource(w, flag, parseCABundle, file)
	if err != nil {
		return nil, err
	}
	return &CABundle{s}, nil
}

// parseCABundle takes the PEM CERTIFICATE blocks, every one of which must be
// valid and complete, so that a truncated or mangled bundle is not taken for
// a smaller one.
func parseCABundle(contents [][]byte) (*caBundle, error) {
	pool := x509.NewCertPool()
	rest := contents[0]
	n := 0
	for {
		block, after := pem.Decode(rest)
		if block == nil {
			break
		}
		rest = after
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", n+1, err)
		}
		pool.AddCert(cert)
		n++
	}
	if n == 0 {
		return nil, errors.New("no PEM certificate found")
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return nil, fmt.Errorf("data that is not a complete PEM block after %d certificates (a truncated file?)", n)
	}
	return &caBundle{pem: contents[0], pool: pool}, nil
}

// Pool is the current CA certificates; it must not be modified.
func (b *CABundle) Pool() *x509.CertPool { return b.s.current.Load().pool }

// PEM is the current CA certificates as read; it must not be modified.
func (b *CABundle) PEM() []byte { return b.s.current.Load().pem }

// OnChange registers f to be called, on the Watcher's goroutine, after every
// change of the CA certificates.
func (b *CABundle) OnChange(f func()) { b.s.onChange(f) }
