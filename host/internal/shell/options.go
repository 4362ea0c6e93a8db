package shell

import (
	"github.com/spf13/pflag"

	"github.com/skewgate/skewgate/host/internal/cmdline"
	"github.com/skewgate/skewgate/host/internal/controller"
)

// Options are the option groups of every command the shell runs: the API
// servers and how they are reached, how the controller polls them, and the
// plugin configuration's settings.
type Options struct {
	cmdline.UpstreamOptions
	cmdline.ControllerOptions
	cmdline.PluginOptions
}

// NewOptions are the groups' defaults.
func NewOptions() Options {
	return Options{ControllerOptions: cmdline.NewControllerOptions(), PluginOptions: cmdline.NewPluginOptions()}
}

// AddFlags registers every group's flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.UpstreamOptions.AddFlags(fs)
	o.ControllerOptions.AddFlags(fs)
	o.PluginOptions.AddFlags(fs)
}

// Validate reports every group's mistakes, naming their flags;
// localAPIServer is skewgate serve's --local-apiserver (empty: none).
func (o *Options) Validate(localAPIServer string) []error {
	errs := o.UpstreamOptions.Validate(localAPIServer)
	errs = append(errs, o.ControllerOptions.Validate(&o.UpstreamOptions, localAPIServer)...)
	return append(errs, o.PluginOptions.Validate(&o.UpstreamOptions)...)
}

// Files are the files the groups name.
func (o *Options) Files() []cmdline.FileFlag {
	return append(o.UpstreamOptions.Files(), o.ControllerOptions.Files()...)
}

// ApplyTo sets what the groups decide of the controller's options; the
// certificates their files hold are the shell's (New).
func (o *Options) ApplyTo(opts *controller.Options) error {
	o.UpstreamOptions.ApplyTo(opts)
	o.PluginOptions.ApplyTo(opts)
	return o.ControllerOptions.ApplyTo(opts)
}
