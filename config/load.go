package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/syncd/syncd/localapi"
)

// setting describes one field of Settings to every source: the config
// file key (the field's json name), the flag --<flag>, and the
// environment variable SYNCD_<KEY IN UPPER SNAKE CASE>.
type setting struct {
	key   string
	flag  string
	usage string
	path  bool // a file system path: made absolute when passed on
	field func(*Settings) any
}

// table lists the settings in the order --print-config shows them.
var table = []setting{
	{"dataDir", "data-dir", "data directory: the queue file syncd.db and the API token api-token", true, func(s *Settings) any { return &s.DataDir }},
	{"listen", "listen", "address of the local API (loopback unless force-listen)", false, func(s *Settings) any { return &s.Listen }},
	{"forceListen", "force-listen", "allow a listen address that is not loopback", false, func(s *Settings) any { return &s.ForceListen }},
	{"socket", "socket", "path of the local API's Unix socket, served to this user's processes only, or " + SocketOff + " (default: DATA_DIR/" + localapi.SocketFileName + " on Linux and macOS, " + SocketOff + " on Windows)", true, func(s *Settings) any { return &s.Socket }},
	{"allowedHosts", "allowed-host", "a Host name or address the local API accepts besides loopback names, for a forced listen reached by a LAN name (repeatable, or comma-separated)", false, func(s *Settings) any { return &s.AllowedHosts }},
	{"remote", "remote", "base URL of the app's server (empty: the embedded reference server)", false, func(s *Settings) any { return &s.Remote }},
	{"allowedOrigins", "allowed-origin", "a browser origin allowed to call the API, e.g. http://localhost:3000 (repeatable, or comma-separated)", false, func(s *Settings) any { return &s.AllowedOrigins }},
	{"entityTypes", "entity-types", "comma-separated entity types apps may use (default: any)", false, func(s *Settings) any { return &s.EntityTypes }},
	{"mergeableTypes", "mergeable-types", "comma-separated entity types whose unsent updates a later write of the entity may supersede (default: none)", false, func(s *Settings) any { return &s.MergeableTypes }},
	{"concurrency", "concurrency", "operations sent to the remote at once", false, func(s *Settings) any { return &s.Concurrency }},
	{"requestTimeout", "request-timeout", "bound on one request to the remote", false, func(s *Settings) any { return &s.RequestTimeout }},
	{"maxOperationAge", "max-operation-age", "age past which an operation that may have been applied waits for the user instead of being resent", false, func(s *Settings) any { return &s.MaxOperationAge }},
	{"doneRetention", "done-retention", "how long sent operations are kept", false, func(s *Settings) any { return &s.DoneRetention }},
	{"maxDataBytes", "max-data-bytes", "largest entity data accepted", false, func(s *Settings) any { return &s.MaxDataBytes }},
	{"maxBodyBytes", "max-body-bytes", "largest local API request body (default: max-data-bytes + 64 KiB)", false, func(s *Settings) any { return &s.MaxBodyBytes }},
	{"maxQueueBytes", "max-queue-bytes", "bound on what the operations waiting to be sent take; past it writes answer 507 storage_full (0: no limit)", false, func(s *Settings) any { return &s.MaxQueueBytes }},
	{"batch", "batch", "send ready operations in batches: auto (where the remote advertises a batch route in GET /v1/capabilities), on or off", false, func(s *Settings) any { return &s.Batch }},
	{"pull", "pull", "pull the server's changes: auto (when the remote has a changes feed), on or off", false, func(s *Settings) any { return &s.Pull }},
	{"ui", "ui", "serve the status page under /ui/ (syncd ui opens it): on or off", false, func(s *Settings) any { return &s.UI }},
	{"lockTimeout", "lock-timeout", "how long to wait for another syncd to release the data directory", false, func(s *Settings) any { return &s.LockTimeout }},
	{"shutdownTimeout", "shutdown-timeout", "how long a stop lets sends in flight finish", false, func(s *Settings) any { return &s.ShutdownTimeout }},
	{"logLevel", "log-level", "debug, info, warn or error", false, func(s *Settings) any { return &s.LogLevel }},
	{"logFormat", "log-format", "text or json", false, func(s *Settings) any { return &s.LogFormat }},
	{"serviceName", "service-name", "name of the OS service", false, func(s *Settings) any { return &s.ServiceName }},
}

// envName is the environment variable of a config file key: dataDir →
// SYNCD_DATA_DIR, allowedOrigins → SYNCD_ALLOWED_ORIGINS.
func envName(key string) string {
	var b strings.Builder
	b.WriteString("SYNCD_")
	for _, r := range key {
		if unicode.IsUpper(r) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}

// EnvConfig names the config file, as --config does.
const EnvConfig = "SYNCD_CONFIG"

// set parses text into the field for the flag and the environment. A
// list takes comma-separated items; appendList adds them to what is
// there instead of replacing it.
func set(field any, text string, appendList bool) error {
	switch p := field.(type) {
	case *string:
		*p = text
	case *bool:
		v, err := strconv.ParseBool(text)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", text)
		}
		*p = v
	case *int:
		v, err := strconv.Atoi(text)
		if err != nil {
			return fmt.Errorf("want an integer, got %q", text)
		}
		*p = v
	case *int64:
		v, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return fmt.Errorf("want an integer, got %q", text)
		}
		*p = v
	case *time.Duration:
		v, err := ParseDuration(text)
		if err != nil {
			return err
		}
		*p = v
	case *[]string:
		if !appendList {
			*p = nil
		}
		for item := range strings.SplitSeq(text, ",") {
			if item = strings.TrimSpace(item); item != "" {
				*p = append(*p, item)
			}
		}
	default:
		panic(fmt.Sprintf("config: no parser for %T", field))
	}
	return nil
}

// decode sets the field from its config file value.
func decode(field any, raw json.RawMessage) error {
	if d, ok := field.(*time.Duration); ok {
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return fmt.Errorf("want a duration string like \"30s\", got %s", raw)
		}
		return set(d, text, false)
	}
	if l, ok := field.(*[]string); ok {
		*l = nil // a list in the file replaces the default
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(field); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("want a JSON %s, got %s", jsonKind(field), raw)
		}
		return err
	}
	return nil
}

func jsonKind(field any) string {
	switch field.(type) {
	case *string:
		return "string"
	case *bool:
		return "boolean"
	case *int, *int64:
		return "integer"
	case *[]string:
		return "array of strings"
	}
	return "value"
}

// Flags are the settings' flags registered on a FlagSet, plus --config
// and --print-config. They record what the command line set, in order,
// so Resolve can lay it over the file and the environment, and Args can
// pass it on (to an installed service).
type Flags struct {
	fs          *flag.FlagSet
	given       []givenFlag
	configFile  string
	printConfig bool
}

type givenFlag struct {
	s    *setting
	text string
}

// flagValue is one setting's flag.
type flagValue struct {
	f *Flags
	s *setting
}

func (v flagValue) String() string { return "" }

func (v flagValue) Set(text string) error {
	// Check the text now, so a bad value is reported as the flag's.
	var scratch Settings
	if err := set(v.s.field(&scratch), text, true); err != nil {
		return err
	}
	v.f.given = append(v.f.given, givenFlag{v.s, text})
	return nil
}

func (v flagValue) IsBoolFlag() bool {
	_, ok := v.s.field(&Settings{}).(*bool)
	return ok
}

// RegisterFlags adds the flags of every setting, --config and
// --print-config to fs.
func RegisterFlags(fs *flag.FlagSet) *Flags {
	f := &Flags{fs: fs}
	def := Defaults(DefaultScope(), os.Getenv)
	for i := range table {
		s := &table[i]
		usage := s.usage + " (env " + envName(s.key)
		if d := defaultText(s.field(&def)); d != "" {
			usage += "; default " + d
		}
		fs.Var(flagValue{f, s}, s.flag, usage+")")
	}
	fs.StringVar(&f.configFile, "config", "", "config file (JSON; env "+EnvConfig+"; default: the per-OS config file if it exists)")
	fs.BoolVar(&f.printConfig, "print-config", false, "print the effective configuration as JSON and exit")
	return f
}

// defaultText shows a default in the usage text; "" for a zero value.
func defaultText(field any) string {
	switch p := field.(type) {
	case *string:
		return *p
	case *int:
		if *p != 0 {
			return strconv.Itoa(*p)
		}
	case *time.Duration:
		if *p != 0 {
			return FormatDuration(*p)
		}
	}
	return ""
}

// Args returns the settings flags that were given, as --name=value in
// command-line order, with paths made absolute: what an installed
// service must be started with to run as this command line asked.
// --print-config is left out.
func (f *Flags) Args() ([]string, error) {
	var args []string
	if f.configFile != "" {
		p, err := filepath.Abs(f.configFile)
		if err != nil {
			return nil, fmt.Errorf("config: --config: %w", err)
		}
		args = append(args, "--config="+p)
	}
	for _, g := range f.given {
		text := g.text
		if g.s.path && text != "" && !(g.s.key == "socket" && text == SocketOff) {
			p, err := filepath.Abs(text)
			if err != nil {
				return nil, fmt.Errorf("config: --%s: %w", g.s.flag, err)
			}
			text = p
		}
		args = append(args, "--"+g.s.flag+"="+text)
	}
	return args, nil
}

// Loaded is the outcome of Load and Resolve.
type Loaded struct {
	// Settings are the effective settings, checked, with derived
	// defaults filled and DataDir absolute.
	Settings Settings
	// File is the config file that was read; empty if none.
	File string
	// PrintConfig is set when --print-config was given: print Settings
	// (WriteJSON) and exit.
	PrintConfig bool
}

// Resolve lays defaults for scope, the config file, the SYNCD_*
// variables of getenv (nil: os.Getenv) and the parsed flags over each
// other, later over earlier, and checks the result.
//
// The config file is --config, else $SYNCD_CONFIG, else the scope's
// default config file if it exists. A list setting given as a flag
// replaces the list from the file and the environment (repeating the
// flag adds to it).
func (f *Flags) Resolve(scope Scope, getenv func(string) string) (Loaded, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	s := Defaults(scope, getenv)
	var l Loaded

	file, explicit := f.configFile, true
	if file == "" {
		file = getenv(EnvConfig)
	}
	if file == "" {
		explicit = false
		if p, err := DefaultPaths(scope, getenv); err == nil {
			file = p.ConfigFile
		}
	}
	if file != "" {
		read, err := readFile(&s, file, explicit)
		if err != nil {
			return l, err
		}
		if read {
			l.File = file
		}
	}

	for i := range table {
		st := &table[i]
		name := envName(st.key)
		if text := getenv(name); text != "" {
			if err := set(st.field(&s), text, false); err != nil {
				return l, fmt.Errorf("%w: %s: %v", ErrInvalid, name, err)
			}
		}
	}

	seen := map[string]bool{}
	for _, g := range f.given {
		// The first occurrence of a list flag replaces the list, the
		// next ones add to it.
		err := set(g.s.field(&s), g.text, seen[g.s.flag])
		seen[g.s.flag] = true
		if err != nil {
			return l, fmt.Errorf("%w: --%s: %v", ErrInvalid, g.s.flag, err)
		}
	}

	if err := s.finish(); err != nil {
		return l, err
	}
	l.Settings = s
	l.PrintConfig = f.printConfig
	return l, nil
}

// ResolveFile resolves the settings as `syncd run` would with no flags
// but --config (configFile, which may be empty): defaults for scope, the
// config file, the SYNCD_* variables of getenv. The client commands use
// it to find the daemon the config file describes.
func ResolveFile(configFile string, scope Scope, getenv func(string) string) (Loaded, error) {
	return (&Flags{configFile: configFile}).Resolve(scope, getenv)
}

// readFile lays the config file over s. A missing file is an error only
// when it was named explicitly; read says whether a file was read.
func readFile(s *Settings, file string, explicit bool) (read bool, err error) {
	data, err := os.ReadFile(file)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if explicit {
				return false, fmt.Errorf("%w: %s", ErrNoConfigFile, file)
			}
			return false, nil
		}
		return false, fmt.Errorf("config: %w", err)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil {
		return false, fmt.Errorf("%w: %s: not a JSON object: %v", ErrInvalid, file, err)
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys) // report the same error every time
	for _, k := range keys {
		i := slices.IndexFunc(table, func(st setting) bool { return st.key == k })
		if i < 0 {
			return false, fmt.Errorf("%w %q in %s (known keys: %s)", ErrUnknownKey, k, file, knownKeys())
		}
		if err := decode(table[i].field(s), obj[k]); err != nil {
			return false, fmt.Errorf("%w: %s: %s: %v", ErrInvalid, file, k, err)
		}
	}
	return true, nil
}

func knownKeys() string {
	keys := make([]string, len(table))
	for i, st := range table {
		keys[i] = st.key
	}
	return strings.Join(keys, ", ")
}

// Load parses the arguments of `syncd run` and resolves the settings
// for this process's scope (DefaultScope) with getenv (nil: os.Getenv).
// Usage and flag errors are written to output (nil: discarded); -h
// returns flag.ErrHelp; a stray argument or a bad value is ErrInvalid.
func Load(args []string, getenv func(string) string, output io.Writer) (Loaded, error) {
	fs, f := NewFlagSet("run", output)
	// A bad flag comes back as an error to print once, without the
	// usage around it; -h prints the usage.
	usage := fs.Usage
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	if output != nil {
		fs.SetOutput(output)
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage()
			return Loaded{}, err
		}
		return Loaded{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if fs.NArg() > 0 {
		return Loaded{}, fmt.Errorf("%w: unexpected argument %q", ErrInvalid, fs.Arg(0))
	}
	return f.Resolve(DefaultScope(), getenv)
}

// NewFlagSet returns a FlagSet named name with the settings' flags
// (RegisterFlags), writing usage to output (nil: discarded).
func NewFlagSet(name string, output io.Writer) (*flag.FlagSet, *Flags) {
	if output == nil {
		output = io.Discard
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(output)
	f := RegisterFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(output, "usage: syncd %s [flags]\n\n", name)
		fmt.Fprintf(output, "Settings come from built-in defaults, then the config file, then SYNCD_* environment variables, then flags.\n\n")
		fs.PrintDefaults()
	}
	return fs, f
}
