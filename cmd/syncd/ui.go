package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"time"

	"github.com/syncd/syncd/localapi/client"
)

// cmdUI is `syncd ui`: it asks the running syncd for a one-time sign-in
// link to its status page and opens it in the default browser, or with
// --no-open prints it as the last line of stdout.
func cmdUI(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var noOpen bool
	cf, pos, err := parseClientFlags("ui", args, stderr, "ui [--no-open] [--addr ADDR] [--data-dir DIR]", func(fs *flag.FlagSet) {
		fs.BoolVar(&noOpen, "no-open", false, "print the sign-in link as the last line of stdout instead of opening the browser (the link works once, within a minute)")
	})
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("%w: ui: unexpected argument %q", errUsage, pos[0])
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	link, err := c.UILink(ctx)
	var ae *client.Error
	if errors.As(err, &ae) && ae.Code == "not_found" {
		return &exitError{code: exitFailure, err: errors.New("ui: this syncd's status page is turned off (ui: off). Turn it on: remove \"ui\": \"off\" from the config file (or set it to \"on\"), or drop --ui=off or SYNCD_UI=off, and restart syncd")}
	}
	if err != nil {
		return apiErr(err)
	}
	if noOpen {
		_, err := fmt.Fprintln(stdout, link.URL)
		return err
	}
	until := link.ExpiresAt.Local().Format(time.TimeOnly)
	if err := openBrowser(link.URL, runtime.GOOS, os.Getenv); err != nil {
		fmt.Fprintf(stderr, "syncd: could not open a browser (%v); open this link yourself, once, before %s:\n", err, until)
		_, err := fmt.Fprintln(stdout, link.URL)
		return err
	}
	fmt.Fprintf(stdout, "syncd: opened the status page in your browser (its sign-in link works once, before %s; run syncd ui again for another)\n", until)
	return nil
}

// browserCommands are the commands that may open url on goos, in the
// order tried: $BROWSER if set (as Go's own tools do), then the OS's
// default handler.
func browserCommands(url, goos string, getenv func(string) string) [][]string {
	var cmds [][]string
	if b := getenv("BROWSER"); b != "" {
		cmds = append(cmds, []string{b, url})
	}
	switch goos {
	case "darwin":
		cmds = append(cmds, []string{"/usr/bin/open", url})
	case "windows":
		cmds = append(cmds, []string{"rundll32", "url.dll,FileProtocolHandler", url})
	default:
		cmds = append(cmds, []string{"xdg-open", url})
	}
	return cmds
}

// browserWait is how long a browser command may run before it is taken
// to be the browser itself, started and running: success.
const browserWait = 3 * time.Second

// openBrowser opens url with the first of browserCommands that works:
// one that exits 0, or still runs after browserWait.
func openBrowser(url, goos string, getenv func(string) string) error {
	var errs []error
	for _, args := range browserCommands(url, goos, getenv) {
		cmd := exec.Command(args[0], args[1:]...)
		if err := cmd.Start(); err != nil {
			errs = append(errs, err)
			continue
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		t := time.NewTimer(browserWait)
		select {
		case err := <-exited:
			t.Stop()
			if err == nil {
				return nil
			}
			errs = append(errs, fmt.Errorf("%s: %w", args[0], err))
		case <-t.C:
			// Still running: the browser itself. It goes on after
			// syncd ui exits.
			return nil
		}
	}
	return errors.Join(errs...)
}
