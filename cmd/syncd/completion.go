package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// subcommands are the second words of the commands that take one.
var subcommands = map[string][]string{
	"ops":        {"list", "show", "retry", "discard"},
	"apps":       {"add", "list", "remove"},
	"service":    {"install", "uninstall", "start", "stop", "restart", "status"},
	"completion": {"bash", "zsh", "fish"},
	"help":       nil, // filled with the command names
}

// cmdCompletion is `syncd completion bash|zsh|fish`: a script that
// completes the command names and their subcommands.
func cmdCompletion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	const usage = "usage: syncd completion bash|zsh|fish\n\n" +
		"  bash: source <(syncd completion bash)   (or save it in /etc/bash_completion.d/syncd)\n" +
		"  zsh:  syncd completion zsh > \"${fpath[1]}/_syncd\"\n" +
		"  fish: syncd completion fish > ~/.config/fish/completions/syncd.fish"
	if len(args) != 1 || isHelp(args[0]) {
		fmt.Fprintln(stderr, usage)
		if len(args) == 1 {
			return nil
		}
		return fmt.Errorf("%w: completion: want one shell: bash, zsh or fish", errUsage)
	}
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	names = append(names, "help")
	subs := func(cmd string) string {
		if cmd == "help" {
			return strings.Join(names[:len(names)-1], " ")
		}
		return strings.Join(subcommands[cmd], " ")
	}
	var b strings.Builder
	switch args[0] {
	case "bash":
		b.WriteString("# bash completion for syncd\n_syncd() {\n\tlocal cur=${COMP_WORDS[COMP_CWORD]}\n")
		fmt.Fprintf(&b, "\tif [ \"$COMP_CWORD\" -eq 1 ]; then COMPREPLY=($(compgen -W %q -- \"$cur\")); return; fi\n", strings.Join(names, " "))
		b.WriteString("\tif [ \"$COMP_CWORD\" -eq 2 ]; then case ${COMP_WORDS[1]} in\n")
		for _, cmd := range slices.Sorted(maps.Keys(subcommands)) {
			fmt.Fprintf(&b, "\t\t%s) COMPREPLY=($(compgen -W %q -- \"$cur\"));;\n", cmd, subs(cmd))
		}
		b.WriteString("\tesac; fi\n}\ncomplete -o default -F _syncd syncd\n")
	case "zsh":
		b.WriteString("#compdef syncd\n_syncd() {\n\tif (( CURRENT == 2 )); then\n")
		fmt.Fprintf(&b, "\t\tcompadd -- %s\n\t\treturn\n\tfi\n\tif (( CURRENT == 3 )); then\n\t\tcase $words[2] in\n", strings.Join(names, " "))
		for _, cmd := range slices.Sorted(maps.Keys(subcommands)) {
			fmt.Fprintf(&b, "\t\t\t%s) compadd -- %s;;\n", cmd, subs(cmd))
		}
		b.WriteString("\t\tesac\n\t\treturn\n\tfi\n\t_files\n}\ncompdef _syncd syncd\n")
	case "fish":
		b.WriteString("# fish completion for syncd\ncomplete -c syncd -f\n")
		for _, c := range commands() {
			fmt.Fprintf(&b, "complete -c syncd -n __fish_use_subcommand -a %s -d %q\n", c.name, c.summary)
		}
		b.WriteString("complete -c syncd -n __fish_use_subcommand -a help -d \"print a command's usage\"\n")
		for _, cmd := range slices.Sorted(maps.Keys(subcommands)) {
			fmt.Fprintf(&b, "complete -c syncd -n \"__fish_seen_subcommand_from %s\" -a %q\n", cmd, subs(cmd))
		}
	default:
		fmt.Fprintln(stderr, usage)
		return fmt.Errorf("%w: completion: unknown shell %q (want bash, zsh or fish)", errUsage, args[0])
	}
	_, err := io.WriteString(stdout, b.String())
	return err
}
