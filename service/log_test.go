package service

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The log file starts over past its limit, keeping one old file: the
// newest lines are always there, whole, and the two files never take
// more than twice the limit.
func TestLogFileRotates(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), LogFileName)
	const max = 100
	l, err := openLogFile(path, max)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for i := range 20 {
		line := fmt.Sprintf("level=INFO msg=\"line %03d\"\n", i) // 26 bytes: three fit
		lines = append(lines, line)
		if _, err := fmt.Fprint(l, line); err != nil {
			t.Fatal(err)
		}
		if st, err := os.Stat(path); err != nil || st.Size() > max {
			t.Fatalf("after line %d: %v, size %d > %d", i, err, st.Size(), max)
		}
	}
	old, _ := os.ReadFile(path + ".1")
	cur, _ := os.ReadFile(path)
	if len(old) == 0 || len(old) > max {
		t.Fatalf("old file holds %d bytes", len(old))
	}
	if got, want := string(old)+string(cur), strings.Join(lines, ""); !strings.HasSuffix(want, got) || !strings.HasPrefix(string(old), "level=") {
		t.Fatalf("the two files hold %q, not the newest whole lines", got)
	}

	// A restart appends to the file it finds.
	l.Close()
	if _, err := fmt.Fprint(l, "after close\n"); err == nil {
		t.Error("a write after Close succeeded")
	}
	l, err = openLogFile(path, max)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(l, "x\n")
	if after, _ := os.ReadFile(path); string(after) != string(cur)+"x\n" {
		t.Fatalf("reopened log holds %q, want %q", after, string(cur)+"x\n")
	}
	// A line longer than the limit goes out whole, in a file of its own.
	long := strings.Repeat("y", 3*max) + "\n"
	fmt.Fprint(l, long)
	if got, _ := os.ReadFile(path); string(got) != long {
		t.Fatalf("long line: file holds %d bytes, want the line alone", len(got))
	}
	l.Close()
}

// When the old file cannot be replaced (on Windows, while another
// program holds it open), the log goes on in the same file and tries
// again at each write; at twice the limit it starts over in place.
func TestLogFileRenameFails(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), LogFileName)
	// A directory that is not empty cannot be replaced by a rename.
	if err := os.MkdirAll(filepath.Join(path+".1", "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := openLogFile(path, 100)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var all string
	for i := range 7 { // 182 bytes: past the limit, short of twice it
		line := fmt.Sprintf("level=INFO msg=\"line %03d\"\n", i)
		all += line
		if _, err := fmt.Fprint(l, line); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := os.ReadFile(path); string(got) != all {
		t.Fatalf("log holds %q, want every line %q", got, all)
	}
	for i := 7; i < 20; i++ {
		fmt.Fprintf(l, "level=INFO msg=\"line %03d\"\n", i)
		if st, err := os.Stat(path); err != nil || st.Size() > 200 {
			t.Fatalf("after line %d: %v, size %d > 200", i, err, st.Size())
		}
	}
	if got, _ := os.ReadFile(path); !strings.HasSuffix(string(got), "line 019\"\n") {
		t.Fatalf("the newest line is missing: %q", got)
	}
}
