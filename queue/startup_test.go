package queue

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

var queueCache = flag.String("queue.cache", "", "directory where BenchmarkStartup keeps the queues it builds, to reuse them across runs (default: a temporary directory, removed after)")

// loadFormat names the file layout loadQueue produces; a cached queue of
// another layout is built again.
const loadFormat = "schema3"

// cachedQueue returns the path of a queue of spec in dir. With
// -queue.cache, the queue is built once per layout, kept there, and
// copied.
func cachedQueue(tb testing.TB, dir string, spec loadSpec) string {
	tb.Helper()
	path := filepath.Join(dir, "syncd.db")
	build := func(path string) {
		t0 := time.Now()
		loadQueue(tb, path, spec)
		tb.Logf("built a queue of %d creates in %v", spec.n, time.Since(t0).Round(time.Millisecond))
	}
	if *queueCache == "" {
		build(path)
		return path
	}
	master := filepath.Join(*queueCache, fmt.Sprintf("%s-n%d-p%d.db", loadFormat, spec.n, spec.payloadBytes))
	if _, err := os.Stat(master); err != nil {
		tmp := master + ".building"
		os.Remove(tmp)
		build(tmp)
		if err := os.Rename(tmp, master); err != nil {
			tb.Fatal(err)
		}
	}
	if err := copyFile(master, path); err != nil {
		tb.Fatal(err)
	}
	return path
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// unsyncFreelist leaves the file as a process killed after a commit that
// did not write the free list leaves it: the next open must rebuild the
// free list.
func unsyncFreelist(tb testing.TB, path string) {
	tb.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		tb.Fatal(err)
	}
	// Even a commit that changes nothing writes the meta page.
	if err := db.Update(func(tx *bolt.Tx) error { return nil }); err != nil {
		tb.Fatal(err)
	}
	if err := db.Close(); err != nil {
		tb.Fatal(err)
	}
}

// startCost is what one start-up cost.
type startCost struct {
	elapsed   time.Duration
	readBytes int64 // read from storage (the file's pages were dropped from the cache first)
	resident  int   // the file's pages in the page cache after the start
	filePages int
	rss       int64 // resident set after the start (whole process)
	rssFile   int64 // of which file-backed
	evicted   bool  // the file's pages could be dropped before the start
	// measuredIO: the start began with none of the file in the page cache,
	// so readBytes and resident are what it touched.
	measuredIO bool
	// idleReadBytes: read by `syncd run` in its first 2 s after the API
	// answered (cold runs only).
	idleReadBytes int64
	idleMeasured  bool
	// inProcess: measured in this process, whose resident set says little
	// (the benchmark's own heap); rssFile is the data file's share.
	inProcess bool
}

func (c startCost) String() string {
	s := fmt.Sprintf("%7.1fms", float64(c.elapsed.Microseconds())/1000)
	if c.evicted && c.measuredIO {
		s += fmt.Sprintf(", read %8.1f KB (%6d of %7d pages in cache, %5.1f%%)", float64(c.readBytes)/1024, c.resident, c.filePages, 100*float64(c.resident)/float64(max(c.filePages, 1)))
	}
	if c.inProcess {
		s += fmt.Sprintf(", %6.1f MB of the file mapped in", float64(c.rssFile)/(1<<20))
	} else {
		s += fmt.Sprintf(", RSS %6.1f MB", float64(c.rss)/(1<<20))
	}
	if c.idleMeasured {
		s += fmt.Sprintf("; %.1f KB read in the next 2 s", float64(c.idleReadBytes)/1024)
	}
	return s
}

// evictIf drops the file's pages from the page cache when cold is set (a
// start after a reboot, or after the pages were needed elsewhere), and
// reads it through otherwise (a restart right after a stop).
func evictIf(tb testing.TB, path string, cold bool) startCost {
	tb.Helper()
	var c startCost
	if cold {
		var err error
		if c.evicted, err = evictFile(path); err != nil {
			tb.Fatal(err)
		}
		return c
	}
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if _, err := io.Copy(io.Discard, f); err != nil {
		tb.Fatal(err)
	}
	return c
}

// measureOpen measures, in this process, what `syncd run` does with the
// queue before its API answers: CompactIfWorthIt, Open, and the reads the
// daemon makes at start (the totals for /v1/status, the event bus's last
// seq, the stored session, the workers' first wake-up).
func measureOpen(tb testing.TB, path string, cold bool) startCost {
	tb.Helper()
	c := evictIf(tb, path, cold)
	runtime.GC()
	read0, _ := procIO(0)
	_, file0, _ := procRSS(0)
	t0 := time.Now()
	if _, _, _, err := CompactIfWorthIt(path); err != nil {
		tb.Fatal(err)
	}
	s, err := Open(path, Config{})
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := s.StatsFor(""); err != nil {
		tb.Fatal(err)
	}
	if _, err := s.LastEventSeq(); err != nil {
		tb.Fatal(err)
	}
	if _, err := s.LoadSession(); err != nil {
		tb.Fatal(err)
	}
	if _, _, err := s.NextWake("acct-7f3a2c"); err != nil {
		tb.Fatal(err)
	}
	c.elapsed = time.Since(t0)
	read1, _ := procIO(0)
	c.readBytes = read1 - read0
	c.measuredIO, c.inProcess = cold, true
	rss, file1, _ := procRSS(0)
	c.rss, c.rssFile = rss, file1-file0
	c.resident, c.filePages, _ = residentPages(path)
	if err := s.Close(); err != nil {
		tb.Fatal(err)
	}
	return c
}

// TestStartupReadsLittle: a start after a clean stop reads a few pages of
// the file, whatever the queue's size, and so does one after a kill that
// followed a commit with a short free list. After a commit that did not
// write the free list, Open walks the trees to rebuild it.
func TestStartupReadsLittle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "syncd.db")
	loadQueue(t, path, loadSpec{n: 3000, payloadBytes: 100})
	const most = 64 // pages
	clean := measureOpen(t, path, true)
	t.Logf("after a clean stop:    %v", clean)
	if m, err := readFileMeta(path); err != nil || !m.freelistKnown {
		t.Fatalf("no free list on disk after a clean stop: %+v %v", m, err)
	}
	if clean.evicted && clean.resident > most {
		t.Errorf("a start after a clean stop brought %d of the file's %d pages into the page cache; want at most %d", clean.resident, clean.filePages, most)
	}
	if !clean.evicted {
		t.Logf("the file's pages could not be dropped from the page cache here (%v); pages read not checked", pageCacheMeasured)
	}
	unsyncFreelist(t, path)
	crash := measureOpen(t, path, true)
	t.Logf("after an unclean stop: %v", crash)
}

// BenchmarkStartup prints what a start costs at 1,000 and at 1,000,000
// queued creates, side by side: in this process (CompactIfWorthIt, Open
// and the daemon's first reads), after a clean stop and after a process
// was killed, and for the real `syncd run` until its API answers. The
// file's pages are dropped from the page cache first, so pages read are
// real reads. The 1M queue takes a minute or two to build; -queue.cache
// keeps it for the next run.
func BenchmarkStartup(b *testing.B) {
	sizes := []int{1000, 1000000}
	paths := make([]string, len(sizes))
	for i, n := range sizes {
		paths[i] = cachedQueue(b, b.TempDir(), loadSpec{n: n, payloadBytes: 100})
	}
	bin := buildSyncd(b)
	type row struct {
		name string
		cost func(path string) startCost
	}
	rows := []row{
		{"open after a stop, cold", func(path string) startCost { return measureOpen(b, path, true) }},
		{"open after a kill, cold", func(path string) startCost { unsyncFreelist(b, path); return measureOpen(b, path, true) }},
		{"open after a kill, warm", func(path string) startCost { unsyncFreelist(b, path); return measureOpen(b, path, false) }},
		{"syncd run after a stop, warm", func(path string) startCost { return measureRun(b, bin, filepath.Dir(path), false) }},
		{"syncd run after a stop, cold", func(path string) startCost { return measureRun(b, bin, filepath.Dir(path), true) }},
	}
	costs := make([][]startCost, len(rows))
	for b.Loop() {
		for r, row := range rows {
			costs[r] = costs[r][:0]
			for _, p := range paths {
				costs[r] = append(costs[r], row.cost(p))
			}
		}
	}
	for r, row := range rows {
		for i, n := range sizes {
			fmt.Printf("startup %-30s n=%-8d %v\n", row.name+":", n, costs[r][i])
		}
	}
	warm, cold := costs[3][1], costs[4][1]
	b.ReportMetric(float64(warm.elapsed.Microseconds())/1000, "ms_to_answer_warm@1M")
	b.ReportMetric(float64(cold.elapsed.Microseconds())/1000, "ms_to_answer_cold@1M")
	b.ReportMetric(float64(cold.readBytes)/(1<<20), "MB_read_cold@1M")
	b.ReportMetric(float64(warm.rss)/(1<<20), "MB_RSS@1M")
}

// buildSyncd builds the syncd binary for BenchmarkStartup.
func buildSyncd(tb testing.TB) string {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), "syncd")
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if out, err := exec.Command(goTool, "build", "-o", bin, "github.com/syncd/syncd/cmd/syncd").CombinedOutput(); err != nil {
		tb.Fatalf("build syncd: %v\n%s", err, out)
	}
	return bin
}

// measureRun starts `syncd run` on dataDir and measures the time until
// its API answers GET /v1/status, what it read meanwhile and its resident
// set then; then stops it with SIGTERM.
func measureRun(tb testing.TB, bin, dataDir string, cold bool) startCost {
	tb.Helper()
	path := filepath.Join(dataDir, "syncd.db")
	c := evictIf(tb, path, cold)
	// No session: nothing is sent. The remote is never reached.
	cmd := exec.Command(bin, "run", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--remote", "http://127.0.0.1:9", "--log-level", "warn")
	cmd.Env = append(os.Environ(), "HOME="+dataDir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	var url, tokenPath string
	for tokenPath == "" && sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), "syncd: listening on "); ok {
			url = u
		}
		if tp, ok := strings.CutPrefix(sc.Text(), "syncd: API token in "); ok {
			tokenPath = tp
		}
	}
	if url == "" || tokenPath == "" {
		cmd.Process.Kill()
		err := cmd.Wait()
		tb.Fatalf("syncd run did not listen (%v, scan %v); stderr:\n%s", err, sc.Err(), stderr.String())
	}
	token, err := os.ReadFile(tokenPath)
	if err != nil {
		tb.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(context.Background(), "GET", url+"/v1/status", nil)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	c.elapsed = time.Since(t0)
	if res.StatusCode != 200 {
		tb.Fatalf("GET /v1/status: %s", res.Status)
	}
	c.readBytes, _ = procIO(cmd.Process.Pid)
	c.measuredIO = cold
	c.rss, c.rssFile, _ = procRSS(cmd.Process.Pid)
	c.resident, c.filePages, _ = residentPages(path)
	if cold {
		// What the daemon's own goroutines (sweeper, totals, workers,
		// prober) read once it runs idle: nothing of the queue's size.
		time.Sleep(2 * time.Second)
		read, _ := procIO(cmd.Process.Pid)
		c.idleReadBytes, c.idleMeasured = read-c.readBytes, true
	}
	cmd.Process.Signal(syscall.SIGTERM)
	go io.Copy(io.Discard, stdout)
	if err := cmd.Wait(); err != nil {
		tb.Fatalf("syncd run: %v; stderr:\n%s", err, stderr.String())
	}
	return c
}
