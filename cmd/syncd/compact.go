package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"

	"github.com/syncd/syncd/queue"
)

// cmdCompact rewrites the data file without its free pages. syncd must
// be stopped: a running daemon holds the file's lock.
func cmdCompact(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("compact", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", envOr("SYNCD_DATA_DIR", defaultDataDir()), "syncd's data directory (env SYNCD_DATA_DIR)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: syncd compact [--data-dir DIR]   (stop syncd first)")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, "compact"); err != nil {
		return err
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
