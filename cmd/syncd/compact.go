package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/queue"
)

// cmdCompact rewrites the data file without its free pages. syncd must
// be stopped: a running daemon holds the file's lock.
func cmdCompact(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("compact", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", "", "syncd's data directory (env SYNCD_DATA_DIR; default: dataDir from the config file, else the per-OS default)")
	configFile := fs.String("config", "", "syncd's config file, read for dataDir (env "+config.EnvConfig+"; default: the per-OS config file if it exists)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: syncd compact [--data-dir DIR] [--config FILE]   (stop syncd first)")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, "compact"); err != nil {
		return err
	}
	if *dataDir == "" || *configFile != "" {
		// The data directory the same config runs syncd on; a named
		// config file is checked even when --data-dir overrides it.
		dir := *dataDir
		l, err := config.ResolveFile(*configFile, config.DefaultScope(), func(name string) string {
			if name == "SYNCD_DATA_DIR" && dir != "" {
				return dir
			}
			return os.Getenv(name)
		})
		if err != nil {
			return fmt.Errorf("%w: compact: %v", errUsage, err)
		}
		*dataDir = l.Settings.DataDir
	}
	before, after, err := queue.Compact(filepath.Join(*dataDir, dataFileName))
	if errors.Is(err, queue.ErrLocked) {
		return fmt.Errorf("compact: syncd is running on %s; stop it first (syncd service stop)", *dataDir)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "compacted %s: %s -> %s\n", filepath.Join(*dataDir, dataFileName), bytesHuman(before), bytesHuman(after))
	return nil
}
