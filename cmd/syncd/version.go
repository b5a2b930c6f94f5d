package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// version is the release's version, set by a release build:
//
//	go build -ldflags "-X main.version=v1.2.0" ./cmd/syncd
//
// Without it the module's version is used (a `go install
// github.com/syncd/syncd/cmd/syncd@v1.2.0` knows it), else "devel".
var version string

// versionInfo is what `syncd version` prints and syncd_build_info
// carries.
type versionInfo struct {
	Version string `json:"version"`
	// Commit is the VCS revision the binary was built from ("unknown"
	// when built without VCS information, as with -buildvcs=false),
	// Modified whether the work tree had uncommitted changes.
	Commit    string `json:"commit"`
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// buildVersion reads the version from the binary (runtime/debug).
func buildVersion() versionInfo {
	v := versionInfo{Version: version, Commit: "unknown", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if ok {
		if v.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	if v.Version == "" {
		v.Version = "devel"
	}
	return v
}

func (v versionInfo) String() string {
	commit := v.Commit
	if len(commit) > 12 {
		commit = commit[:12]
	}
	if v.Modified {
		commit += "+modified"
	}
	return fmt.Sprintf("syncd %s (commit %s, %s, %s)", v.Version, commit, v.GoVersion, v.Platform)
}

// cmdVersion is `syncd version [--json]`.
func cmdVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "version [--json]", stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args, "version"); err != nil {
		return err
	}
	v := buildVersion()
	if *asJSON {
		return printJSON(stdout, v)
	}
	_, err := fmt.Fprintln(stdout, v)
	return err
}

// registerBuildMetrics adds to the daemon's registry what every Go
// service exports: syncd_build_info{version,commit,goversion} (always
// 1), the Go runtime's and the process's collectors.
func registerBuildMetrics(reg *prometheus.Registry) error {
	v := buildVersion()
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "syncd_build_info",
		Help:        "The running syncd's version, commit and Go version, as labels; always 1.",
		ConstLabels: prometheus.Labels{"version": v.Version, "commit": v.Commit, "goversion": v.GoVersion},
	})
	info.Set(1)
	for _, c := range []prometheus.Collector{
		info,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	return nil
}

// newFlagSet is a command's flag set: errors and usage go to stderr,
// and -h prints "usage: syncd USAGE" and the flags.
func newFlagSet(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: syncd "+usage)
		fs.PrintDefaults()
	}
	return fs
}
