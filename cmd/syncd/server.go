package main

import (
	"context"
	"errors"
	"io"
)

// cmdServer runs the reference remote server. (Being built: issue 3.)
func cmdServer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("server: not built yet")
}
