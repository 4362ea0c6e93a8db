package kubeadmskewgate

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var deployREADME = filepath.Join("..", "..", "deploy", "kubeadm", README)

// The load balancer's command reads exactly the certificates StartLoadBalancer copies, as the
// README tells users to copy them.
func TestTheLoadBalancerReadsTheCertificatesTheREADMESaysToCopy(t *testing.T) {
	blocks, err := ShellBlocks(deployREADME, LoadBalancerSection)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 2 {
		t.Fatalf("%d sh blocks under %q, want 2", len(blocks), LoadBalancerSection)
	}
	if !strings.HasPrefix(blocks[0], "kubeadm init phase certs all ") {
		t.Errorf("first block %q: want the certificates made by kubeadm", blocks[0])
	}
	if !strings.HasPrefix(blocks[1], "skewgate serve ") {
		t.Errorf("second block %q: want skewgate serve", blocks[1])
	}
	var read []string
	for _, m := range regexp.MustCompile(`=pki/(\S+)`).FindAllStringSubmatch(blocks[1], -1) {
		if !slices.Contains(read, m[1]) {
			read = append(read, m[1])
		}
	}
	slices.Sort(read)
	copied := slices.Sorted(slices.Values(loadBalancerFiles))
	if !slices.Equal(read, copied) {
		t.Errorf("skewgate serve reads pki/%v, the harness copies %v", read, copied)
	}
	readme, err := os.ReadFile(deployREADME)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range loadBalancerFiles {
		if !strings.Contains(string(readme), "`"+name+"`") {
			t.Errorf("the README does not tell users to copy %s", name)
		}
	}
}
