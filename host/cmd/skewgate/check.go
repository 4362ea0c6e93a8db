package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/skewgate/skewgate/host/internal/check"
	"github.com/skewgate/skewgate/host/internal/cmdline"
)

// runCheck runs `skewgate check` and returns its exit status: 0 without
// findings, 1 with findings, 2 when the check could not be made.
func runCheck(args []string, stdout, stderr io.Writer) int {
	o := check.NewOptions()
	fs := cmdline.NewFlagSet("skewgate check",
		"skewgate check --to VERSION | --to-server URL | --to-fixtures DIR [flags]",
		"Finds what in the current cluster meets a difference between its API servers and the target version, while both\n"+
			"serve during a rolling upgrade and after it: objects of resources only one side serves (404s through a plain load\n"+
			"balancer), owner references the garbage collector resolves on one side only, namespaces whose deletion would leave\n"+
			"objects behind, CRD stored versions, self-registered APIServices, admission webhooks and policies, field selectors,\n"+
			"and API versions the target removes that writers still use (from the objects' managedFields, not annotations).\n"+
			"Read-only: metadata of every object, page by page, and the API configuration objects (host/deploy/check/rbac.yaml).\n"+
			"Exit status: 0 no findings, 1 findings, 2 the check could not be made.", stderr)
	o.AddFlags(fs)
	if err := cmdline.Parse(fs, args, false); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return cmdline.ExitUsage
	}
	if errs := o.Validate(); len(errs) > 0 {
		for _, err := range errs {
			fmt.Fprintf(stderr, "skewgate check: %v\n", err)
		}
		return cmdline.ExitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return check.Run(ctx, o, stdout, stderr)
}
