package testcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"time"
)

const etcdStartAttempts = 3

// startEtcd starts a single-member etcd on loopback with its data in dir and waits until it
// reports healthy. It retries with fresh ports when one was taken between choosing and binding.
func startEtcd(ctx context.Context, log Logger, binary, dir string, timeout time.Duration) (*Process, string, error) {
	var lastErr error
	for attempt := 1; attempt <= etcdStartAttempts; attempt++ {
		ports, err := FreePorts(2)
		if err != nil {
			return nil, "", err
		}
		clientURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
		peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
		argv := []string{binary,
			"--name=skewgate-test",
			"--data-dir=" + filepath.Join(dir, "etcd-data-"+strconv.Itoa(attempt)),
			"--listen-client-urls=" + clientURL,
			"--advertise-client-urls=" + clientURL,
			"--listen-peer-urls=" + peerURL,
			"--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=skewgate-test=" + peerURL,
			"--initial-cluster-state=new",
			// Test data is thrown away, so durability is not worth the fsync latency.
			"--unsafe-no-fsync",
			"--log-level=warn",
		}
		proc, err := StartProcess("etcd", filepath.Join(dir, "etcd.log"), argv)
		if err != nil {
			return nil, "", err
		}
		err = waitEtcdHealthy(ctx, proc, clientURL, timeout)
		if err == nil {
			return proc, clientURL, nil
		}
		proc.Stop(5 * time.Second)
		lastErr = err
		if !proc.LogContains(addressInUse) {
			break
		}
	}
	log.Logf("etcd failed to start; last lines of its log:\n%s", tailOfFile(filepath.Join(dir, "etcd.log"), 40))
	return nil, "", lastErr
}

func waitEtcdHealthy(ctx context.Context, proc *Process, clientURL string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		if done, err := proc.Exited(); done {
			return fmt.Errorf("etcd exited before becoming healthy: %v", err)
		}
		if healthy(ctx, client, clientURL+"/health") {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcd at %s not healthy after %s", clientURL, timeout)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func healthy(ctx context.Context, client *http.Client, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var body struct {
		Health string `json:"health"`
	}
	data, err := io.ReadAll(resp.Body)
	return err == nil && resp.StatusCode == http.StatusOK && json.Unmarshal(data, &body) == nil && body.Health == "true"
}
