// Command kubebin builds (or finds in the cache) the pinned etcd, kube-apiserver,
// kube-controller-manager and kubectl binaries used by the test clusters and prints one
// "component version path" line per binary.
//
// Usage:
//
//	go run ./host/testcluster/cmd/kubebin [-only kube-apiserver@v1.36.3,etcd@v3.6.16]
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

type binary struct {
	component testcluster.Component
	version   string
}

func pinnedBinaries() []binary {
	bins := []binary{{testcluster.Etcd, testcluster.EtcdVersion}}
	for _, v := range testcluster.KubeAPIServerVersions {
		bins = append(bins, binary{testcluster.KubeAPIServer, v})
	}
	for _, v := range testcluster.KubeControllerManagerVersions {
		bins = append(bins, binary{testcluster.KubeControllerManager, v})
	}
	return append(bins, binary{testcluster.Kubectl, testcluster.KubectlVersion})
}

func parseOnly(list string) ([]binary, error) {
	var bins []binary
	for _, item := range strings.Split(list, ",") {
		component, version, ok := strings.Cut(strings.TrimSpace(item), "@")
		if !ok {
			return nil, fmt.Errorf("%q is not component@version", item)
		}
		bins = append(bins, binary{testcluster.Component(component), version})
	}
	return bins, nil
}

type stderrLogger struct{ *log.Logger }

func (l stderrLogger) Logf(format string, args ...any) { l.Printf(format, args...) }

func main() {
	only := flag.String("only", "", "comma-separated component@version list to build instead of every pinned binary")
	flag.Parse()

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
	for _, b := range bins {
		path, err := testcluster.EnsureBinary(ctx, logger, b.component, b.version)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s %s %s\n", b.component, b.version, path)
	}
}
