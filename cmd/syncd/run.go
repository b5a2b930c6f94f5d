package main

import (
	"context"
	"errors"
	"io"
)

// cmdRun runs the daemon in the foreground. (Being built: issue 2.)
func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("run: not built yet")
}
