package testcluster

import (
	"strings"
	"testing"
)

func TestParseResidentMemory(t *testing.T) {
	status := "Name:\tskewgate\nVmPeak:\t 1300000 kB\nVmRSS:\t   49152 kB\nRssAnon:\t   30720 kB\n" +
		"RssFile:\t   18432 kB\nRssShmem:\t       0 kB\nThreads:\t8\n"
	m, err := parseResidentMemory([]byte(status))
	if err != nil || m.VmRSS != 48<<20 || m.RssAnon != 30<<20 || m.RssFile != 18<<20 {
		t.Errorf("parseResidentMemory = %+v, %v; want 48, 30 and 18 MiB", m, err)
	}
	cases := []struct{ name, status, want string }{
		{"no RssFile", "VmRSS:\t 10 kB\nRssAnon:\t 5 kB\n", "no RssFile"},
		{"no memory fields", "Name:\tx\n", "no RssAnon, RssFile, VmRSS"},
		{"not a number", "VmRSS:\t lots kB\nRssAnon:\t 5 kB\nRssFile:\t 5 kB\n", "VmRSS"},
		{"another unit", "VmRSS:\t 10 MB\nRssAnon:\t 5 kB\nRssFile:\t 5 kB\n", "VmRSS"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := parseResidentMemory([]byte(c.status)); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("parseResidentMemory = %v; want an error naming %q", err, c.want)
			}
		})
	}
}

func TestResidentMemoryOfARunningProcess(t *testing.T) {
	p, err := StartProcess("sleep", t.TempDir()+"/sleep.log", []string{"sleep", "30"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := p.ResidentMemory()
	if err != nil || m.VmRSS <= 0 || m.VmRSS < m.RssAnon || m.VmRSS < m.RssFile {
		t.Errorf("ResidentMemory = %+v, %v; want a positive resident set holding both parts", m, err)
	}
	p.Stop(0)
	if _, err := p.ResidentMemory(); err == nil {
		t.Error("ResidentMemory of an ended process succeeded")
	}
}
