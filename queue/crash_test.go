package queue

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

const crashEnv = "SYNCD_QUEUE_CRASH_CHILD"

// crashChild is the child half of TestCrashMidWriteStream: when the test
// binary runs with crashEnv set, it writes to that file from concurrent
// writers forever, printing the operation id of every acknowledged write,
// until its parent kills it.
func crashChild() bool {
	path := os.Getenv(crashEnv)
	if path == "" {
		return false
	}
	s, err := Open(path, Config{})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(3)
	}
	if os.Getenv(crashBatchEnv) != "" {
		batchCrashChild(s)
		return true
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	ack := func(id string) {
		mu.Lock()
		fmt.Fprintln(out, id)
		out.Flush()
		mu.Unlock()
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(w)))
			for i := 0; ; i++ {
				id := fmt.Sprintf("p%d-w%d-e%d", os.Getpid(), w, i/3)
				var wr Write
				switch i % 3 {
				case 0:
					wr = Write{Op: OpCreate, EntityID: id, Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
				case 1:
					wr = Write{Op: OpUpdate, EntityID: id, Data: json.RawMessage(fmt.Sprintf(`{"m":%d}`, rnd.IntN(100)))}
				case 2:
					if rnd.IntN(2) == 0 {
						wr = Write{Op: OpDelete, EntityID: id}
					} else {
						wr = Write{Op: OpUpdate, EntityID: id, Data: json.RawMessage(`{"last":true}`)}
					}
				}
				wr.AccountID, wr.EntityType = "acct", "note"
				r, err := s.Apply(ctx, wr)
				if err != nil {
					fmt.Println("apply:", err)
					os.Exit(4)
				}
				ack(r.Operation.ID)
				// Some ops are being sent when the kill comes.
				if rnd.IntN(4) == 0 {
					if op, err := s.Claim(ctx, "acct", "child", 1<<40); err == nil && rnd.IntN(2) == 0 {
						s.Complete(ctx, op.ID, "child", Completion{ServerID: "srv-" + op.EntityID})
					}
				}
			}
		})
	}
	wg.Wait()
	return true
}

// A process SIGKILLed in the middle of a stream of concurrent writes
// leaves a file where every acknowledged write is present and every
// invariant holds: in particular each pending entity has its operation.
func TestCrashMidWriteStream(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("spawns subprocesses; run without -short")
	}
	path := filepath.Join(t.TempDir(), "syncd.db")
	var acked []string
	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashEnv+"="+path)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		target := 300 + 200*round
		n := 0
		for n < target && sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "open:") || strings.HasPrefix(line, "apply:") {
				t.Fatalf("child: %s", line)
			}
			acked = append(acked, line)
			n++
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// Acknowledgements printed before the kill landed also count.
		for sc.Scan() {
			acked = append(acked, sc.Text())
		}
		cmd.Wait()
		if n < target {
			t.Fatalf("round %d: child stopped after %d writes", round, n)
		}

		s, err := Open(path, Config{})
		if err != nil {
			t.Fatalf("reopen after kill: %v", err)
		}
		if err := s.Check(); err != nil {
			t.Errorf("round %d: invariants after SIGKILL: %v", round, err)
		}
		for _, id := range acked {
			if _, err := s.GetOperation(id); err != nil {
				t.Errorf("round %d: acknowledged write %s lost: %v", round, id, err)
			}
		}
		st, _ := s.Stats()
		if st.Counts[StateSending] != 0 {
			t.Errorf("round %d: %d operations still sending after reopen", round, st.Counts[StateSending])
		}
		t.Logf("round %d: %d acknowledged writes, counts %v", round, len(acked), st.Counts)
		s.Close()
	}
}
