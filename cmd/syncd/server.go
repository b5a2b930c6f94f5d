package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/remote"
)

// serverFailpointEnv names the environment variable that places a test
// failpoint in the server. "remote-after-reserve" pauses every gated
// request right after its idempotency reservation (inside the
// transaction, before the domain write) until the server stops, printing
// a line to stderr, so crash tests can SIGKILL the process exactly there.
const serverFailpointEnv = "SYNCD_FAILPOINT"

// cmdServer runs the reference remote server until ctx ends.
func cmdServer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:7420", "address to listen on (loopback unless --force-listen)")
	force := fs.Bool("force-listen", false, "allow a non-loopback --listen address")
	dataDir := fs.String("data-dir", "", "directory for the bbolt file "+remote.DefaultFileName)
	pgDSN := fs.String("postgres", "", "PostgreSQL DSN, instead of --data-dir (several servers may share one database)")
	devTokens := fs.Bool("dev-tokens", false, "DEVELOPMENT ONLY: accept any bearer token; the actor is the part before the first '.'")
	tokensFile := fs.String("tokens", "", `file of "TOKEN ACTOR" lines`)
	retention := fs.String("retention", "7d", "how long idempotency records are kept (e.g. 7d, 36h)")
	tombstones := fs.String("tombstone-retention", "30d", "how long deleted records are kept for the changes feed; a device away longer reads everything again")
	conflicts := fs.String("conflicts", "", `conflict policy per entity type, "TYPE=POLICY,..." with POLICY merge, reject or lww ("*=POLICY" or a bare POLICY: every type not listed; default merge)`)
	reject := fs.String("reject-conflicts", "", `comma-separated entity types whose policy is reject ("*": all), as --conflicts TYPE=reject; it wins over --conflicts`)
	history := fs.Int("history", remote.DefaultHistoryVersions, "versions kept per record for GET /v1/{type}/{id}/versions and the base of a conflict (0: none)")
	historyAge := fs.String("history-age", "30d", "how long a superseded version is kept; a record's current version stays")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: syncd server --listen ADDR [--data-dir DIR | --postgres DSN] [--dev-tokens | --tokens FILE] [--retention D] [--tombstone-retention D] [--conflicts TYPE=POLICY,...] [--reject-conflicts TYPES] [--history N] [--history-age D]")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, "server"); err != nil {
		return err
	}
	if (*dataDir == "") == (*pgDSN == "") {
		return fmt.Errorf("%w: server: give exactly one of --data-dir and --postgres", errUsage)
	}
	if *devTokens == (*tokensFile != "") {
		return fmt.Errorf("%w: server: give exactly one of --dev-tokens and --tokens", errUsage)
	}
	ret, err := parseRetention(*retention)
	if err != nil {
		return fmt.Errorf("%w: server: --retention: %v", errUsage, err)
	}
	tombRet, err := parseRetention(*tombstones)
	if err != nil {
		return fmt.Errorf("%w: server: --tombstone-retention: %v", errUsage, err)
	}
	var rejectTypes []string
	for _, t := range strings.Split(*reject, ",") {
		if t = strings.TrimSpace(t); t != "" {
			rejectTypes = append(rejectTypes, t)
		}
	}
	policies, err := remote.ParsePolicies(*conflicts)
	if err != nil {
		return fmt.Errorf("%w: server: --conflicts: %v", errUsage, err)
	}
	if *history < 0 {
		return fmt.Errorf("%w: server: --history %d: want 0 or more", errUsage, *history)
	}
	histAge, err := parseRetention(*historyAge)
	if err != nil {
		return fmt.Errorf("%w: server: --history-age: %v", errUsage, err)
	}
	historyVersions := *history
	if historyVersions == 0 {
		historyVersions = -1 // remote.Config: negative keeps none, zero is the default
	}
	if !*force && !loopbackAddr(*listen) {
		return fmt.Errorf("%w: server: --listen %s is not a loopback address; add --force-listen to serve on it", errUsage, *listen)
	}

	logger := slog.New(slog.NewTextHandler(stderr, nil))
	cfg := remote.Config{
		DataDir:     *dataDir,
		PostgresDSN: *pgDSN,
		DevTokens:   *devTokens,
		Retention:   ret,
		Logger:      logger,
		// The changes feed and conflicts.
		TombstoneRetention: tombRet,
		Conflicts:          policies,
		RejectConflicts:    rejectTypes,
		HistoryVersions:    historyVersions,
		HistoryAge:         histAge,
		// On loopback, answer only loopback names (DNS rebinding).
		LoopbackHostsOnly: loopbackAddr(*listen),
	}
	if *tokensFile != "" {
		if cfg.Tokens, err = remote.ReadTokensFile(*tokensFile); err != nil {
			return err
		}
	}
	if fp := os.Getenv(serverFailpointEnv); fp != "" {
		if fp != "remote-after-reserve" {
			return fmt.Errorf("server: unknown failpoint %s=%q", serverFailpointEnv, fp)
		}
		cfg.TestHookAfterReserve = func(context.Context) {
			fmt.Fprintln(stderr, "failpoint remote-after-reserve: paused")
			<-ctx.Done()
		}
	}
	if *dataDir != "" {
		if err := os.MkdirAll(*dataDir, 0o700); err != nil {
			return fmt.Errorf("server: %w", err)
		}
	}

	srv, err := remote.New(cfg)
	if err != nil {
		return err
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	storage := "bbolt in " + *dataDir
	if *pgDSN != "" {
		storage = "PostgreSQL"
	}
	auth := "tokens from " + *tokensFile
	if *devTokens {
		auth = "DEV TOKENS (any token accepted)"
	}
	fmt.Fprintf(stdout, "syncd server: listening on http://%s (storage: %s; auth: %s)\n", ln.Addr(), storage, auth)
	if err := srv.Run(ctx, ln); err != nil {
		return err
	}
	return srv.Close()
}

// loopbackAddr reports whether addr's host is a loopback name or IP. An
// empty host (all interfaces) is not loopback.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// parseRetention parses a positive duration, in days too ("7d").
func parseRetention(s string) (time.Duration, error) {
	d, err := config.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	if d <= 0 {
		return 0, fmt.Errorf("want a duration above 0, got %q", s)
	}
	return d, nil
}
