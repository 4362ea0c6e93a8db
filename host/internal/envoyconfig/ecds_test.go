package envoyconfig

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func TestWriteECDSFileReplacesTheFileAndLeavesNothingElse(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "skewgate.yaml")
	for _, content := range [][]byte{[]byte("version_info: '1'\n"), []byte("version_info: '2'\n"), {}} {
		if err := WriteECDSFile(target, content); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(target)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, content) {
			t.Fatalf("file holds %q, want %q", got, content)
		}
	}
	info, err := os.Stat(target)
	if err != nil {
		t.Fatal(err)
	}
	if mode := info.Mode().Perm(); mode != 0o644 {
		t.Errorf("mode %v, want 0644 so an Envoy running as another user can read it", mode)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the resource file: %v", len(entries), entries)
	}
}

// TestWriteECDSFileNeverExposesAPartialFile reads the file while it is being
// rewritten: every read must see one complete version.
func TestWriteECDSFileNeverExposesAPartialFile(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "skewgate.yaml")
	versions := [][]byte{
		bytes.Repeat([]byte("a"), 256<<10),
		bytes.Repeat([]byte("b"), 64<<10),
	}
	if err := WriteECDSFile(target, versions[0]); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	var reads, torn int
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			got, err := os.ReadFile(target)
			if err != nil {
				torn++ // the path must always exist
				continue
			}
			reads++
			if !bytes.Equal(got, versions[0]) && !bytes.Equal(got, versions[1]) {
				torn++
			}
		}
	})
	for i := range 100 {
		if err := WriteECDSFile(target, versions[i%2]); err != nil {
			close(done)
			wg.Wait()
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
	if torn > 0 {
		t.Fatalf("%d of %d reads saw a missing or partial file", torn, reads+torn)
	}
	if reads == 0 {
		t.Fatal("the reader never ran")
	}
}

func TestWriteECDSFileFailsCleanlyWithoutItsDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := WriteECDSFile(filepath.Join(dir, "missing", "skewgate.yaml"), []byte("x")); err == nil {
		t.Fatal("wrote into a directory that does not exist")
	}
	if err := WriteECDSFile(dir+string(filepath.Separator), []byte("x")); err == nil {
		t.Fatal("accepted a directory as the file path")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("failed writes left %v behind", entries)
	}
}
