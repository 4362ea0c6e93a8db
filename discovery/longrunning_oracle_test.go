// An external test: discoverytest builds on discovery.
package discovery_test

import (
	"net/http"
	"net/url"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/server/filters"
	"k8s.io/klog/v2"

	. "github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
)

// kubeAPIServerLongRunning is the check kube-apiserver installs
// (k8s.io/kubernetes pkg/controlplane/apiserver, BuildGenericConfig), with
// the request parsing it runs first.
var (
	kubeAPIServerLongRunning = filters.BasicLongRunningRequestCheck(
		sets.NewString("watch", "proxy"),
		sets.NewString("attach", "exec", "proxy", "log", "portforward"),
	)
	kubeAPIServerRequestInfo = request.RequestInfoFactory{
		APIPrefixes:          sets.NewString("api", "apis"),
		GrouplessAPIPrefixes: sets.NewString("api"),
	}
	quietKlog sync.Once
)

// kubeAPIServerNonMutatingVerbs are the verbs kube-apiserver's max-in-flight
// filter counts against --max-requests-inflight rather than the mutating limit.
var kubeAPIServerNonMutatingVerbs = sets.NewString("get", "list", "watch")

// upstreamClass is kube-apiserver's classification of the request Go's HTTP
// server builds from the target; ok is false for a target it refuses.
func upstreamClass(method, target string) (class RequestClass, ok bool) {
	// The factory logs every query it cannot decode; the probes provoke that on purpose.
	quietKlog.Do(func() { klog.SetLogger(logr.Discard()) })
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return RequestClass{}, false
	}
	r := &http.Request{Method: method, URL: u, RequestURI: target}
	info, _ := kubeAPIServerRequestInfo.NewRequestInfo(r)
	return RequestClass{LongRunning: kubeAPIServerLongRunning(r, info), Mutating: !kubeAPIServerNonMutatingVerbs.Has(info.Verb)}, true
}

// The long-running classification is kube-apiserver's: on every probe
// (captured resources and their subresources, non-resource paths, seeded
// random requests), Target.Class agrees with BasicLongRunningRequestCheck
// as kube-apiserver configures it and with its max-in-flight filter's
// mutating verbs, on the RequestInfo its factory derives; an upgrade is
// long-running whatever upstream's check says.
func TestTargetClassIsKubeAPIServersClassification(t *testing.T) {
	probes := discoverytest.LongRunningProbes()
	var compared, longRunning int
	for _, p := range probes {
		want, ok := upstreamClass(p.Method, p.Target)
		if !ok {
			continue
		}
		target := ParseTarget(p.Method, p.Target)
		if got := target.Class(p.Method, false); got != want {
			t.Errorf("%s %s: Class %+v, kube-apiserver %+v", p.Method, p.Target, got, want)
		}
		if !target.Class(p.Method, true).LongRunning {
			t.Errorf("%s %s as an upgrade: not long-running", p.Method, p.Target)
		}
		compared++
		if want.LongRunning {
			longRunning++
		}
	}
	if compared < 5000 || longRunning < 500 {
		t.Fatalf("compared %d probes, %d of them long-running; the probes do not exercise the rule", compared, longRunning)
	}
	t.Logf("%d probes agree, %d of them long-running", compared, longRunning)
}
