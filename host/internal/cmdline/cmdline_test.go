package cmdline

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func testFlagSet(out *bytes.Buffer) (*pflag.FlagSet, *string) {
	fs := NewFlagSet("tool run", "tool run [flags] FILE...", "Runs the tool.", out)
	return fs, fs.String("name", "x", "the `NAME` to use")
}

func TestHelpReadsAsAKubernetesComponents(t *testing.T) {
	for _, arg := range []string{"-h", "--help"} {
		t.Run(arg, func(t *testing.T) {
			var out bytes.Buffer
			fs, _ := testFlagSet(&out)
			if err := Parse(fs, []string{arg}, true); !errors.Is(err, pflag.ErrHelp) {
				t.Fatalf("error %v; want pflag.ErrHelp", err)
			}
			want := "Usage:\n  tool run [flags] FILE...\n\nRuns the tool.\n\nFlags:\n      --name NAME   the NAME to use (default \"x\")\n"
			if out.String() != want {
				t.Errorf("help\n%s\nwant\n%s", out.String(), want)
			}
		})
	}
}

func TestParseReportsAMistakeWithTheHelp(t *testing.T) {
	for _, tc := range []struct {
		name       string
		args       []string
		positional bool
		says       string
	}{
		{"unknown flag", []string{"--nmae=y"}, true, "tool run: unknown flag: --nmae\n"},
		{"missing value", []string{"--name"}, true, "tool run: flag needs an argument: --name\n"},
		{"stray argument", []string{"a", "--name=y", "b"}, false, "tool run: unexpected arguments: a b\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			fs, _ := testFlagSet(&out)
			err := Parse(fs, tc.args, tc.positional)
			if !errors.Is(err, ErrUsage) || !strings.HasPrefix(out.String(), tc.says) || !strings.Contains(out.String(), "\nUsage:\n  tool run") {
				t.Errorf("error %v, output %q; want ErrUsage, %q and the help", err, out.String(), tc.says)
			}
			if msg := strings.TrimSuffix(strings.TrimPrefix(tc.says, "tool run: "), "\n"); err.Error() != msg {
				t.Errorf("error %q; want %q", err, msg)
			}
		})
	}
}

func TestFlagsMayFollowPositionalArguments(t *testing.T) {
	var out bytes.Buffer
	fs, name := testFlagSet(&out)
	if err := Parse(fs, []string{"a", "--name=y", "b"}, true); err != nil || *name != "y" || !slices.Equal(fs.Args(), []string{"a", "b"}) {
		t.Errorf("= %v, name %q, arguments %q; want y and a b", err, *name, fs.Args())
	}
}

func TestLogFlagsNameTheFlagOfABadValue(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--log-level=loud"}, "--log-level: "},
		{[]string{"--log-format=xml"}, `--log-format "xml": must be text or json`},
	} {
		var l LogFlags
		fs := NewFlagSet("tool", "tool", "", &bytes.Buffer{})
		l.AddFlags(fs, "info")
		if err := Parse(fs, tc.args, false); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Logger(&bytes.Buffer{}); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: error %v; want one starting %q", tc.args, err, tc.want)
		}
	}
	var l LogFlags
	fs := NewFlagSet("tool", "tool", "", &bytes.Buffer{})
	l.AddFlags(fs, "warn")
	if err := Parse(fs, []string{"--log-format=json"}, false); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	logger, err := l.Logger(&out)
	if err != nil {
		t.Fatal(err)
	}
	logger.Info("dropped")
	logger.Warn("kept")
	if got := out.String(); strings.Contains(got, "dropped") || !strings.HasPrefix(got, `{"time":`) || !strings.Contains(got, `"msg":"kept"`) {
		t.Errorf("log %q; want JSON at warn and above", got)
	}
}
