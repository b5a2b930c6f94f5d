package queue

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// crashBatchEnv makes the crash child write batches (batchCrashChild).
const crashBatchEnv = "SYNCD_QUEUE_CRASH_BATCH"

const crashBatchSize = 51

// batchCrashChild writes batches of 51 creates forever, printing each
// batch's name once it is acknowledged, until its parent kills it.
func batchCrashChild(s *Store) {
	out := bufio.NewWriter(os.Stdout)
	for b := 0; ; b++ {
		name := fmt.Sprintf("p%d-b%d", os.Getpid(), b)
		ws := make([]Write, crashBatchSize)
		for i := range ws {
			ws[i] = Write{Op: OpCreate, AccountID: "acct", EntityType: "note", EntityID: fmt.Sprintf("%s-%02d", name, i),
				Data: json.RawMessage(fmt.Sprintf(`{"i":%d,"pad":"%s"}`, i, strings.Repeat("x", 200)))}
		}
		if _, err := s.ApplyBatch(context.Background(), ws, b%2 == 0); err != nil {
			fmt.Println("apply:", err)
			os.Exit(4)
		}
		fmt.Fprintln(out, name)
		out.Flush()
	}
}

// A process SIGKILLed while it writes batches leaves each batch whole or
// absent: never part of one, and every acknowledged one whole.
func TestBatchCrashAllOrNone(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("spawns subprocesses; run without -short")
	}
	path := filepath.Join(t.TempDir(), "syncd.db")
	acked := map[string]bool{}
	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashEnv+"="+path, crashBatchEnv+"=1")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		for n := 0; n < 5+5*round && sc.Scan(); n++ {
			if strings.HasPrefix(sc.Text(), "open:") || strings.HasPrefix(sc.Text(), "apply:") {
				t.Fatalf("child: %s", sc.Text())
			}
			acked[sc.Text()] = true
		}
		cmd.Process.Signal(syscall.SIGKILL)
		for sc.Scan() {
			acked[sc.Text()] = true
		}
		cmd.Wait()

		s, err := Open(path, Config{})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Check(); err != nil {
			t.Errorf("round %d: invariants: %v", round, err)
		}
		// Count each batch's entities.
		count := map[string]int{}
		after := ""
		for {
			es, next, err := s.ListEntities("acct", "note", ListOptions{Limit: 1000, After: after})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range es {
				count[e.ID[:strings.LastIndexByte(e.ID, '-')]]++
			}
			if next == "" {
				break
			}
			after = next
		}
		for name, n := range count {
			if n != crashBatchSize {
				t.Errorf("round %d: batch %s has %d of its %d writes", round, name, n, crashBatchSize)
			}
		}
		for name := range acked {
			if count[name] != crashBatchSize {
				t.Errorf("round %d: acknowledged batch %s has %d writes", round, name, count[name])
			}
		}
		s.Close()
	}
}
