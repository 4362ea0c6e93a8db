// Command kubebin builds (or finds in the cache) the binaries the test clusters run and prints one
// "component version path" line per binary. Without -only it builds the pinned etcd,
// kube-apiserver, kube-controller-manager and kubectl binaries the fixtures are captured with.
// The commands of one module version (every Kubernetes command of a release) are built by one go
// build.
//
// Usage:
//
//	go run ./host/testcluster/cmd/kubebin [-only kube-apiserver@v1.36.3,kubelet@v1.36.3,etcd@v3.6.16]
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/skewgate/skewgate/host/testcluster"
)

func pinnedBinaries() []testcluster.Binary {
	bins := []testcluster.Binary{{Component: testcluster.Etcd, Version: testcluster.EtcdVersion}}
	for _, v := range testcluster.KubeAPIServerVersions {
		bins = append(bins, testcluster.Binary{Component: testcluster.KubeAPIServer, Version: v})
	}
	for _, v := range testcluster.KubeControllerManagerVersions {
		bins = append(bins, testcluster.Binary{Component: testcluster.KubeControllerManager, Version: v})
	}
	return append(bins, testcluster.Binary{Component: testcluster.Kubectl, Version: testcluster.KubectlVersion})
}

func parseOnly(list string) ([]testcluster.Binary, error) {
	var bins []testcluster.Binary
	for _, item := range strings.Split(list, ",") {
		component, version, ok := strings.Cut(strings.TrimSpace(item), "@")
		if !ok {
			return nil, fmt.Errorf("%q is not component@version", item)
		}
		bins = append(bins, testcluster.Binary{Component: testcluster.Component(component), Version: version})
	}
	return bins, nil
}

type stderrLogger struct{ *log.Logger }

func (l stderrLogger) Logf(format string, args ...any) { l.Printf(format, args...) }

func main() {
	only := flag.String("only", "", "comma-separated component@version list to build instead of every pinned binary")
	flag.Parse()
	if flag.NArg() > 0 {
		log.Fatalf("unexpected arguments %q; -only takes one comma-separated list", flag.Args())
	}

	bins := pinnedBinaries()
	if *only != "" {
		var err error
		if bins, err = parseOnly(*only); err != nil {
			log.Fatal(err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := stderrLogger{log.New(os.Stderr, "kubebin: ", log.LstdFlags)}
	paths, err := testcluster.EnsureBinaries(ctx, logger, bins)
	if err != nil {
		log.Fatal(err)
	}
	for _, b := range bins {
		fmt.Printf("%s %s %s\n", b.Component, b.Version, paths[b])
	}
}
