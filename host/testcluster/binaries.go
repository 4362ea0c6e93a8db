package testcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Pinned release versions used by the scenarios and fixtures.
const (
	KubeVersion130 = "v1.30.14"
	KubeVersion131 = "v1.31.4"
	KubeVersion135 = "v1.35.4"
	KubeVersion136 = "v1.36.3"
	KubeVersion137 = "v1.37.2"
	KubectlVersion = KubeVersion136
	EtcdVersion    = "v3.6.16"
	// ContainerdVersion and CrictlVersion are the container runtime and its client on the real
	// nodes (see host/testcluster/kubenode).
	ContainerdVersion = "v2.2.9"
	CrictlVersion     = "v1.37.0"
)

// KubeAPIServerVersions lists every pinned kube-apiserver version, oldest first.
var KubeAPIServerVersions = []string{KubeVersion130, KubeVersion131, KubeVersion135, KubeVersion136, KubeVersion137}

// KubeControllerManagerVersions are the kube-controller-manager versions of the upgrade the
// scenarios replay: the one next to a node's not yet upgraded server, and the upgraded one.
var KubeControllerManagerVersions = []string{KubeVersion135, KubeVersion136}

// Component names a binary that EnsureBinaries can build.
type Component string

// Buildable components.
const (
	KubeAPIServer         Component = "kube-apiserver"
	KubeControllerManager Component = "kube-controller-manager"
	KubeScheduler         Component = "kube-scheduler"
	KubeletComponent      Component = "kubelet" // the real one; Kubelet is the stand-in
	Kubeadm               Component = "kubeadm"
	Kubectl               Component = "kubectl"
	Etcd                  Component = "etcd"
	Containerd            Component = "containerd"
	ContainerdShim        Component = "containerd-shim-runc-v2"
	Ctr                   Component = "ctr"
	Crictl                Component = "crictl"
)

// Binary is one component at one version.
type Binary struct {
	Component Component
	Version   string
}

func (b Binary) String() string { return string(b.Component) + "@" + b.Version }

// Logger receives progress messages; *testing.T satisfies it.
type Logger interface {
	Logf(format string, args ...any)
}

// moduleRecipe says how to build commands of one module from the module proxy. Every command of
// a module at one version is built by one go build, so that they share compilation.
type moduleRecipe struct {
	path string
	// tags are the build tags upstream's release build uses, where they matter.
	tags []string
	// kubernetes marks k8s.io/kubernetes: its staging modules need replacing and its version
	// variables need stamping.
	kubernetes bool
	// versionVariable, when set, is the package variable -X stamps with the version, as upstream's
	// release build does; without it the binary reports a placeholder.
	versionVariable string
}

var (
	kubernetesModule = &moduleRecipe{path: "k8s.io/kubernetes", kubernetes: true}
	// At v3.6 the etcd server module's root package is the etcd main (server/main.go); the version
	// it reports is a constant of the module.
	etcdModule = &moduleRecipe{path: "go.etcd.io/etcd/server/v3"}
	// The storage drivers left out need C libraries or kernel features the nodes do not use.
	containerdModule = &moduleRecipe{
		path:            "github.com/containerd/containerd/v2",
		tags:            []string{"no_btrfs", "no_devmapper", "no_zfs"},
		versionVariable: "github.com/containerd/containerd/v2/version.Version",
	}
	criToolsModule = &moduleRecipe{
		path:            "sigs.k8s.io/cri-tools",
		versionVariable: "sigs.k8s.io/cri-tools/pkg/version.Version",
	}
)

// recipe says how to build one component and how to recognise a good copy of it.
type recipe struct {
	module      *moduleRecipe
	mainPackage string
	// versionArgs make the binary print its version; versionText is what the output must contain.
	versionArgs []string
	versionText func(version string) string
}

func recipeFor(c Component) (recipe, error) {
	kubernetesVersionText := func(v string) string { return "Kubernetes " + v + "\n" }
	switch c {
	case KubeAPIServer, KubeControllerManager, KubeScheduler, KubeletComponent:
		return recipe{
			module:      kubernetesModule,
			mainPackage: "k8s.io/kubernetes/cmd/" + string(c),
			versionArgs: []string{"--version"},
			versionText: kubernetesVersionText,
		}, nil
	case Kubeadm:
		return recipe{
			module:      kubernetesModule,
			mainPackage: "k8s.io/kubernetes/cmd/kubeadm",
			versionArgs: []string{"version", "-o", "short"},
			versionText: func(v string) string { return v + "\n" },
		}, nil
	case Kubectl:
		return recipe{
			module:      kubernetesModule,
			mainPackage: "k8s.io/kubernetes/cmd/kubectl",
			versionArgs: []string{"version", "--client"},
			versionText: func(v string) string { return "Client Version: " + v + "\n" },
		}, nil
	case Etcd:
		return recipe{
			module:      etcdModule,
			mainPackage: "go.etcd.io/etcd/server/v3",
			versionArgs: []string{"--version"},
			versionText: func(v string) string { return "etcd Version: " + strings.TrimPrefix(v, "v") + "\n" },
		}, nil
	case Containerd:
		return recipe{
			module:      containerdModule,
			mainPackage: "github.com/containerd/containerd/v2/cmd/containerd",
			versionArgs: []string{"--version"},
			// The revision follows, empty in a build from the module proxy.
			versionText: func(v string) string { return "containerd github.com/containerd/containerd/v2 " + v + " " },
		}, nil
	case Ctr:
		return recipe{
			module:      containerdModule,
			mainPackage: "github.com/containerd/containerd/v2/cmd/ctr",
			versionArgs: []string{"--version"},
			versionText: func(v string) string { return "ctr github.com/containerd/containerd/v2 " + v + "\n" },
		}, nil
	case ContainerdShim:
		return recipe{
			module:      containerdModule,
			mainPackage: "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2",
			versionArgs: []string{"-v"},
			versionText: func(v string) string { return "Version:  " + v + "\n" },
		}, nil
	case Crictl:
		return recipe{
			module:      criToolsModule,
			mainPackage: "sigs.k8s.io/cri-tools/cmd/crictl",
			versionArgs: []string{"--version"},
			versionText: func(v string) string { return "crictl version " + v + "\n" },
		}, nil
	default:
		return recipe{}, fmt.Errorf("unknown component %q", c)
	}
}

var releaseVersionPattern = regexp.MustCompile(`^v(\d+)\.(\d+)\.(\d+)$`)

// releaseVersion is a parsed vMAJOR.MINOR.PATCH.
type releaseVersion struct {
	major, minor, patch int
}

func parseReleaseVersion(v string) (releaseVersion, error) {
	m := releaseVersionPattern.FindStringSubmatch(v)
	if m == nil {
		return releaseVersion{}, fmt.Errorf("version %q is not of the form vMAJOR.MINOR.PATCH", v)
	}
	var r releaseVersion
	for i, dst := range []*int{&r.major, &r.minor, &r.patch} {
		n, err := strconv.Atoi(m[i+1])
		if err != nil {
			return releaseVersion{}, fmt.Errorf("version %q: %w", v, err)
		}
		*dst = n
	}
	return r, nil
}

// stagingVersion is the published version of the staging modules (k8s.io/api, ...) that ship with
// Kubernetes version v: v1.Y.Z pairs with v0.Y.Z.
func stagingVersion(v releaseVersion) string {
	return fmt.Sprintf("v0.%d.%d", v.minor, v.patch)
}

// BinDir returns ${XDG_CACHE_HOME:-$HOME/.cache}/skewgate/bin, creating it if needed.
func BinDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("locating the user cache directory: %w", err)
	}
	dir := filepath.Join(base, "skewgate", "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	return dir, nil
}

// buildMu serialises builds inside one process; the lock file serialises them across processes, so
// a shared machine never compiles two Kubernetes versions at once.
var buildMu sync.Mutex

// EnsureBinary returns the path of component c at version, building it from the Go module proxy
// when the cache holds no copy that reports the right version.
func EnsureBinary(ctx context.Context, log Logger, c Component, version string) (string, error) {
	b := Binary{c, version}
	paths, err := EnsureBinaries(ctx, log, []Binary{b})
	if err != nil {
		return "", err
	}
	return paths[b], nil
}

// EnsureBinaries returns the path of every binary, building from the Go module proxy those the
// cache holds no copy of that reports the right version. The missing commands of one module at one
// version (every Kubernetes command of a release, say) are built by one go build, so that they
// share the compilation of everything they have in common.
func EnsureBinaries(ctx context.Context, log Logger, bins []Binary) (map[Binary]string, error) {
	dir, err := BinDir()
	if err != nil {
		return nil, err
	}
	recipes := map[Binary]recipe{}
	paths := map[Binary]string{}
	for _, b := range bins {
		r, err := recipeFor(b.Component)
		if err != nil {
			return nil, err
		}
		if _, err := parseReleaseVersion(b.Version); err != nil {
			return nil, fmt.Errorf("%s: %w", b.Component, err)
		}
		recipes[b] = r
		paths[b] = filepath.Join(dir, string(b.Component)+"-"+b.Version)
	}
	missing := func() []Binary {
		var out []Binary
		for _, b := range bins {
			if !slices.Contains(out, b) && verifyBinary(ctx, paths[b], recipes[b], b.Version) != nil {
				out = append(out, b)
			}
		}
		return out
	}
	if len(missing()) == 0 {
		return paths, nil
	}

	buildMu.Lock()
	defer buildMu.Unlock()
	// While another process holds the build lock it may be producing these very binaries, so the
	// wait ends as soon as verified copies of all of them appear.
	unlock, err := lockFile(ctx, log, filepath.Join(dir, ".build.lock"), func() bool { return len(missing()) == 0 })
	if err != nil {
		return nil, err
	}
	if unlock == nil {
		return paths, nil
	}
	defer unlock()

	for _, group := range groupByModuleVersion(missing(), recipes) {
		if err := buildGroup(ctx, log, dir, group, recipes, paths); err != nil {
			return nil, err
		}
	}
	return paths, nil
}

// groupByModuleVersion splits bins into the sets one go build produces: the commands of one
// module at one version, in the order they were first asked for.
func groupByModuleVersion(bins []Binary, recipes map[Binary]recipe) [][]Binary {
	type key struct {
		module  *moduleRecipe
		version string
	}
	index := map[key]int{}
	var groups [][]Binary
	for _, b := range bins {
		k := key{recipes[b].module, b.Version}
		i, ok := index[k]
		if !ok {
			i = len(groups)
			index[k] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], b)
	}
	return groups
}

// buildGroup builds the commands of one module version into a scratch directory of the cache,
// verifies each, and only then moves each to its cached name.
func buildGroup(ctx context.Context, log Logger, dir string, group []Binary, recipes map[Binary]recipe, paths map[Binary]string) error {
	module, version := recipes[group[0]].module, group[0].Version
	out, err := os.MkdirTemp(dir, ".build-"+path.Base(module.path)+"-"+version+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(out) // only what failed verification is left in it

	var packages, names []string
	for _, b := range group {
		packages = append(packages, recipes[b].mainPackage)
		names = append(names, string(b.Component))
	}
	log.Logf("building %s %s from %s into %s (minutes on a cold Go build cache)", strings.Join(names, ", "), version, module.path, dir)
	start := time.Now()
	if err := buildModule(ctx, module, version, packages, out); err != nil {
		return fmt.Errorf("building %s %s: %w", strings.Join(names, ", "), version, err)
	}
	for _, b := range group {
		built := filepath.Join(out, executableName(recipes[b].mainPackage))
		if err := verifyBinary(ctx, built, recipes[b], version); err != nil {
			return fmt.Errorf("freshly built %s: %w", b, err)
		}
		if err := os.Rename(built, paths[b]); err != nil {
			return err
		}
	}
	log.Logf("built %s %s in %s", strings.Join(names, ", "), version, time.Since(start).Round(time.Second))
	return nil
}

// majorVersionSuffix matches the last element of a module path of major version 2 or higher.
var majorVersionSuffix = regexp.MustCompile(`^v[2-9][0-9]*$`)

// executableName is the file go build -o DIR/ writes for a main package: "the last non-major-version
// component of the package import path" (go help build).
func executableName(importPath string) string {
	elems := strings.Split(importPath, "/")
	last := elems[len(elems)-1]
	if majorVersionSuffix.MatchString(last) && len(elems) > 1 {
		return elems[len(elems)-2]
	}
	return last
}

// verifyBinary runs the binary's version command and checks that it names the expected version.
func verifyBinary(ctx context.Context, path string, r recipe, version string) error {
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() || info.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, r.versionArgs...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", path, strings.Join(r.versionArgs, " "), err, LastLines(out, 5))
	}
	if want := r.versionText(version); !strings.Contains(string(out), want) {
		return fmt.Errorf("%s %s printed %q, want it to contain %q", path, strings.Join(r.versionArgs, " "), out, want)
	}
	return nil
}

// lockFile takes an exclusive flock on path, polling so that ctx can cancel the wait. If done
// reports true while waiting, it gives up and returns a nil unlock function.
func lockFile(ctx context.Context, log Logger, path string, done func() bool) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	announced := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		if done() {
			f.Close()
			return nil, nil
		}
		if !announced {
			log.Logf("waiting for another process to finish building into %s", filepath.Dir(path))
			announced = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// moduleDownload is the subset of `go mod download -json` output used here.
type moduleDownload struct {
	Info  string
	GoMod string
	Error string
}

// buildModule builds the main packages of module at version into the directory out, using a
// throw-away module that requires module at that version. Every binary is static (CGO_ENABLED=0),
// so that it runs from an image with nothing else in it, as well as on the host.
func buildModule(ctx context.Context, module *moduleRecipe, version string, packages []string, out string) error {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("the go command is needed to build test binaries: %w", err)
	}
	work, err := os.MkdirTemp("", "skewgate-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	env := append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOWORK=off")
	goCmd := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, goTool, args...)
		cmd.Dir = work
		cmd.Env = env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, LastLines(stderr.Bytes(), 30))
		}
		return stdout.Bytes(), nil
	}

	const builderModule = "skewgate.invalid/binbuilder"
	if err := os.WriteFile(filepath.Join(work, "go.mod"), []byte("module "+builderModule+"\n"), 0o644); err != nil {
		return err
	}
	raw, err := goCmd("mod", "download", "-json", module.path+"@"+version)
	if err != nil {
		return err
	}
	var dl moduleDownload
	if err := json.Unmarshal(raw, &dl); err != nil {
		return fmt.Errorf("decoding go mod download output: %w", err)
	}
	if dl.Error != "" {
		return fmt.Errorf("downloading %s@%s: %s", module.path, version, dl.Error)
	}
	upstreamGoMod, err := os.ReadFile(dl.GoMod)
	if err != nil {
		return err
	}
	upstream, err := parseGoMod(upstreamGoMod)
	if err != nil {
		return fmt.Errorf("%s@%s go.mod: %w", module.path, version, err)
	}
	infoRaw, err := os.ReadFile(dl.Info)
	if err != nil {
		return err
	}
	var info struct{ Time time.Time }
	if err := json.Unmarshal(infoRaw, &info); err != nil {
		return fmt.Errorf("decoding %s: %w", dl.Info, err)
	}

	builderGoMod, err := renderBuilderGoMod(builderModule, module, version, upstream)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(work, "go.mod"), builderGoMod, 0o644); err != nil {
		return err
	}
	ldflags, err := versionLDFlags(module, version, info.Time)
	if err != nil {
		return err
	}
	args := []string{"build", "-trimpath", "-ldflags", ldflags}
	if len(module.tags) > 0 {
		args = append(args, "-tags", strings.Join(module.tags, ","))
	}
	// A trailing separator makes go build write every command into out, named after its package.
	args = append(append(args, "-o", out+string(filepath.Separator)), packages...)
	_, err = goCmd(args...)
	return err
}

// goModFile holds the parts of an upstream go.mod that the builder module must reproduce.
type goModFile struct {
	goVersion string
	// godebug settings ("key=value") change runtime defaults of the main module's binaries, so the
	// builder copies them to behave like the upstream build.
	godebug []string
	// localReplacements are module paths that upstream replaces with directories inside its own
	// repository (the Kubernetes staging modules).
	localReplacements []string
}

// parseGoMod reads the go, godebug and replace directives of a go.mod, in single-line and block
// form. It is deliberately small: upstream go.mod files are machine-formatted.
func parseGoMod(data []byte) (goModFile, error) {
	var f goModFile
	block := ""
	for n, line := range strings.Split(string(data), "\n") {
		if i := strings.Index(line, "//"); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if block != "" {
			if fields[0] == ")" {
				block = ""
				continue
			}
			if err := f.addDirective(block, fields); err != nil {
				return goModFile{}, fmt.Errorf("line %d: %w", n+1, err)
			}
			continue
		}
		if len(fields) == 2 && fields[1] == "(" {
			block = fields[0]
			continue
		}
		if err := f.addDirective(fields[0], fields[1:]); err != nil {
			return goModFile{}, fmt.Errorf("line %d: %w", n+1, err)
		}
	}
	if block != "" {
		return goModFile{}, fmt.Errorf("unterminated %s block", block)
	}
	if f.goVersion == "" {
		return goModFile{}, errors.New("no go directive")
	}
	return f, nil
}

func (f *goModFile) addDirective(verb string, args []string) error {
	switch verb {
	case "go":
		if len(args) != 1 {
			return fmt.Errorf("malformed go directive %q", args)
		}
		f.goVersion = args[0]
	case "godebug":
		if len(args) != 1 || !strings.Contains(args[0], "=") {
			return fmt.Errorf("malformed godebug directive %q", args)
		}
		f.godebug = append(f.godebug, args[0])
	case "replace":
		arrow := -1
		for i, a := range args {
			if a == "=>" {
				arrow = i
			}
		}
		if arrow < 1 || arrow == len(args)-1 {
			return fmt.Errorf("malformed replace directive %q", args)
		}
		target := args[arrow+1]
		if strings.HasPrefix(target, "./") || strings.HasPrefix(target, "../") || strings.HasPrefix(target, "/") {
			f.localReplacements = append(f.localReplacements, args[0])
		}
	}
	return nil
}

// renderBuilderGoMod writes the go.mod of the throw-away builder module. For Kubernetes every
// staging module that upstream replaces with a local directory is replaced with its published
// v0.Y.Z release instead, because those directories are not part of the k8s.io/kubernetes module zip.
func renderBuilderGoMod(module string, r *moduleRecipe, version string, upstream goModFile) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "module %s\n\ngo %s\n", module, upstream.goVersion)
	if len(upstream.godebug) > 0 {
		b.WriteString("\ngodebug (\n")
		for _, d := range upstream.godebug {
			fmt.Fprintf(&b, "\t%s\n", d)
		}
		b.WriteString(")\n")
	}
	fmt.Fprintf(&b, "\nrequire %s %s\n", r.path, version)
	if !r.kubernetes {
		return b.Bytes(), nil
	}
	if len(upstream.localReplacements) == 0 {
		return nil, fmt.Errorf("%s@%s replaces no staging modules; its go.mod layout is not the expected one", r.path, version)
	}
	v, err := parseReleaseVersion(version)
	if err != nil {
		return nil, err
	}
	b.WriteString("\nreplace (\n")
	for _, m := range upstream.localReplacements {
		fmt.Fprintf(&b, "\t%s => %s %s\n", m, m, stagingVersion(v))
	}
	b.WriteString(")\n")
	return b.Bytes(), nil
}

// versionLDFlags strips the symbol tables and stamps the version where module's release build
// does.
func versionLDFlags(module *moduleRecipe, version string, released time.Time) (string, error) {
	if module.kubernetes {
		return kubeVersionLDFlags(version, released)
	}
	flags := "-s -w"
	if module.versionVariable != "" {
		flags += " -X " + module.versionVariable + "=" + version
	}
	return flags, nil
}

// kubeVersionLDFlags stamps the version variables the way Kubernetes' own build does
// (hack/lib/version.sh). Since 1.31 the binary version that drives emulation and compatibility
// versions is parsed from gitVersion, so an unstamped build would believe it is v0.0.0.
func kubeVersionLDFlags(version string, released time.Time) (string, error) {
	v, err := parseReleaseVersion(version)
	if err != nil {
		return "", err
	}
	values := []struct{ name, value string }{
		{"gitVersion", version},
		{"gitMajor", strconv.Itoa(v.major)},
		{"gitMinor", strconv.Itoa(v.minor)},
		{"gitTreeState", "clean"},
		// The module proxy does not expose the commit; the tag's time keeps builds reproducible.
		{"gitCommit", ""},
		{"buildDate", released.UTC().Format(time.RFC3339)},
	}
	flags := []string{"-s", "-w"}
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		for _, kv := range values {
			flags = append(flags, "-X", pkg+"."+kv.name+"="+kv.value)
		}
	}
	return strings.Join(flags, " "), nil
}

// LastLines returns the last n lines of out, for the logs of failed commands.
func LastLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
