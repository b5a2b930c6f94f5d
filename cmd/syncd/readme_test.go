package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeCommands keeps the README's commands true: every `syncd ...`
// line in its code blocks names a command (and subcommand) that exists,
// and every flag it passes is one that command's help lists. The README
// session itself is run by the tests of each command; this test catches
// a command or flag renamed under it.
func TestReadmeCommands(t *testing.T) {
	t.Parallel()
	f, err := os.Open("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "```") {
			in = !in
			continue
		}
		if l = strings.TrimPrefix(strings.TrimSpace(l), "$ "); in && strings.HasPrefix(l, "syncd ") {
			lines = append(lines, l)
		}
	}
	if len(lines) < 5 {
		t.Fatalf("found %d syncd commands in README.md; the parser is wrong", len(lines))
	}
	flagRE := regexp.MustCompile(`^--?([a-z][a-z0-9-]*)`)
	for _, l := range lines {
		// The command line alone: no pipe, redirection or background.
		for _, cut := range []string{" |", " >", " &", " 2>"} {
			if i := strings.Index(l, cut); i >= 0 {
				l = l[:i]
			}
		}
		args := strings.Fields(l)[1:]
		var words, flags []string
		for _, a := range args {
			if m := flagRE.FindStringSubmatch(a); m != nil {
				flags = append(flags, m[1])
			} else if len(flags) == 0 {
				words = append(words, a)
			}
		}
		// The help of the command and its subcommand (positional
		// arguments after them are left out until the help is found).
		var help string
		for n := min(len(words), 2); n >= 1; n-- {
			var out bytes.Buffer
			if err := run(append(append([]string{}, words[:n]...), "--help"), &out, &out); err == nil || errors.Is(err, flag.ErrHelp) {
				help = out.String()
				break
			}
		}
		if help == "" {
			t.Errorf("README: %q: no such command (its --help failed)", l)
			continue
		}
		for _, fl := range flags {
			if !regexp.MustCompile(`(?m)^\s+--?` + regexp.QuoteMeta(fl) + `\b`).MatchString(help) {
				t.Errorf("README: %q: flag -%s is not in the command's help", l, fl)
			}
		}
	}
}
